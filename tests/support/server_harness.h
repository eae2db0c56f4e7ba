// ds4-server in-process for tests: the engine and the HTTP front end on a
// tiny random-weight model, listening on a free loopback port, plus SSE
// parsing for the replies.
#pragma once

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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
      disk = std::make_unique<runtime::KvDiskCache>(*o.disk, tiny().model(), o.engine.n_ctx,
                                                    forward_.prefill_chunk(),
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
