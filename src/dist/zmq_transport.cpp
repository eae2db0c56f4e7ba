#include "dist/zmq_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
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

std::atomic<uint64_t> g_monitor_serial{0};

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

// What both ends share: the context, a socket with a monitor, the queue of
// sends from other threads and the eventfd that wakes receive() for them.
class ZmqEnd {
 protected:
  ZmqEnd(zmq::socket_type type, const CurveKey& key, bool server) : socket_(ctx_, type) {
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_ < 0) throw Error("eventfd: " + std::string(std::strerror(errno)));
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndtimeo, kSendTimeoutMs);
    socket_.set(zmq::sockopt::heartbeat_ivl, kHeartbeatIvlMs);
    socket_.set(zmq::sockopt::heartbeat_timeout, kPeerSilentMs);
    socket_.set(zmq::sockopt::heartbeat_ttl, kPeerSilentMs);
    socket_.set(zmq::sockopt::reconnect_ivl, 100);
    socket_.set(zmq::sockopt::reconnect_ivl_max, 1000);
    if (server) {
      socket_.set(zmq::sockopt::curve_server, true);
      socket_.set(zmq::sockopt::curve_secretkey, key.secret_z85);
      socket_.set(zmq::sockopt::zap_domain, "ds4");
    } else {
      socket_.set(zmq::sockopt::curve_serverkey, key.public_z85);
      socket_.set(zmq::sockopt::curve_publickey, key.public_z85);
      socket_.set(zmq::sockopt::curve_secretkey, key.secret_z85);
    }
    const std::string monitor = "inproc://ds4-monitor-" + std::to_string(g_monitor_serial++);
    if (zmq_socket_monitor(socket_.handle(), monitor.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
      throw Error(std::string("zmq_socket_monitor: ") + zmq_strerror(zmq_errno()));
    monitor_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
    monitor_.connect(monitor);
  }
  ~ZmqEnd() {
    if (wake_ >= 0) ::close(wake_);
  }

  void queue(std::vector<std::vector<uint8_t>> frames) {
    {
      std::lock_guard lock(mutex_);
      outgoing_.push_back(std::move(frames));
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_, &one, sizeof one);
  }

  // Sends what other threads queued; a frame that cannot go out is dropped
  // (ROUTER: the peer is gone) and noted.
  void flush() {
    std::deque<std::vector<std::vector<uint8_t>>> batch;
    {
      std::lock_guard lock(mutex_);
      batch.swap(outgoing_);
    }
    for (auto& frames : batch) {
      bool sent = true;
      try {
        for (size_t i = 0; i < frames.size(); ++i) {
          const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
          if (!socket_.send(zmq::message_t(frames[i].data(), frames[i].size()), flags)) {
            note("a send timed out after " + std::to_string(kSendTimeoutMs) + " ms (the peer stopped reading)");
            sent = false;
            break;
          }
        }
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
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      zmq::poll(items, zap != nullptr ? 4 : 3, std::max(left, std::chrono::milliseconds(0)));
      if (items[2].revents & ZMQ_POLLIN) {
        uint64_t n;
        [[maybe_unused]] const ssize_t r = ::read(wake_, &n, sizeof n);
      }
      if (items[1].revents & ZMQ_POLLIN) read_monitor();
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

  zmq::context_t ctx_;
  zmq::socket_t socket_;

 private:
  void read_monitor() {
    zmq::message_t head, address;
    if (!monitor_.recv(head, zmq::recv_flags::dontwait)) return;
    if (!head.more() || !monitor_.recv(address, zmq::recv_flags::dontwait)) return;
    if (head.size() < 6) return;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    std::string line = event_line(event, value, address.to_string());
    if (!line.empty()) note(std::move(line));
  }

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
  std::deque<std::vector<std::vector<uint8_t>>> outgoing_;
  std::vector<std::string> events_;
  std::vector<PeerId> unreachable_;
};

class ZmqHub final : public Hub, private ZmqEnd {
 public:
  ZmqHub(const std::string& endpoint, const CurveKey& key)
      : ZmqEnd(zmq::socket_type::router, key, true), zap_(ctx_, zmq::socket_type::rep), endpoint_(endpoint) {
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

  void send(const PeerId& peer, std::vector<uint8_t> bytes) override {
    queue({std::vector<uint8_t>(peer.begin(), peer.end()), std::move(bytes)});
  }

  std::optional<Incoming> receive(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto frames = wait(std::max(left, std::chrono::milliseconds(0)), &zap_);
      if (!frames) return std::nullopt;
      if (frames->size() != 2) {
        note("dropped a message of " + std::to_string(frames->size()) + " frames (a ds4 peer sends one)");
        continue;
      }
      Incoming in;
      in.peer = (*frames)[0].to_string();
      const char* address = (*frames)[1].gets("Peer-Address");
      in.address = address != nullptr ? address : "unknown address";
      const auto* p = static_cast<const uint8_t*>((*frames)[1].data());
      in.bytes.assign(p, p + (*frames)[1].size());
      return in;
    }
  }

  std::vector<std::string> take_security_events() override { return take_events(); }
  std::vector<PeerId> take_unreachable() override { return take_unreachable_peers(); }
  std::string describe() const override { return endpoint_ + " (CURVE)"; }
  std::string endpoint() const override { return endpoint_; }

 private:
  zmq::socket_t zap_;
  std::string endpoint_;
};

class ZmqLink final : public Link, private ZmqEnd {
 public:
  ZmqLink(const std::string& endpoint, const CurveKey& key)
      : ZmqEnd(zmq::socket_type::dealer, key, false), endpoint_(endpoint) {
    try {
      socket_.connect(endpoint);
    } catch (const zmq::error_t& e) {
      throw Error("cannot connect to " + endpoint + ": " + e.what());
    }
  }

  void send(std::vector<uint8_t> bytes) override { queue({std::move(bytes)}); }

  std::optional<std::vector<uint8_t>> receive(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto frames = wait(std::max(left, std::chrono::milliseconds(0)));
      if (!frames) return std::nullopt;
      if (frames->size() != 1) {
        note("dropped a message of " + std::to_string(frames->size()) + " frames from the coordinator");
        continue;
      }
      const auto* p = static_cast<const uint8_t*>((*frames)[0].data());
      return std::vector<uint8_t>(p, p + (*frames)[0].size());
    }
  }

  std::vector<std::string> take_security_events() override { return take_events(); }
  std::string describe() const override { return endpoint_ + " (CURVE)"; }

 private:
  std::string endpoint_;
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

std::unique_ptr<Hub> make_zmq_hub(const std::string& endpoint, const CurveKey& key) {
  if (zmq_has("curve") == 0) throw Error("this libzmq was built without CURVE security");
  return std::make_unique<ZmqHub>(endpoint, key);
}

std::unique_ptr<Link> make_zmq_link(const std::string& endpoint, const CurveKey& key) {
  if (zmq_has("curve") == 0) throw Error("this libzmq was built without CURVE security");
  return std::make_unique<ZmqLink>(endpoint, key);
}

}  // namespace ds4::dist
