// Bad input against a live ds4-server: every request below is wrong in its
// own way and must get a 4xx in the right API's error shape, with a message
// that names the problem; the server must keep serving (no crash, no 5xx,
// and a good request afterwards gets its normal reply).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/server_harness.h"

namespace ds4::server {
namespace {

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  std::string message;  // a substring of the error message ("" = any)
};

const char* kChat = "/v1/chat/completions";
const char* kComp = "/v1/completions";
const char* kResp = "/v1/responses";
const char* kMsg = "/v1/messages";

std::string user(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}";
}

std::vector<BadCase> cases() {
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "[";
  for (int i = 0; i < 300; ++i) deep += "]";
  return {
      // Not JSON, or not an object.
      {"empty body", kChat, "", 400, "invalid JSON"},
      {"truncated JSON", kChat, R"({"messages":[)", 400, "invalid JSON"},
      {"trailing garbage", kChat, user("") + "x", 400, "invalid JSON"},
      {"array body", kChat, "[1,2]", 400, ""},
      {"string body", kMsg, R"("hello")", 400, ""},
      {"invalid UTF-8", kChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, ""},
      {"nesting over 256", kChat, R"({"messages":[{"role":"user","content":"hi"}],"x":)" + deep + "}", 400, ""},
      {"messages anthropic not JSON", kMsg, "{", 400, "invalid JSON"},
      {"responses not JSON", kResp, "nope", 400, "invalid JSON"},
      {"completions not JSON", kComp, "{]", 400, "invalid JSON"},
      // Missing required fields.
      {"chat without messages", kChat, R"({"model":"x"})", 400, "messages"},
      {"messages without messages", kMsg, R"({"max_tokens":5})", 400, "messages"},
      {"completions without prompt", kComp, R"({"max_tokens":5})", 400, "prompt"},
      {"responses without input", kResp, R"({"model":"x"})", 400, "input"},
      // Wrong types.
      {"messages not an array", kChat, R"({"messages":"hi"})", 400, "messages"},
      {"message not an object", kChat, R"({"messages":[42]})", 400, "messages[0]"},
      {"content a number", kChat, R"({"messages":[{"role":"user","content":5}]})", 400, "content"},
      {"role a number", kChat, R"({"messages":[{"role":7,"content":"x"}]})", 400, "role"},
      {"empty developer message", kChat, R"({"messages":[{"role":"user","content":"x"},{"role":"developer","content":""}]})",
       400, "developer"},
      {"max_tokens a string", kChat, user(R"(,"max_tokens":"ten")"), 400, "max_tokens"},
      {"temperature a string", kChat, user(R"(,"temperature":"hot")"), 400, "temperature"},
      {"top_p an object", kChat, user(R"(,"top_p":{})"), 400, "top_p"},
      {"min_p above 1", kChat, user(R"(,"min_p":2,"think":false)"), 400, "min_p"},
      {"top_k negative", kChat, user(R"(,"top_k":-3,"think":false)"), 400, "top_k"},
      {"stream a string", kChat, user(R"(,"stream":"yes")"), 400, "stream"},
      {"stop a number", kChat, user(R"(,"stop":5)"), 400, "stop"},
      {"stop list with a number", kChat, user(R"(,"stop":["a",1])"), 400, "stop"},
      {"tools not an array", kChat, user(R"(,"tools":{"a":1})"), 400, "tools"},
      {"tool_calls not an array", kChat,
       R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"","tool_calls":"ls"},{"role":"user","content":"b"}]})",
       400, "tool_calls"},
      {"thinking a number", kChat, user(R"(,"thinking":3)"), 400, "thinking"},
      {"unknown reasoning effort", kChat, user(R"(,"reasoning_effort":"extreme")"), 400, "reasoning_effort"},
      {"logit_bias key not a token id", kChat, user(R"(,"logit_bias":{"abc":5})"), 400, "logit_bias"},
      {"logit_bias value out of range", kChat, user(R"(,"logit_bias":{"5":500})"), 400, "logit_bias"},
      {"seed a string", kChat, user(R"(,"seed":"x")"), 400, "seed"},
      {"prompt a number", kComp, R"({"prompt":42})", 400, "prompt"},
      {"anthropic content block not an object", kMsg, R"({"max_tokens":5,"messages":[{"role":"user","content":[7]}]})",
       400, "content"},
      {"anthropic system a number", kMsg, R"({"max_tokens":5,"system":9,"messages":[{"role":"user","content":"x"}]})",
       400, "system"},
      {"anthropic max_tokens a string", kMsg,
       R"({"max_tokens":"lots","messages":[{"role":"user","content":"x"}]})", 400, "max_tokens"},
      // Unsupported features.
      {"responses previous_response_id", kResp, R"({"input":"hi","previous_response_id":"resp_1"})", 400,
       "previous_response_id is not supported"},
      {"responses conversation", kResp, R"({"input":"hi","conversation":"c1"})", 400, "conversation is not supported"},
      {"responses unknown item type", kResp, R"({"input":[{"type":"hologram"}]})", 400, "hologram"},
      {"responses item not completed", kResp,
       R"({"input":[{"type":"message","role":"user","content":"x","status":"in_progress"}]})", 400, "status"},
      {"responses bad content block", kResp,
       R"({"input":[{"type":"message","role":"user","content":[{"type":"input_image"}]}]})", 400, ""},
      // Too long for the context (n_ctx is 256 here).
      {"chat over the context", kChat, R"({"messages":[{"role":"user","content":")" + std::string(2000, 'z') + R"("}]})",
       400, "configured context size is 256 tokens"},
      {"completions over the context", kComp, R"({"prompt":")" + std::string(2000, 'z') + R"("})", 400,
       "configured context size"},
      {"responses over the context", kResp, R"({"input":")" + std::string(2000, 'z') + R"("})", 400,
       "configured context size"},
      // HTTP level.
      {"unknown endpoint", "/v1/embeddings", user(""), 404, "unknown endpoint"},
      {"GET-only path posted to", "/v1/models", "{}", 404, ""},
  };
}

TEST(ServerBadInput, EveryBadRequestGetsAClear4xxAndTheServerKeepsServing) {
  HarnessOptions o;
  o.engine.n_ctx = 256;
  o.http.max_body_bytes = 1 << 20;
  Harness h(o);
  const auto all = cases();
  ASSERT_GE(all.size(), 40u);
  for (const BadCase& c : all) {
    SCOPED_TRACE(c.name);
    auto r = h.client().Post(c.path, c.body, "application/json");
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, c.status) << r->body;
    Json body;
    ASSERT_NO_THROW(body = Json::parse(r->body)) << r->body;
    const bool anthropic_context = std::string(c.path) == kMsg && c.message.find("context") != std::string::npos;
    ASSERT_TRUE(body.contains("error")) << r->body;
    if (anthropic_context) {
      EXPECT_EQ(body["type"], "error");
    }
    ASSERT_TRUE(body["error"].contains("message")) << r->body;
    const std::string message = body["error"]["message"];
    EXPECT_FALSE(message.empty());
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    if (c.status == 400) {
      EXPECT_EQ(body["error"]["type"], "invalid_request_error") << r->body;
    }
  }
  // Too large a body: 413 before parsing.
  auto r = h.client().Post(kChat, user(R"(,"pad":")" + std::string(2 << 20, 'p') + R"(")"), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  // Chunked uploads are refused.
  httplib::Client c = h.client();
  r = c.Post(
      kChat,
      [](size_t offset, httplib::DataSink& sink) {
        const std::string part = user("");
        if (offset == 0) sink.write(part.data(), part.size());
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 411) << r->body;

  // Still alive and well.
  EXPECT_EQ(h.client().Get("/health")->status, 200);
  r = h.client().Post(kChat, user(R"(,"max_tokens":2,"think":false)"), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const std::string metrics = h.metrics();
  EXPECT_EQ(metrics.find("status=\"5"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace ds4::server
