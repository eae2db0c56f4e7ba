// ds4-server in-process for tests: the engine and the HTTP front end on a
// tiny random-weight model, listening on a free loopback port, plus SSE
// parsing for the replies.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/forward.h"
#include "core/gguf.h"
#include "runtime/kv_disk_cache.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/trace_log.h"
#include "support/synthetic_model.h"
#include "text/tokenizer.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

inline const test::SyntheticModel& tiny() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, 21);
  return m;
}

inline const text::Tokenizer& tokenizer() {
  static const gguf::File f = gguf::File::open(tiny().path());
  static const text::Tokenizer t = text::Tokenizer::from_gguf(f);
  return t;
}

struct HarnessOptions {
  EngineConfig engine;
  HttpConfig http;
  std::optional<runtime::KvCacheConfig> disk;
  std::string trace;  // trace file, "" = none
};

// Engine + HTTP server on a free port, serving on a background thread.
class Harness {
 public:
  explicit Harness(HarnessOptions o = {}) : forward_(tiny().model(), cpu::Numerics::Default, nullptr) {
    o.engine.n_ctx = o.engine.n_ctx == 32768 ? 1024 : o.engine.n_ctx;
    o.http.port = 0;
    o.http.n_ctx = o.engine.n_ctx;
    o.http.threads = 16;
    std::unique_ptr<runtime::KvDiskCache> disk;
    if (o.disk) {
      disk = std::make_unique<runtime::KvDiskCache>(*o.disk, forward_, o.engine.n_ctx,
                                                    [this](const std::string& w) { warnings.push_back(w); });
    }
    if (!o.trace.empty()) trace_ = std::make_unique<TraceLog>(o.trace);
    engine_ = std::make_unique<Engine>(tokenizer(), forward_, o.engine, std::move(disk), metrics_,
                                       trace_.get());
    http_ = std::make_unique<HttpServer>(*engine_, metrics_, o.http);
    http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
  }
  ~Harness() { stop(); }

  void stop() {
    if (!thread_.joinable()) return;
    engine_->shutdown();
    http_->stop();
    thread_.join();
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", http_->port());
    // Generous: a reply is waited for, not timed (the ASan build on a slow
    // 2-core machine took 63 s to prefill DiskCache's 572 tokens at 9 t/s).
    c.set_read_timeout(900, 0);
    return c;
  }

  httplib::Result post(const std::string& path, const Json& body,
                       const httplib::Headers& headers = {}) const {
    return client().Post(path, headers, body.dump(), "application/json");
  }

  Json post_json(const std::string& path, const Json& body, int want_status = 200) const {
    auto r = post(path, body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return Json();
    EXPECT_EQ(r->status, want_status) << r->body;
    return Json::parse(r->body);
  }

  std::string metrics() const { return client().Get("/metrics")->body; }
  int port() const { return http_->port(); }
  std::vector<std::string> warnings;

 private:
  cpu::Forward forward_;
  Metrics metrics_;
  std::unique_ptr<TraceLog> trace_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
};

// A request written to a plain socket and read as it arrives, so a test can
// hang up at any point as a client that goes away does. The request says
// "Connection: close": the server closes after the reply.
class RawConnection {
 public:
  RawConnection(int port, const std::string& path, const Json& body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect failed");
    const std::string text = body.dump();
    const std::string msg = "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            "Content-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) +
                            "\r\n\r\n" + text;
    if (::send(fd_, msg.data(), msg.size(), 0) != static_cast<ssize_t>(msg.size())) throw std::runtime_error("send");
  }
  ~RawConnection() { close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Reads until `needle` has arrived (true) or the connection ends (false).
  bool read_until(const std::string& needle) {
    while (received_.find(needle) == std::string::npos) {
      if (!read_some()) return false;
    }
    return true;
  }
  // Reads until the server closes the connection.
  void read_to_end() {
    while (read_some()) {
    }
  }
  const std::string& received() const { return received_; }
  // The HTTP body received so far (chunked transfer decoded).
  std::string body() const {
    const size_t head_end = received_.find("\r\n\r\n");
    if (head_end == std::string::npos) return "";
    const std::string head = received_.substr(0, head_end);
    std::string rest = received_.substr(head_end + 4);
    if (head.find("Transfer-Encoding: chunked") == std::string::npos) return rest;
    std::string out;
    size_t at = 0;
    while (true) {
      const size_t eol = rest.find("\r\n", at);
      if (eol == std::string::npos) break;
      const size_t n = std::stoul(rest.substr(at, eol - at), nullptr, 16);
      if (n == 0 || eol + 2 + n > rest.size()) break;
      out += rest.substr(eol + 2, n);
      at = eol + 2 + n + 2;
    }
    return out;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  bool read_some() {
    if (fd_ < 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    received_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string received_;
};

// The value of one sample line of a /metrics text ("name{labels}"), or -1
// when it is not there.
inline double metric_value(const std::string& metrics, const std::string& sample) {
  size_t at = 0;
  while ((at = metrics.find(sample + " ", at)) != std::string::npos) {
    if (at == 0 || metrics[at - 1] == '\n') return std::stod(metrics.substr(at + sample.size() + 1));
    at += sample.size();
  }
  return -1;
}

// The SSE data payloads of a stream body, in order ("[DONE]" included).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    size_t line = 0;
    while (line < event.size()) {
      size_t nl = event.find('\n', line);
      if (nl == std::string::npos) nl = event.size();
      const std::string l = event.substr(line, nl - line);
      if (l.rfind("data: ", 0) == 0) out.push_back(l.substr(6));
      line = nl + 1;
    }
    pos = end + 2;
  }
  return out;
}

}  // namespace ds4::server
