// How a coordinator and its workers exchange messages (dist/messages.h):
// the one interface the pipeline is written against, with a ZeroMQ
// implementation (CURVE: authenticated and encrypted; dist/zmq_transport.h)
// and an MPI one for clusters that already run MPI. A transport moves whole
// messages in order per peer; it neither interprets nor retries them.
//
// Threads: send() may be called from any thread; receive() from one thread
// only, which also pushes the queued sends out (the coordinator's and the
// worker's I/O threads call it in a loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds4::dist {

// A peer as the transport knows it (a ZeroMQ routing id, an MPI rank).
using PeerId = std::string;

struct Incoming {
  PeerId peer;
  std::string address;  // where it came from, for logs ("tcp://10.0.0.2:51234")
  std::vector<uint8_t> bytes;
};

// The coordinator's end: every worker.
class Hub {
 public:
  virtual ~Hub() = default;
  // Queues a message for `peer`. A peer that is gone loses it (the
  // coordinator's heartbeats notice the peer itself).
  virtual void send(const PeerId& peer, std::vector<uint8_t> bytes) = 0;
  // The next message from any peer, waiting at most `timeout`.
  virtual std::optional<Incoming> receive(std::chrono::milliseconds timeout) = 0;
  // What happened at the door since the last call: peers refused for their
  // key, failed handshakes (one line each, for the log).
  virtual std::vector<std::string> take_security_events() = 0;
  // Peers a send could not reach since the last call (their connection is
  // gone; a worker that reconnects comes back under a new id).
  virtual std::vector<PeerId> take_unreachable() = 0;
  // "tcp://0.0.0.0:5555, CURVE", for logs.
  virtual std::string describe() const = 0;
  // Where workers reach it (a port asked as "*" resolved).
  virtual std::string endpoint() const = 0;
};

// A worker's end: its coordinator.
class Link {
 public:
  virtual ~Link() = default;
  virtual void send(std::vector<uint8_t> bytes) = 0;
  virtual std::optional<std::vector<uint8_t>> receive(std::chrono::milliseconds timeout) = 0;
  virtual std::vector<std::string> take_security_events() = 0;
  virtual std::string describe() const = 0;
};

}  // namespace ds4::dist
