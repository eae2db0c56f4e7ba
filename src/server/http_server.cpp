#include "server/http_server.h"

#include <openssl/crypto.h>

#include <chrono>
#include <cstdio>
#include <httplib.h>

#include "core/error.h"
#include "server/chat_page.h"
#include "server/connection_watch.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/reply.h"

namespace ds4::server {

namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Constant-time comparison: the time taken does not depend on where the
// strings first differ (only on the presented key's length).
bool same_secret(const std::string& presented, const std::string& expected) {
  if (presented.size() != expected.size()) {
    // Compare anyway so the time does not reveal the expected length either.
    (void)CRYPTO_memcmp(expected.data(), expected.data(), expected.size());
    return false;
  }
  return CRYPTO_memcmp(presented.data(), expected.data(), expected.size()) == 0;
}

void cors_headers(httplib::Response& res) {
  res.set_header("Access-Control-Allow-Origin", "*");
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  res.set_header("Access-Control-Allow-Headers", "*");
}

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// Plain (non-API) error body in the OpenAI shape.
Json plain_error(const std::string& message, const std::string& type) {
  return Json{{"error", Json{{"message", message}, {"type", type}}}};
}

}  // namespace

std::string model_object_json(const std::string& id, int64_t n_ctx, int64_t max_tokens) {
  const Json model{
      {"id", id},
      {"object", "model"},
      {"created", 1767225600},
      {"owned_by", "ds4.c"},
      {"name", "DeepSeek V4 Flash"},
      {"context_length", n_ctx},
      {"top_provider",
       Json{{"context_length", n_ctx}, {"max_completion_tokens", std::min(max_tokens, n_ctx)}, {"is_moderated", false}}},
      {"supported_parameters", Json::array({"tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k",
                                            "min_p", "stop", "seed", "stream", "reasoning_effort"})}};
  return dump(model);
}

HttpServer::HttpServer(Engine& engine, Metrics& metrics, HttpConfig config)
    : engine_(engine), metrics_(metrics), config_(std::move(config)), http_(std::make_unique<httplib::Server>()) {
  routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const std::string host = config_.host == "localhost" ? "127.0.0.1" : config_.host;
  if (config_.port == 0) {
    port_ = http_->bind_to_any_port(host);
    if (port_ < 0) throw Error("cannot listen on " + config_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(host, config_.port)) {
      throw Error("cannot listen on " + config_.host + ":" + std::to_string(config_.port) +
                  " (in use, or not an address of this machine)");
    }
    port_ = config_.port;
  }
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::stop() { http_->stop(); }

void HttpServer::routes() {
  httplib::Server& s = *http_;
  const int threads = config_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // Every response closes its connection (PROTOCOL.md §5.1).
  s.set_keep_alive_max_count(1);
  s.set_read_timeout(10, 0);
  s.set_write_timeout(10, 0);
  s.set_payload_max_length(config_.max_body_bytes);

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.cors) cors_headers(res);
    if (req.method == "OPTIONS") {
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    // The page itself is public: it holds no data and asks for the key.
    if (!config_.api_key.empty() && req.path != "/health" && req.path != "/") {
      std::string presented;
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) == 0) presented = auth.substr(7);
      else if (req.has_header("x-api-key")) presented = req.get_header_value("x-api-key");
      if (!same_secret(presented, config_.api_key)) {
        send_json(res, 401,
                  Json{{"error", Json{{"message", presented.empty() ? "missing API key (Authorization: Bearer KEY or "
                                                                      "x-api-key: KEY)"
                                                                    : "invalid API key"},
                                      {"type", "authentication_error"}}}});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    switch (res.status) {
      case 404: message = "unknown endpoint"; break;
      case 413: message = "request body too large"; break;
      case 400: message = "bad HTTP request"; break;
      default: message = "HTTP error " + std::to_string(res.status); break;
    }
    send_json(res, res.status, plain_error(message, "invalid_request_error"));
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_json(res, 500, plain_error(what, "server_error"));
  });

  s.Get("/", [](const httplib::Request& req, httplib::Response& res) {
    const std::string etag = "\"" + std::string(chat_page_sha256()) + "\"";
    res.set_header("ETag", etag);
    res.set_header("Cache-Control", "no-cache");
    if (req.get_header_value("If-None-Match") == etag) {
      res.status = 304;
      return;
    }
    res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!config_.route) {
      send_json(res, 200, Json{{"status", "ok"}});
      return;
    }
    const dist::RouteStatus r = config_.route();
    Json stages = Json::array();
    for (const dist::StageInfo& st : r.stages)
      stages.push_back(Json{{"layers", dist::layer_range_text(st.begin, st.end)}, {"worker", st.name},
                            {"address", st.address}, {"handed_over_at", st.forward}, {"requests", st.requests}});
    Json route{{"complete", r.complete}, {"stages", stages}};
    if (!r.complete) {
      route["missing"] = r.missing;
      res.set_header("Retry-After", "2");
    }
    send_json(res, r.complete ? 200 : 503, Json{{"status", r.complete ? "ok" : "route incomplete"}, {"route", route}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (config_.route) metrics_.set_route(config_.route());
    res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const std::string m = model_object_json("deepseek-v4-flash", config_.n_ctx, config_.max_tokens);
    res.set_content("{\"object\":\"list\",\"data\":[" + m + "]}", "application/json");
  });
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id == "deepseek-v4-flash" || id == "deepseek-v4-pro" || id == "deepseek-chat" || id == "deepseek-reasoner") {
      res.set_content(model_object_json(id, config_.n_ctx, config_.max_tokens), "application/json");
    } else {
      Json body = plain_error("model '" + id + "' does not exist", "invalid_request_error");
      body["error"]["code"] = "model_not_found";
      send_json(res, 404, body);
    }
  });

  auto api_route = [this](Api api) {
    return [this, api](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<Job> job;
      try {
        if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos)
          throw RequestError("chunked request bodies are not supported", 411);
        job = engine_.prepare(parse_request(api, req.body), req.body);
        engine_.submit(job);
      } catch (const RequestError& e) {
        if (e.status == 503) res.set_header("Retry-After", "2");
        send_json(res, e.status, error_body(api, e));
        metrics_.request_done(api_name(api), e.status);
        std::fprintf(stderr, "ds4-server: request api=%s status=%d error=\"%s\"\n", api_name(api), e.status,
                     e.what());
        return;
      }
      ReplyChannel* channel = job->channel.get();
      if (!job->request.stream) {
        // A client that hangs up cancels its request (the slot frees at the
        // worker's next step); the 499 it gets goes nowhere.
        const ConnectionWatch watch(req.remote_addr, req.remote_port, req.local_port);
        while (!channel->wait_closed_for(std::chrono::milliseconds(100))) {
          if (!channel->cancelled() && watch.peer_gone()) channel->cancel();
        }
        if (channel->error()) {
          if (channel->error()->status == 503) res.set_header("Retry-After", "2");
          send_json(res, channel->error()->status, error_body(api, *channel->error()));
        } else {
          send_json(res, 200, reply_body(job->request, job->ids, *channel->reply()));
        }
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      const auto keepalive = std::chrono::milliseconds(config_.keepalive_ms);
      auto last_write = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
      res.set_chunked_content_provider(
          "text/event-stream",
          [job, keepalive, last_write](size_t, httplib::DataSink& sink) {
            ReplyChannel& ch = *job->channel;
            bool closed = false;
            const auto chunks = ch.wait(std::min<std::chrono::milliseconds>(keepalive, std::chrono::milliseconds(250)),
                                        &closed);
            for (const std::string& c : chunks) {
              if (!sink.write(c.data(), c.size())) {
                ch.cancel();
                return false;
              }
              *last_write = std::chrono::steady_clock::now();
            }
            if (closed) {
              sink.done();
              return true;
            }
            // Long prefills: a comment line now and then keeps proxies and
            // clients from timing out and tells us when the client left.
            if (std::chrono::steady_clock::now() - *last_write >= keepalive && !ch.generating()) {
              static constexpr char kPing[] = ": prefill\n\n";
              if (!sink.write(kPing, sizeof kPing - 1)) {
                ch.cancel();
                return false;
              }
              *last_write = std::chrono::steady_clock::now();
            } else if (!sink.is_writable()) {
              ch.cancel();
              return false;
            }
            return true;
          },
          [job](bool success) {
            if (!success) job->channel->cancel();
          });
    };
  };
  // Anthropic's token counting (Claude Code asks before long requests).
  s.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      send_json(res, 200, Json{{"input_tokens", engine_.count_prompt_tokens(parse_messages_request(req.body))}});
    } catch (const RequestError& e) {
      send_json(res, e.status, error_body(Api::Messages, e));
    }
  });
  s.Post("/v1/chat/completions", api_route(Api::ChatCompletions));
  s.Post("/v1/completions", api_route(Api::Completions));
  s.Post("/v1/responses", api_route(Api::Responses));
  s.Post("/v1/messages", api_route(Api::Messages));
}

}  // namespace ds4::server
