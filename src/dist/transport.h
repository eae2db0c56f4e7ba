// How a coordinator and its workers exchange messages (dist/messages.h):
// the one interface the pipeline is written against, with a ZeroMQ
// implementation (CURVE: authenticated and encrypted; dist/zmq_transport.h)
// and an MPI one for clusters that already run MPI. A transport moves whole
// messages in order per peer; it neither interprets nor retries them.
//
// Threads: send() may be called from any thread; receive() from one thread
// only, which also pushes the queued sends out (the coordinator's and the
// worker's I/O threads call it in a loop).
//
// A worker's link also reaches other workers: it offers a forward address
// (its HELLO carries it) where the stage before it hands over its hidden
// states, and send_to() delivers to such an address, so a pipeline's hidden
// states go worker to worker instead of through the coordinator.
#pragma once

#include <chrono>
#include <mutex>
#include <utility>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/wire.h"

namespace ds4::dist {

// A peer as the transport knows it (a ZeroMQ routing id, an MPI rank).
using PeerId = std::string;

struct Incoming {
  PeerId peer;
  std::string address;  // where it came from, for logs ("tcp://10.0.0.2:51234")
  Bytes bytes;
};

// The coordinator's end: every worker.
class Hub {
 public:
  virtual ~Hub() = default;
  // Queues a message for `peer`. A peer that is gone loses it (the
  // coordinator's heartbeats notice the peer itself).
  virtual void send(const PeerId& peer, Bytes bytes) = 0;
  // The next message from any peer, waiting at most `timeout`.
  virtual std::optional<Incoming> receive(std::chrono::milliseconds timeout) = 0;
  // What happened at the door since the last call: peers refused for their
  // key, failed handshakes (one line each, for the log).
  virtual std::vector<std::string> take_security_events() = 0;
  // Peers a send could not reach since the last call (their connection is
  // gone; a worker that reconnects comes back under a new id).
  virtual std::vector<PeerId> take_unreachable() = 0;
  // Peers from which part of a longer message came since the last call
  // (dist/pieces.h): alive, though no whole message of theirs arrived.
  virtual std::vector<PeerId> take_heard() { return {}; }
  // "tcp://0.0.0.0:5555, CURVE", for logs.
  virtual std::string describe() const = 0;
  // Where workers reach it (a port asked as "*" resolved).
  virtual std::string endpoint() const = 0;
};

// A message a worker's link received: from its coordinator, or handed over
// by another worker at its forward address.
struct Received {
  Bytes bytes;
  bool from_coordinator = true;
};

// A message send_to() could not deliver, and why (naming the address).
struct Undelivered {
  std::string address, reason;
  Bytes bytes;
};

// A worker's end: its coordinator, and the other workers' forward addresses.
class Link {
 public:
  virtual ~Link() = default;
  virtual void send(Bytes bytes) = 0;
  virtual std::optional<Received> receive(std::chrono::milliseconds timeout) = 0;
  // Whether part of a longer message came from the coordinator since the
  // last call (dist/pieces.h): it is alive, though nothing whole arrived.
  virtual bool take_heard_from_coordinator() { return false; }
  virtual std::vector<std::string> take_security_events() = 0;
  virtual std::string describe() const = 0;
  // Where other workers reach this one ("tcp://*:PORT": the host is
  // whatever address the coordinator sees this worker at; "rank 2"); empty
  // when this link takes nothing from other workers.
  virtual std::string forward_address() const { return ""; }
  // Queues a message for another worker's forward address; in order per
  // address. One that cannot be delivered in time comes back from
  // take_undelivered(), as does everything queued behind it.
  virtual void send_to(const std::string& address, Bytes bytes) {
    std::lock_guard lock(undelivered_mutex_);
    undelivered_.push_back({address, "this transport does not reach other workers", std::move(bytes)});
  }
  virtual std::vector<Undelivered> take_undelivered() {
    std::lock_guard lock(undelivered_mutex_);
    return std::exchange(undelivered_, {});
  }
  // Connections to next-stage addresses that broke since the last call
  // (address, why): what was handed over on them may never arrive.
  virtual std::vector<std::pair<std::string, std::string>> take_lost_connections() { return {}; }

 protected:
  std::mutex undelivered_mutex_;
  std::vector<Undelivered> undelivered_;
};

}  // namespace ds4::dist
