// The HTTP front end of ds4-server (PROTOCOL.md §5): routes, API keys, CORS,
// size limits, SSE streaming with prefill keep-alive and client-disconnect
// cancellation, /health, /v1/models and /metrics. Everything model-related is
// the Engine's; this file only moves bytes and maps errors to API shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dist/coordinator.h"

namespace httplib {
class Server;
}

namespace ds4::server {

class Engine;
class Metrics;

struct HttpConfig {
  std::string host = "127.0.0.1";
  int port = 8000;               // 0 = any free port (tests)
  bool cors = false;
  std::string api_key;           // "" = no authentication
  size_t max_body_bytes = size_t{64} << 20;
  int threads = 128;             // connections served at once (streams hold one each)
  int64_t n_ctx = 32768;
  int64_t max_tokens = 393216;
  int keepalive_ms = 5000;       // SSE ": prefill" comment interval during prefill
  // A coordinator's route (distributed runs): /health answers 503 while it
  // is incomplete, /metrics adds each stage's telemetry. Unset: one process.
  std::function<dist::RouteStatus()> route;
};

class HttpServer {
 public:
  HttpServer(Engine& engine, Metrics& metrics, HttpConfig config);
  ~HttpServer();

  // Binds the listening socket; ds4::Error naming host:port when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop() (from any thread).
  void serve();
  void stop();

 private:
  void routes();
  Engine& engine_;
  Metrics& metrics_;
  HttpConfig config_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
};

// The model object of GET /v1/models (PROTOCOL.md §5.2), as JSON text.
std::string model_object_json(const std::string& id, int64_t n_ctx, int64_t max_tokens);

}  // namespace ds4::server
