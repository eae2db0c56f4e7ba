#include "dist/zmq_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <mutex>
#include <utility>

#include <zmq.hpp>

#include "core/error.h"

namespace ds4::dist {

namespace {

using Clock = std::chrono::steady_clock;

// ZMTP heartbeats: a connection that carries nothing for kPeerSilentMs is
// closed (a link set down gives no EOF otherwise).
constexpr int kHeartbeatIvlMs = 500;
constexpr int kPeerSilentMs = 3000;
// A send that cannot go out for this long (the peer stopped reading) fails.
constexpr int kSendTimeoutMs = 10000;
// A hand-over to the next stage that cannot start for this long (no
// completed connection there) comes back to the worker.
constexpr int kForwardTimeoutMs = 3000;
// An unfinished message whose sender sent nothing for this long is dropped
// (the sender went away; a reconnecting one comes back under a new id).
constexpr std::chrono::milliseconds kUnfinishedIdle{10000};

std::atomic<uint64_t> g_monitor_serial{0};

// The time left until `deadline` in whole ms, rounded up, never negative. A
// poll for the rounded-down time wakes just before the deadline, and the loop
// polls again for 0 ms: a 20 ms receive() made ~12 poll calls instead of ~6
// (strace of a worker; each zmq::poll is several syscalls).
std::chrono::milliseconds ms_until(Clock::time_point deadline) {
  return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()), std::chrono::milliseconds(0));
}

std::string event_line(uint16_t event, uint32_t value, const std::string& address) {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return "refused " + address + ": its key is not the cluster's (ZAP status " + std::to_string(value) + ")";
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      return "handshake with " + address +
             " failed: the peer does not hold the cluster key, or is not a ds4 peer (ZMTP error " +
             std::to_string(value) + ")";
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return "handshake with " + address + " failed (connection closed during the CURVE handshake)";
    default:
      return "";
  }
}

// The frames of one message waiting on `socket` (none when none waits).
std::vector<zmq::message_t> receive_frames(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  for (;;) {
    zmq::message_t m;
    if (!socket.recv(m, zmq::recv_flags::dontwait)) break;
    const bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) break;
  }
  return frames;
}

// Every ds4 socket: no lingering, ZMTP heartbeats, quick reconnects, CURVE
// as the server (the coordinator's door, a worker's forward address) or as a
// client holding the cluster key.
void configure(zmq::socket_t& socket, const CurveKey& key, bool server) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndtimeo, kSendTimeoutMs);
  socket.set(zmq::sockopt::heartbeat_ivl, kHeartbeatIvlMs);
  socket.set(zmq::sockopt::heartbeat_timeout, kPeerSilentMs);
  socket.set(zmq::sockopt::heartbeat_ttl, kPeerSilentMs);
  socket.set(zmq::sockopt::reconnect_ivl, 100);
  socket.set(zmq::sockopt::reconnect_ivl_max, 1000);
  // No limit on queued messages: the pipeline's window bounds what is in
  // flight, and a long message in pieces must not stall at ZeroMQ's default
  // of 1000 (a blocked send would hold up the I/O thread's heartbeats).
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  if (server) {
    socket.set(zmq::sockopt::curve_server, true);
    socket.set(zmq::sockopt::curve_secretkey, key.secret_z85);
    socket.set(zmq::sockopt::zap_domain, "ds4");
  } else {
    socket.set(zmq::sockopt::curve_serverkey, key.public_z85);
    socket.set(zmq::sockopt::curve_publickey, key.public_z85);
    socket.set(zmq::sockopt::curve_secretkey, key.secret_z85);
  }
}

constexpr int kHandshakeEvents =
    ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

// A PAIR socket that receives `socket`'s `events` (failed handshakes by
// default; read_monitor_event).
zmq::socket_t attach_monitor(zmq::context_t& ctx, zmq::socket_t& socket, int events = kHandshakeEvents) {
  const std::string monitor = "inproc://ds4-monitor-" + std::to_string(g_monitor_serial++);
  if (zmq_socket_monitor(socket.handle(), monitor.c_str(), events) != 0)
    throw Error(std::string("zmq_socket_monitor: ") + zmq_strerror(zmq_errno()));
  zmq::socket_t pair(ctx, zmq::socket_type::pair);
  pair.connect(monitor);
  return pair;
}

struct MonitorEvent {
  uint16_t event = 0;
  std::string line;  // for a failed handshake; empty otherwise
};

// A monitor's next event, when one waits.
std::optional<MonitorEvent> read_monitor_event(zmq::socket_t& monitor) {
  zmq::message_t head, address;
  if (!monitor.recv(head, zmq::recv_flags::dontwait)) return std::nullopt;
  if (!head.more() || !monitor.recv(address, zmq::recv_flags::dontwait)) return std::nullopt;
  if (head.size() < 6) return std::nullopt;
  MonitorEvent e;
  uint32_t value;
  std::memcpy(&e.event, head.data(), 2);
  std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
  e.line = event_line(e.event, value, address.to_string());
  return e;
}

// What both ends share: the context, a socket with a monitor, the queue of
// sends from other threads and the eventfd that wakes receive() for them.
class ZmqEnd {
 protected:
  ZmqEnd(zmq::socket_type type, const CurveKey& key, bool server, size_t piece_bytes)
      : socket_(ctx_, type), piece_bytes_(piece_bytes) {
    if (piece_bytes_ == 0) throw Error("the piece size of long messages must be positive");
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_ < 0) throw Error("eventfd: " + std::string(std::strerror(errno)));
    configure(socket_, key, server);
    monitor_ = attach_monitor(ctx_, socket_);
  }
  ~ZmqEnd() {
    if (wake_ >= 0) ::close(wake_);
  }

  void queue(std::vector<Bytes> frames) {
    {
      std::lock_guard lock(mutex_);
      outgoing_.push_back(std::move(frames));
    }
    wake();
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_, &one, sizeof one);
  }

  // Sends what other threads queued; a frame that cannot go out is dropped
  // (ROUTER: the peer is gone) and noted.
  void flush() {
    std::deque<std::vector<Bytes>> batch;
    {
      std::lock_guard lock(mutex_);
      batch.swap(outgoing_);
    }
    for (auto& frames : batch) {
      bool sent = true;
      try {
        sent = send_in_pieces(frames);
        if (!sent) note("a send timed out after " + std::to_string(kSendTimeoutMs) + " ms (the peer stopped reading)");
      } catch (const zmq::error_t& e) {
        // ROUTER_MANDATORY: EHOSTUNREACH names a peer whose connection is gone.
        if (e.num() != EHOSTUNREACH) note(std::string("a send failed: ") + e.what());
        sent = false;
      }
      if (!sent && frames.size() == 2) {
        std::lock_guard lock(mutex_);
        unreachable_.emplace_back(frames[0].begin(), frames[0].end());
      }
    }
  }

  // Sends one message: its envelope frames (a ROUTER's peer id) before
  // each piece of the last frame. False when a send timed out.
  bool send_in_pieces(const std::vector<Bytes>& frames) {
    const Bytes& payload = frames.back();
    const size_t n = piece_count(payload.size(), piece_bytes_);
    for (size_t piece = 0; piece < n; ++piece) {
      for (size_t i = 0; i + 1 < frames.size(); ++i)
        if (!socket_.send(zmq::message_t(frames[i].data(), frames[i].size()), zmq::send_flags::sndmore)) return false;
      if (!socket_.send(piece_message(payload, piece), zmq::send_flags::none)) return false;
    }
    return true;
  }

  zmq::message_t piece_message(std::span<const uint8_t> payload, size_t piece) const {
    zmq::message_t m(piece_wire_bytes(payload.size(), piece_bytes_, piece));
    write_piece(payload, piece_bytes_, piece, static_cast<uint8_t*>(m.data()));
    return m;
  }

  // One received transport message from `sender`: a whole message when
  // one is complete; a piece without one marks the sender heard.
  std::optional<Bytes> reassemble(const std::string& sender, const zmq::message_t& frame, const std::string& from,
                                  bool& heard) {
    const auto now = Clock::now();
    for (std::string& line : reassembler_.forget_idle(now, kUnfinishedIdle)) note(std::move(line));
    auto got = reassembler_.take(sender, {static_cast<const uint8_t*>(frame.data()), frame.size()}, now);
    if (!got.problem.empty()) note(from + ": " + got.problem);
    if (got.piece && !got.message) heard = true;
    return std::move(got.message);
  }

  // Waits for the socket (or a wake, or a door event) at most `timeout`;
  // returns the frames of one message when there is one.
  std::optional<std::vector<zmq::message_t>> wait(std::chrono::milliseconds timeout,
                                                  zmq::socket_t* zap = nullptr) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      flush();
      zmq::pollitem_t items[4] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                  {monitor_.handle(), 0, ZMQ_POLLIN, 0},
                                  {nullptr, wake_, ZMQ_POLLIN, 0},
                                  {zap != nullptr ? zap->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, zap != nullptr ? 4 : 3, ms_until(deadline));
      if (items[2].revents & ZMQ_POLLIN) drain_wake();
      if (items[1].revents & ZMQ_POLLIN) read_monitor(monitor_);
      if (zap != nullptr && (items[3].revents & ZMQ_POLLIN)) answer_zap(*zap);
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> frames = receive_frames(socket_);
        if (!frames.empty()) return frames;
      }
      if (Clock::now() >= deadline) return std::nullopt;
    }
  }

  std::vector<std::string> take_events() {
    std::lock_guard lock(mutex_);
    return std::exchange(events_, {});
  }
  std::vector<PeerId> take_unreachable_peers() {
    std::lock_guard lock(mutex_);
    return std::exchange(unreachable_, {});
  }
  void note(std::string line) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(line));
  }

  void drain_wake() {
    uint64_t n;
    [[maybe_unused]] const ssize_t r = ::read(wake_, &n, sizeof n);
  }
  void read_monitor(zmq::socket_t& monitor) {
    if (auto e = read_monitor_event(monitor); e && !e->line.empty()) note(std::move(e->line));
  }
  int wake_fd() const { return wake_; }
  zmq::socket_t& monitor() { return monitor_; }

  zmq::context_t ctx_;
  zmq::socket_t socket_;
  const size_t piece_bytes_;

  // ZAP (RFC 27): admit a CURVE client only when its public key is ours.
  void answer_zap(zmq::socket_t& zap) {
    std::vector<zmq::message_t> req = receive_frames(zap);
    if (req.size() < 6) return;
    const std::string address = req[3].to_string();
    const std::string mechanism = req[5].to_string();
    bool ok = false;
    if (mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
      char z85[41];
      ok = zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32) != nullptr && public_z85_ == z85;
    }
    if (!ok) note("refused a peer at " + address + ": it does not hold the cluster key");
    const std::string status = ok ? "200" : "400";
    const std::string text = ok ? "OK" : "not the cluster key";
    zap.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
    zap.send(req[1], zmq::send_flags::sndmore);
    zap.send(zmq::buffer(status), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(text), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(std::string_view(ok ? "worker" : "")), zmq::send_flags::sndmore);
    zap.send(zmq::message_t(), zmq::send_flags::none);
  }

 protected:
  std::string public_z85_;

 private:
  zmq::socket_t monitor_;
  int wake_ = -1;
  std::mutex mutex_;
  std::deque<std::vector<Bytes>> outgoing_;
  std::vector<std::string> events_;
  std::vector<PeerId> unreachable_;
  Reassembler reassembler_;  // the receiving thread's
};

class ZmqHub final : public Hub, private ZmqEnd {
 public:
  ZmqHub(const std::string& endpoint, const CurveKey& key, size_t piece_bytes)
      : ZmqEnd(zmq::socket_type::router, key, true, piece_bytes),
        zap_(ctx_, zmq::socket_type::rep),
        endpoint_(endpoint) {
    public_z85_ = key.public_z85;
    zap_.bind("inproc://zeromq.zap.01");
    socket_.set(zmq::sockopt::router_mandatory, true);
    try {
      socket_.bind(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error("cannot listen on " + endpoint + ": " + e.what());
    }
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);  // the port chosen for "*"
  }

  void send(const PeerId& peer, Bytes bytes) override { queue({Bytes(peer.begin(), peer.end()), std::move(bytes)}); }

  std::optional<Incoming> receive(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      auto frames = wait(ms_until(deadline), &zap_);
      if (!frames) return std::nullopt;
      if (frames->size() != 2) {
        note("dropped a message of " + std::to_string(frames->size()) + " frames (a ds4 peer sends one)");
        continue;
      }
      Incoming in;
      in.peer = (*frames)[0].to_string();
      const char* address = (*frames)[1].gets("Peer-Address");
      in.address = address != nullptr ? address : "unknown address";
      bool heard = false;
      auto whole = reassemble(in.peer, (*frames)[1], "a peer at " + in.address, heard);
      if (heard && std::find(heard_.begin(), heard_.end(), in.peer) == heard_.end()) heard_.push_back(in.peer);
      if (!whole) {
        // Pieces may keep coming for seconds: the caller's loop (heartbeats) runs meanwhile.
        if (Clock::now() >= deadline) return std::nullopt;
        continue;
      }
      in.bytes = std::move(*whole);
      return in;
    }
  }

  std::vector<std::string> take_security_events() override { return take_events(); }
  std::vector<PeerId> take_unreachable() override { return take_unreachable_peers(); }
  std::vector<PeerId> take_heard() override { return std::exchange(heard_, {}); }
  std::string describe() const override { return endpoint_ + " (CURVE)"; }
  std::string endpoint() const override { return endpoint_; }

 private:
  zmq::socket_t zap_;
  std::string endpoint_;
  std::vector<PeerId> heard_;  // the receiving thread's
};

// A worker's end: a DEALER to the coordinator; with a forward address, a
// ROUTER bound there (CURVE server admitting only the cluster key, as the
// coordinator's door) where the stage before hands over its hidden states,
// and one DEALER per next-stage address it hands over to. Those DEALERs
// queue only to a connection whose CURVE handshake completed, so a next stage
// that cannot be reached (a firewall, another key, a wrong address) shows as
// sends that do not go out; after kForwardTimeoutMs they come back through
// take_undelivered() with the reason.
class ZmqLink final : public Link, private ZmqEnd {
 public:
  ZmqLink(const std::string& endpoint, const CurveKey& key, const std::string& forward_listen, size_t piece_bytes)
      : ZmqEnd(zmq::socket_type::dealer, key, false, piece_bytes), key_(key), endpoint_(endpoint) {
    try {
      socket_.connect(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error("cannot connect to " + endpoint + ": " + e.what());
    }
    if (forward_listen.empty()) return;
    public_z85_ = key.public_z85;
    zap_ = zmq::socket_t(ctx_, zmq::socket_type::rep);
    zap_.bind("inproc://zeromq.zap.01");
    in_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    configure(in_, key, true);
    in_monitor_ = attach_monitor(ctx_, in_);
    try {
      in_.bind(forward_listen);
    } catch (const zmq::error_t& e) {
      throw Error("cannot listen for other workers on " + forward_listen + ": " + e.what());
    }
    forward_address_ = in_.get(zmq::sockopt::last_endpoint);  // the port chosen for "*"
  }

  void send(Bytes bytes) override { queue({std::move(bytes)}); }

  void send_to(const std::string& address, Bytes bytes) override {
    {
      std::lock_guard lock(forward_mutex_);
      to_forward_.emplace_back(address, std::move(bytes));
    }
    wake();
  }

  std::string forward_address() const override { return forward_address_; }

  std::vector<std::pair<std::string, std::string>> take_lost_connections() override {
    std::lock_guard lock(forward_mutex_);
    return std::exchange(lost_, {});
  }

  std::optional<Received> receive(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      flush();
      const bool pending = push_forwards();
      std::vector<zmq::pollitem_t> items = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                            {monitor().handle(), 0, ZMQ_POLLIN, 0},
                                            {nullptr, wake_fd(), ZMQ_POLLIN, 0}};
      if (in_.handle() != nullptr) {
        items.push_back({in_.handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({in_monitor_.handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
      }
      for (auto& [address, out] : out_)
        if (!out.pending.empty()) items.push_back({out.socket.handle(), 0, ZMQ_POLLOUT, 0});
      auto left = ms_until(deadline);
      // Undeliverable hand-overs are noticed while nothing else happens.
      if (pending) left = std::min(left, std::chrono::milliseconds(50));
      zmq::poll(items.data(), items.size(), left);
      if (items[2].revents & ZMQ_POLLIN) drain_wake();
      if (items[1].revents & ZMQ_POLLIN) read_monitor(monitor());
      if (in_.handle() != nullptr) {
        if (items[4].revents & ZMQ_POLLIN) read_monitor(in_monitor_);
        if (items[5].revents & ZMQ_POLLIN) answer_zap(zap_);
        if (items[3].revents & ZMQ_POLLIN) {
          std::vector<zmq::message_t> frames = receive_frames(in_);
          if (frames.size() == 2) {
            bool heard = false;  // another worker's liveness is ZMTP's to watch
            auto whole = reassemble("worker " + frames[0].to_string(), frames[1], "another worker", heard);
            if (whole) return Received{std::move(*whole), false};
          } else if (!frames.empty()) {
            note("dropped a message of " + std::to_string(frames.size()) + " frames from another worker");
          }
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> frames = receive_frames(socket_);
        if (frames.size() == 1) {
          auto whole = reassemble("coordinator", frames[0], "the coordinator", heard_coordinator_);
          if (whole) return Received{std::move(*whole), true};
        } else if (!frames.empty()) {
          note("dropped a message of " + std::to_string(frames.size()) + " frames from the coordinator");
        }
      }
      if (Clock::now() >= deadline) return std::nullopt;
    }
  }

  std::vector<std::string> take_security_events() override { return take_events(); }
  bool take_heard_from_coordinator() override { return std::exchange(heard_coordinator_, false); }
  std::string describe() const override { return endpoint_ + " (CURVE)"; }

 private:
  // A next stage's address: its socket and what waits to go there.
  struct Outbound {
    zmq::socket_t socket, monitor;
    std::deque<Bytes> pending;
    size_t next_piece = 0;          // of the front message
    Clock::time_point stuck_since;  // when the front of `pending` started waiting
    std::string last_event;         // the latest failed handshake, for the reason
  };

  // Moves what other threads handed over to its address's queue and sends
  // what can go, in order; gives up on an address whose front message has
  // waited kForwardTimeoutMs. True while anything waits.
  bool push_forwards() {
    std::deque<std::pair<std::string, Bytes>> fresh;
    {
      std::lock_guard lock(forward_mutex_);
      fresh.swap(to_forward_);
    }
    const auto now = Clock::now();
    for (auto& [address, bytes] : fresh) {
      Outbound& out = outbound(address);
      if (out.pending.empty()) out.stuck_since = now;
      out.pending.push_back(std::move(bytes));
    }
    bool waiting = false;
    for (auto it = out_.begin(); it != out_.end();) {
      Outbound& out = it->second;
      while (auto e = read_monitor_event(out.monitor)) {
        if (!e->line.empty()) out.last_event = e->line;
        if (e->event == ZMQ_EVENT_DISCONNECTED) {
          // What went out on it since may be lost (ZeroMQ drops what its
          // pipe held); ZeroMQ reconnects by itself.
          std::lock_guard lock(forward_mutex_);
          lost_.emplace_back(it->first, "the connection to the next stage at " + it->first +
                                            " closed (the peer went away, or nothing came back for " +
                                            std::to_string(kPeerSilentMs) + " ms)");
        }
      }
      while (!out.pending.empty()) {
        const Bytes& front = out.pending.front();
        if (!out.socket.send(piece_message(front, out.next_piece), zmq::send_flags::dontwait)) break;
        out.stuck_since = now;
        if (++out.next_piece < piece_count(front.size(), piece_bytes_)) continue;
        out.next_piece = 0;
        out.pending.pop_front();
      }
      if (!out.pending.empty() && now - out.stuck_since >= std::chrono::milliseconds(kForwardTimeoutMs)) {
        give_up(it->first, out);
        it = out_.erase(it);  // a later hand-over there connects afresh
        continue;
      }
      waiting = waiting || !out.pending.empty();
      ++it;
    }
    return waiting;
  }

  Outbound& outbound(const std::string& address) {
    auto it = out_.find(address);
    if (it != out_.end()) return it->second;
    Outbound out;
    out.socket = zmq::socket_t(ctx_, zmq::socket_type::dealer);
    configure(out.socket, key_, false);
    out.socket.set(zmq::sockopt::immediate, true);  // nothing queues before the handshake completed
    out.monitor = attach_monitor(ctx_, out.socket, kHandshakeEvents | ZMQ_EVENT_DISCONNECTED);
    try {
      out.socket.connect(address);
    } catch (const zmq::error_t& e) {
      out.last_event = std::string("cannot connect: ") + e.what();
    }
    return out_.emplace(address, std::move(out)).first->second;
  }

  void give_up(const std::string& address, Outbound& out) {
    std::string reason =
        "the next stage at " + address + " could not be reached within " + std::to_string(kForwardTimeoutMs) + " ms";
    if (!out.last_event.empty()) reason += " (" + out.last_event + ")";
    std::lock_guard lock(undelivered_mutex_);
    for (auto& bytes : out.pending) undelivered_.push_back({address, reason, std::move(bytes)});
  }

  CurveKey key_;
  std::string endpoint_, forward_address_;
  zmq::socket_t zap_, in_, in_monitor_;
  std::map<std::string, Outbound> out_;  // the I/O thread's only
  std::mutex forward_mutex_;
  std::deque<std::pair<std::string, Bytes>> to_forward_;
  std::vector<std::pair<std::string, std::string>> lost_;
  bool heard_coordinator_ = false;  // the receiving thread's
};

}  // namespace

std::string zmq_endpoint(const std::string& host_port) {
  if (host_port.find("://") != std::string::npos) return host_port;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size())
    throw Error("'" + host_port + "' is not HOST:PORT");
  std::string port = host_port.substr(colon + 1);
  if (port == "0") port = "*";  // any free port (printed by whoever binds it)
  if (port != "*" &&
      (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535))
    throw Error("'" + host_port + "': the port is not a number 0-65535");
  std::string host = host_port.substr(0, colon);
  if (host.empty()) host = "*";
  return "tcp://" + host + ":" + port;
}

std::unique_ptr<Hub> make_zmq_hub(const std::string& endpoint, const CurveKey& key, size_t piece_bytes) {
  if (zmq_has("curve") == 0) throw Error("this libzmq was built without CURVE security");
  return std::make_unique<ZmqHub>(endpoint, key, piece_bytes);
}

std::unique_ptr<Link> make_zmq_link(const std::string& endpoint, const CurveKey& key, const std::string& forward_listen,
                                    size_t piece_bytes) {
  if (zmq_has("curve") == 0) throw Error("this libzmq was built without CURVE security");
  return std::make_unique<ZmqLink>(endpoint, key, forward_listen, piece_bytes);
}

}  // namespace ds4::dist
