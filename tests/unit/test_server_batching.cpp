// ds4-server with several slots (continuous batching, issue 23): requests
// that arrive while others generate join the running batch, a long prompt
// prefills in pieces beside running streams, and every reply equals the
// same request decoded alone by the forward pass (no server code in
// between). A client that hangs up frees its slot at once, a non-streaming
// one too; the queue bound counts requests waiting for a slot; /metrics
// reports the batched steps, the queue wait and the slots.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/utf8.h"
#include "support/server_harness.h"
#include "support/server_truth.h"
#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace ds4::server {
namespace {

// ASCII-only replies (server_truth.h says why) that never end early: EOS
// banned too, so a reply runs to max_tokens and a received part of it is a
// prefix of the whole.
const std::map<int32_t, float>& ascii_no_eos() {
  static const std::map<int32_t, float> bias = [] {
    std::map<int32_t, float> b = ascii_only_bias();
    b[tokenizer().eos()] = -100.0f;
    return b;
  }();
  return bias;
}

Json request(const std::string& user, int max_tokens) {
  return with_bias(chat_request(user, max_tokens), ascii_no_eos());
}

// What the request's reply must be: its prompt rendered and tokenized,
// then greedy decoding with the same bias (the first `tokens` tokens of it
// when given).
std::string truth(const Json& req, int tokens = -1) {
  const auto ids = tokenizer().encode(rendered(req["messages"], text::ThinkingMode::None), true);
  return tokenizer().decode(greedy_ids(ids, tokens >= 0 ? tokens : req["max_tokens"].get<int>(), ascii_no_eos()));
}

// The content deltas of a chat stream, concatenated, and how many there were
// (ASCII tokens: one per token).
std::string stream_content(const std::string& body, int* deltas = nullptr) {
  std::string text;
  int n = 0;
  for (const std::string& d : sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json chunk = Json::parse(d);
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
    const Json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) {
      text += delta["content"].get<std::string>();
      ++n;
    }
  }
  if (deltas) *deltas = n;
  return text;
}

// Polls /metrics until `sample` reaches at least `want` (a deadline, not a
// timing assertion: the condition is what the test checks).
bool wait_for_metric(const Harness& h, const std::string& sample, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (metric_value(h.metrics(), sample) >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(ServerBatching, RequestsThatJoinARunningStreamReplyAsEachAlone) {
  HarnessOptions o;
  o.engine.batched_sessions = 4;
  o.engine.n_ctx = 2048;
  Harness h(o);
  // A long stream; the others arrive once it generates, so they are admitted
  // beside it (it has ~1900 tokens to go, they far fewer).
  const Json lead_req = [] {
    Json r = request("Keep talking, please", 1900);
    r["stream"] = true;
    return r;
  }();
  RawConnection lead(h.port(), "/v1/chat/completions", lead_req);
  ASSERT_TRUE(lead.read_until("\"content\""));

  // A short reply; a prompt of ~700 tokens, prefilled in pieces beside the
  // decoding streams; a stream whose client leaves after its first token.
  const Json short_req = request("A short question", 40);
  const Json long_prompt_req = request(std::string(700, 'k') + " and a question at the end", 30);
  Json short_reply, long_prompt_reply;
  std::thread t1([&] { short_reply = h.post_json("/v1/chat/completions", short_req); });
  std::thread t2([&] { long_prompt_reply = h.post_json("/v1/chat/completions", long_prompt_req); });
  std::thread t3([&] {
    Json r = request("Leave early", 1000);
    r["stream"] = true;
    RawConnection quitter(h.port(), "/v1/chat/completions", r);
    EXPECT_TRUE(quitter.read_until("\"content\""));
  });
  t1.join();
  t2.join();
  t3.join();
  const std::string during = h.metrics();
  lead.close();

  EXPECT_EQ(short_reply["choices"][0]["message"]["content"], truth(short_req));
  EXPECT_EQ(long_prompt_reply["choices"][0]["message"]["content"], truth(long_prompt_req));
  EXPECT_GT(long_prompt_reply["usage"]["prompt_tokens"].get<int64_t>(), 700);
  // What the lead stream sent before the hang-up: a prefix of its reply.
  int lead_deltas = 0;
  const std::string lead_text = stream_content(lead.body(), &lead_deltas);
  EXPECT_FALSE(lead_text.empty());
  EXPECT_EQ(truth(lead_req, lead_deltas + 1).substr(0, lead_text.size()), lead_text);

  // The lead stream was still running when the others finished, so steps
  // carried several sessions; a prompt and the decoding streams shared some.
  EXPECT_GE(metric_value(during, "ds4_requests_total{api=\"chat\",status=\"200\"}"), 2) << during;
  EXPECT_GT(metric_value(during, "ds4_batch_sessions_count"),
            metric_value(during, "ds4_batch_sessions_bucket{le=\"1\"}"))
      << during;
  EXPECT_GE(metric_value(during, "ds4_slot_busy{slot=\"0\"}") + metric_value(during, "ds4_slot_busy{slot=\"1\"}") +
                metric_value(during, "ds4_slot_busy{slot=\"2\"}") + metric_value(during, "ds4_slot_busy{slot=\"3\"}"),
            1)
      << during;
  EXPECT_GE(metric_value(during, "ds4_queue_wait_seconds_count"), 4) << during;
  ASSERT_TRUE(wait_for_metric(h, "ds4_requests_total{api=\"chat\",status=\"499\"}", 2)) << h.metrics();
}

TEST(ServerBatching, ANonStreamingClientThatHangsUpFreesItsSlot) {
  HarnessOptions o;
  o.engine.queue_max = 0;
  o.engine.n_ctx = 4096;
  Harness h(o);
  {
    RawConnection c(h.port(), "/v1/chat/completions", request("Talk for a long time", 3000));
    // Generating: then hang up without reading anything.
    ASSERT_TRUE(wait_for_metric(h, "ds4_slot_generated_tokens_total{slot=\"0\"}", 1)) << h.metrics();
  }
  // The engine notices, replies 499 to nobody and frees the slot long
  // before the 3000 tokens a request that ran to the end would take.
  ASSERT_TRUE(wait_for_metric(h, "ds4_requests_total{api=\"chat\",status=\"499\"}", 1)) << h.metrics();
  const std::string m = h.metrics();
  EXPECT_LT(metric_value(m, "ds4_slot_generated_tokens_total{slot=\"0\"}"), 2999) << m;
  EXPECT_EQ(metric_value(m, "ds4_requests_total{api=\"chat\",status=\"200\"}"), -1) << m;
  const Json next = request("next", 3);
  EXPECT_EQ(h.post_json("/v1/chat/completions", next)["choices"][0]["message"]["content"], truth(next));
}

TEST(ServerBatching, FreeSlotsAdmitRequestsAndTheQueueHoldsTheRest) {
  HarnessOptions o;
  o.engine.batched_sessions = 2;
  o.engine.queue_max = 0;
  o.engine.n_ctx = 4096;
  Harness h(o);
  Json a = request("First long one", 3000);
  Json b = request("Second long one", 3000);
  a["stream"] = b["stream"] = true;
  RawConnection ca(h.port(), "/v1/chat/completions", a);
  ASSERT_TRUE(ca.read_until("\"content\""));
  RawConnection cb(h.port(), "/v1/chat/completions", b);
  ASSERT_TRUE(cb.read_until("\"content\""));
  // Both run at once, one per slot; with no queue a third is refused.
  const std::string m = h.metrics();
  EXPECT_EQ(metric_value(m, "ds4_requests_running"), 2) << m;
  EXPECT_EQ(metric_value(m, "ds4_slot_busy{slot=\"0\"}"), 1) << m;
  EXPECT_EQ(metric_value(m, "ds4_slot_busy{slot=\"1\"}"), 1) << m;
  auto refused = h.post("/v1/chat/completions", request("third", 2));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  // A hang-up frees a slot for the next request (503 until the engine has
  // noticed it).
  ca.close();
  const Json third = request("third", 2);
  std::optional<Json> reply;
  for (int i = 0; i < 4000 && !reply; ++i) {
    auto r = h.post("/v1/chat/completions", third);
    ASSERT_TRUE(r);
    if (r->status == 503) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    ASSERT_EQ(r->status, 200) << r->body;
    reply = Json::parse(r->body);
  }
  ASSERT_TRUE(reply);
  EXPECT_EQ((*reply)["choices"][0]["message"]["content"], truth(third));
  EXPECT_EQ(metric_value(h.metrics(), "ds4_requests_total{api=\"chat\",status=\"499\"}"), 1);
  cb.close();
}

}  // namespace
}  // namespace ds4::server
