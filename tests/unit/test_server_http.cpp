// ds4-server end to end in one process: the HTTP front end and the engine on
// a tiny random-weight model, driven over real sockets. Replies are checked
// against an independent path (the chat renderer, the tokenizer and the
// forward pass's argmax, with no server code in between); streams against
// the non-streamed reply; KV reuse through the usage fields; the disk cache
// across a restart; errors, API keys, CORS, the queue bound and client
// disconnects through status codes, bodies and /metrics.
#include <gtest/gtest.h>

#include <httplib.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/gguf.h"
#include "core/utf8.h"
#include "runtime/kv_disk_cache.h"
#include "runtime/sampler.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/trace_log.h"
#include "support/file_io.h"
#include "support/server_harness.h"
#include "support/server_truth.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"
#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace ds4::server {
namespace {

TEST(ServerHttp, HealthModelsAndUnknownEndpoints) {
  Harness h;
  auto c = h.client();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Json::parse(r->body), Json({{"status", "ok"}}));
  EXPECT_EQ(r->get_header_value("Connection"), "close");

  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  const Json models = Json::parse(r->body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "deepseek-v4-flash");
  EXPECT_EQ(models["data"][0]["context_length"], 1024);
  EXPECT_EQ(models["data"][0]["owned_by"], "ds4.c");

  r = c.Get("/v1/models/deepseek-v4-flash");
  ASSERT_TRUE(r);
  EXPECT_EQ(Json::parse(r->body)["object"], "model");
  r = c.Get("/v1/models/gpt-4");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);

  r = c.Get("/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Json::parse(r->body)["error"]["message"], "unknown endpoint");
  r = c.Post("/v1/nothing", "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(ServerHttp, ChatReplyIsTheGreedyContinuationOfTheRenderedPrompt) {
  Harness h;
  const Json req = chat_request("Hello there", 12);
  const Json reply = h.post_json("/v1/chat/completions", req);
  int64_t prompt_tokens = 0;
  const std::string expected = greedy_reply(req["messages"], text::ThinkingMode::None, 12, &prompt_tokens);
  EXPECT_EQ(reply["object"], "chat.completion");
  EXPECT_EQ(reply["model"], "deepseek-v4-flash");
  EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(reply["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(reply["usage"]["prompt_tokens"], prompt_tokens);
  const int64_t completion = reply["usage"]["completion_tokens"];
  EXPECT_EQ(reply["usage"]["total_tokens"], prompt_tokens + completion);
  EXPECT_EQ(reply["choices"][0]["finish_reason"], completion == 12 ? "length" : "stop");
}

TEST(ServerHttp, StreamDeltasConcatenateToTheReply) {
  Harness h;
  Json req = chat_request("Stream me", 10);
  const Json whole = h.post_json("/v1/chat/completions", req);
  req["stream"] = true;
  req["stream_options"] = Json{{"include_usage", true}};
  auto r = h.post("/v1/chat/completions", req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const auto events = sse_data(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json first = Json::parse(events.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::string finish;
  Json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json e = Json::parse(events[i]);
    if (e.contains("usage") && !e["usage"].is_null()) usage = e["usage"];
    if (e["choices"].empty()) continue;
    const Json& d = e["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(usage["completion_tokens"], whole["usage"]["completion_tokens"]);
}

TEST(ServerHttp, LongPrefillSendsKeepAliveComments) {
  // The prefill must outlast the keep-alive interval many times over on any
  // machine: ~2000 tokens on the harness's one thread take ~3 s on a 2-core
  // Zen 1 guest, and still ~15 intervals on a core several times faster
  // (500 tokens came close to one interval on a fast machine).
  HarnessOptions o;
  o.http.keepalive_ms = 40;
  o.engine.n_ctx = 4096;
  Harness h(o);
  Json req = chat_request(std::string(2000, 'k'), 2);
  req["stream"] = true;
  auto r = h.post("/v1/chat/completions", req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // After the role chunk, comment lines while the prompt is evaluated, none
  // once tokens flow; SSE clients ignore them.
  const size_t role = r->body.find("\"role\":\"assistant\"");
  const size_t ping = r->body.find(": prefill\n\n");
  const size_t finish = r->body.find("\"finish_reason\":\"");
  ASSERT_NE(role, std::string::npos);
  ASSERT_NE(ping, std::string::npos) << r->body;
  EXPECT_LT(role, ping);
  EXPECT_LT(r->body.rfind(": prefill\n\n"), finish);
  EXPECT_EQ(sse_data(r->body).back(), "[DONE]");
}

TEST(ServerHttp, SecondTurnReusesTheLiveKv) {
  Harness h;
  const Json first = with_bias(chat_request("First question", 6), ascii_only_bias());
  const Json r1 = h.post_json("/v1/chat/completions", first);
  EXPECT_EQ(r1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const int64_t p1 = r1["usage"]["prompt_tokens"], c1 = r1["usage"]["completion_tokens"];

  Json second = first;
  second.erase("logit_bias");
  second["messages"].push_back(
      Json{{"role", "assistant"}, {"content", r1["choices"][0]["message"]["content"]}});
  second["messages"].push_back(Json{{"role", "user"}, {"content", "Second question"}});
  const Json r2 = h.post_json("/v1/chat/completions", second);
  const int64_t cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"];
  // Everything the first request evaluated is reused: its prompt and the
  // generated tokens (the last one stays unevaluated after a length stop).
  EXPECT_GE(cached, p1 + c1 - 1);
  EXPECT_LE(cached, p1 + c1);
  EXPECT_LT(cached, r2["usage"]["prompt_tokens"].get<int64_t>());
  // PROTOCOL.md §6.1: the second prompt is the first one's exact tokens, the
  // generated tokens, then the rest of the rendered text tokenized; the
  // client sent the reply back with U+FFFD where the model wrote invalid
  // UTF-8, the KV keeps what the model wrote.
  const auto p1_ids = tokenizer().encode(rendered(first["messages"], text::ThinkingMode::None), true);
  std::vector<int32_t> live = p1_ids;
  const auto gen1 = greedy_ids(p1_ids, 6, ascii_only_bias());
  live.insert(live.end(), gen1.begin(), gen1.end());
  const std::string text2 = rendered(second["messages"], text::ThinkingMode::None);
  const std::string live_text = sanitize_utf8(tokenizer().decode(live));
  ASSERT_EQ(text2.substr(0, live_text.size()), live_text);
  std::vector<int32_t> ids2 = live;
  const auto rest = tokenizer().encode(text2.substr(live_text.size()), true);
  ids2.insert(ids2.end(), rest.begin(), rest.end());
  EXPECT_EQ(r2["usage"]["prompt_tokens"], static_cast<int64_t>(ids2.size()));
  EXPECT_EQ(r2["choices"][0]["message"]["content"], sanitize_utf8(tokenizer().decode(greedy_ids(ids2, 6))));
  EXPECT_NE(h.metrics().find("ds4_cache_hits_total 1"), std::string::npos) << h.metrics();
}

TEST(ServerHttp, AThinkingTurnContinuesWhenTheClientDropsItsReasoning) {
  // PROTOCOL.md §6.2 step 6: the client sends the first answer back without
  // its reasoning (`<｜Assistant｜></think>answer<eos>`, as rendered history),
  // while the live KV holds `<think>reasoning</think>answer`. The server
  // remembered that visible form and continues on the live KV. logit_bias
  // (+100 on </think> and EOS) makes the model close its reasoning and stop
  // at once; the seed picks a run where </think> came first.
  Harness h;
  const int32_t end_think = tokenizer().end_think(), eos = tokenizer().eos();
  Json first{{"model", "deepseek-v4-flash"},
             {"messages", Json::array({Json{{"role", "user"}, {"content", "Think briefly"}}})},
             {"max_tokens", 8},
             {"logit_bias", Json{{std::to_string(end_think), 100}, {std::to_string(eos), 100}}}};
  Json r1;
  for (int seed = 1; seed <= 64; ++seed) {
    first["seed"] = seed;
    r1 = h.post_json("/v1/chat/completions", first);
    if (r1["usage"]["completion_tokens"].get<int64_t>() >= 1 && r1["choices"][0]["finish_reason"] == "stop") break;
  }
  ASSERT_GE(r1["usage"]["completion_tokens"].get<int64_t>(), 1) << r1.dump();
  ASSERT_EQ(r1["choices"][0]["finish_reason"], "stop");
  const int64_t p1 = r1["usage"]["prompt_tokens"], c1 = r1["usage"]["completion_tokens"];

  Json second = first;
  second.erase("logit_bias");
  second["max_tokens"] = 2;
  second["messages"].push_back(Json{{"role", "assistant"}, {"content", r1["choices"][0]["message"]["content"]}});
  second["messages"].push_back(Json{{"role", "user"}, {"content", "Again"}});
  const Json r2 = h.post_json("/v1/chat/completions", second);
  // Prompt, </think>, everything generated; the EOS is evaluated with the
  // new turn (it is part of the visible text, not of the live tokens).
  EXPECT_EQ(r2["usage"]["prompt_tokens_details"]["cached_tokens"], p1 + c1) << r2.dump();
  EXPECT_NE(h.metrics().find("ds4_cache_decisions_total{source=\"visible\"} 1"), std::string::npos) << h.metrics();
}

TEST(ServerHttp, BatchedSessionsKeepTwoConversationsResident) {
  HarnessOptions o;
  o.engine.batched_sessions = 2;
  Harness h(o);
  // Two conversations interleaved: with two resident sessions each second
  // turn continues its own first turn.
  // ASCII replies (ascii_only_bias says why).
  const Json a1 = with_bias(chat_request("Conversation A", 4), ascii_only_bias());
  const Json b1 = with_bias(chat_request("Conversation B, another one", 4), ascii_only_bias());
  const Json ra = h.post_json("/v1/chat/completions", a1);
  const Json rb = h.post_json("/v1/chat/completions", b1);
  for (const auto& [first, reply] : {std::pair{a1, ra}, std::pair{b1, rb}}) {
    Json second = first;
    second["messages"].push_back(Json{{"role", "assistant"}, {"content", reply["choices"][0]["message"]["content"]}});
    second["messages"].push_back(Json{{"role", "user"}, {"content", "and then?"}});
    const Json r2 = h.post_json("/v1/chat/completions", second);
    EXPECT_GE(r2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
              reply["usage"]["prompt_tokens"].get<int64_t>())
        << r2.dump();
  }
}

TEST(ServerHttp, AnthropicCountTokensCountsTheRenderedPrompt) {
  Harness h;
  const Json req{{"model", "deepseek-v4-flash"},
                 {"system", "Be brief."},
                 {"messages", Json::array({Json{{"role", "user"}, {"content", "Count me"}}})}};
  const Json r = h.post_json("/v1/messages/count_tokens", req);
  const Json msgs = Json::array({Json{{"role", "system"}, {"content", "Be brief."}},
                                 Json{{"role", "user"}, {"content", "Count me"}}});
  EXPECT_EQ(r["input_tokens"], tokenizer().encode(rendered(msgs, text::ThinkingMode::High), true).size());
  EXPECT_EQ(h.post_json("/v1/messages/count_tokens", Json{{"messages", 3}}, 400)["error"]["type"],
            "invalid_request_error");
}

TEST(ServerHttp, BadRequestsGetApiShapedErrors) {
  HarnessOptions o;
  o.engine.n_ctx = 64;
  Harness h(o);
  auto r = h.client().Post("/v1/chat/completions", "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  Json e = Json::parse(r->body);
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");

  // Over the context: OpenAI and Anthropic shapes.
  const std::string long_text(400, 'x');
  e = h.post_json("/v1/chat/completions", chat_request(long_text, 4), 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(e["error"]["param"], "messages");
  EXPECT_EQ(e["error"]["n_ctx"], 64);
  EXPECT_GE(e["error"]["n_prompt_tokens"].get<int64_t>(), 64);
  e = h.post_json("/v1/messages",
                  Json{{"model", "deepseek-v4-flash"},
                       {"max_tokens", 4},
                       {"messages", Json::array({Json{{"role", "user"}, {"content", long_text}}})}},
                  400);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["n_ctx"], 64);
  // The server still answers.
  EXPECT_EQ(h.client().Get("/health")->status, 200);
}

TEST(ServerHttp, ApiKeyAndCors) {
  HarnessOptions o;
  o.http.api_key = "sekrit";
  o.http.cors = true;
  Harness h(o);
  auto c = h.client();
  auto r = c.Post("/v1/chat/completions", chat_request("hi", 2).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer wrong!"}}, chat_request("hi", 2).dump(),
             "application/json");
  EXPECT_EQ(r->status, 401);
  r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer sekrit"}}, chat_request("hi", 2).dump(),
             "application/json");
  EXPECT_EQ(r->status, 200);
  r = c.Post("/v1/chat/completions", {{"x-api-key", "sekrit"}}, chat_request("hi", 2).dump(), "application/json");
  EXPECT_EQ(r->status, 200);
  r = c.Get("/health");  // health needs no key
  EXPECT_EQ(r->status, 200);
  r = c.Options("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Methods"), "GET, POST, OPTIONS");
}

TEST(ServerHttp, FullQueueAnswers503AndADisconnectFreesTheWorker) {
  HarnessOptions o;
  o.engine.queue_max = 0;  // only the running request
  o.engine.n_ctx = 4096;
  Harness h(o);
  // A long streamed reply; the client reads a little and hangs up.
  {
    // EOS banned: a greedy EOS (wherever a random model's path puts one)
    // would end the stream before any content, or before the hang-up.
    Json req = with_bias(chat_request("Talk for a long time", 3000), {{tokenizer().eos(), -100.0f}});
    req["stream"] = true;
    RawConnection c(h.port(), "/v1/chat/completions", req);
    // Read until the first generated content arrives, then hang up.
    ASSERT_TRUE(c.read_until("\"content\""));
  }
  // While the cancelled request may still be winding down, a queue of zero
  // refuses; once it is gone, requests run again.
  bool ran = false;
  for (int i = 0; i < 400 && !ran; ++i) {
    auto r = h.post("/v1/chat/completions", chat_request("next", 2));
    ASSERT_TRUE(r);
    if (r->status == 503) {
      EXPECT_EQ(r->get_header_value("Retry-After"), "2");
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
      continue;
    }
    EXPECT_EQ(r->status, 200);
    ran = true;
  }
  EXPECT_TRUE(ran);
  EXPECT_NE(h.metrics().find("ds4_requests_total{api=\"chat\",status=\"499\"} 1"), std::string::npos)
      << h.metrics();
}

TEST(ServerHttp, DiskCacheServesAPrefixAfterARestart) {
  // Default cache knobs (min 512 tokens, align 2048, trim 32): a system
  // prompt of ~600 tokens gets a cold save of BOS + system; after a restart
  // a new conversation with the same system prompt loads it and prefills
  // only its own turn (usage, metrics and the trace say so).
  test::TempDir dir;
  HarnessOptions o;
  o.engine.n_ctx = 2048;
  runtime::KvCacheConfig kc;
  kc.dir = (dir.path() / "kv").string();
  o.disk = kc;
  o.trace = (dir.path() / "trace.txt").string();
  std::string system;
  for (int i = 0; system.size() < 800; ++i) system += "rule " + std::to_string(i) + " applies; ";
  Json req{{"model", "deepseek-v4-flash"},
           {"messages", Json::array({Json{{"role", "system"}, {"content", system}},
                                     Json{{"role", "user"}, {"content", "one"}}})},
           {"max_tokens", 3},
           {"temperature", 0},
           {"think", false}};
  const auto sys_ids = tokenizer().encode(rendered(Json::array({req["messages"][0]}), text::ThinkingMode::None), true);
  ASSERT_GT(sys_ids.size(), 512u);  // BOS + system: the cold save
  int64_t p1 = 0;
  {
    Harness h(o);
    const Json r = h.post_json("/v1/chat/completions", req);
    p1 = r["usage"]["prompt_tokens"];
    EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_NE(h.metrics().find("ds4_kv_disk_saves_total{reason=\"cold\"} 1"), std::string::npos) << h.metrics();
  }  // shutdown saves the live session too
  Harness h2(o);
  req["messages"][1]["content"] = "two";
  const Json r = h2.post_json("/v1/chat/completions", req);
  const int64_t cached = r["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_EQ(cached, static_cast<int64_t>(sys_ids.size()));
  int64_t p2 = 0;
  const std::string expected = greedy_reply(req["messages"], text::ThinkingMode::None, 3, &p2);
  EXPECT_EQ(r["usage"]["prompt_tokens"], p2);
  EXPECT_GT(p1, 0);
  EXPECT_NE(h2.metrics().find("ds4_cache_decisions_total{source=\"disk\"} 1"), std::string::npos) << h2.metrics();
  EXPECT_NE(h2.metrics().find("ds4_prefill_tokens_total " + std::to_string(p2 - cached) + "\n"), std::string::npos)
      << h2.metrics();
  EXPECT_EQ(r["choices"][0]["message"]["content"], expected);
  EXPECT_TRUE(h2.warnings.empty()) << h2.warnings.front();
  h2.stop();
  const std::string trace = test::read_text(o.trace);
  EXPECT_NE(trace.find("cache_source: disk\ncached tokens: " + std::to_string(cached) + "\n"), std::string::npos)
      << trace.substr(trace.size() > 3000 ? trace.size() - 3000 : 0);
  EXPECT_NE(trace.find("cold save at " + std::to_string(sys_ids.size()) + " tokens"), std::string::npos);
}

}  // namespace
}  // namespace ds4::server
