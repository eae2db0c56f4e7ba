// Request parsers of ds4-server (PROTOCOL.md §5.3, §5.4, §5.9): the OpenAI-form
// messages and tools each API converges to (hand-written expected JSON, key
// order included), every documented 400 with its exact message, type errors
// naming the field, the nesting limit, thinking controls and model aliases,
// and the spec's worked prompts (§2.5 A, B, E, F) rendered through
// text::render_chat (which follows DeepSeek's official encoder).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_request.h"
#include "text/chat_render.h"

namespace ds4::server {
namespace {

using Json = nlohmann::ordered_json;
using text::ThinkingMode;

constexpr const char* kBos = "<｜begin▁of▁sentence｜>";

Json J(std::string_view text) { return Json::parse(text); }

// The RequestError message (and status) a parse throws; "" when it succeeds.
std::string error_of(Api api, std::string_view body, int* status = nullptr) {
  try {
    parse_request(api, body);
  } catch (const RequestError& e) {
    if (status) *status = e.status;
    return e.what();
  }
  return "";
}

std::string render(const ChatRequest& r) {
  text::RenderOptions options;
  options.mode = requested_thinking_mode(r);
  return text::render_chat(r.messages, r.tools, options).text();
}

// ---------------------------------------------------------------------------
// Body, nesting, types

TEST(ServerRequest, InvalidJsonIsRefusedByEveryApi) {
  for (Api api : {Api::ChatCompletions, Api::Completions, Api::Responses, Api::Messages}) {
    int status = 0;
    EXPECT_EQ(error_of(api, "{\"messages\": [", &status), "invalid JSON request");
    EXPECT_EQ(status, 400);
    EXPECT_EQ(error_of(api, ""), "invalid JSON request");
    EXPECT_EQ(error_of(api, "{} trailing"), "invalid JSON request");
    EXPECT_EQ(error_of(api, "{\"a\":\"\xff\"}"), "invalid JSON request");  // not UTF-8
    EXPECT_EQ(error_of(api, "[1]"), "request body: expected a JSON object");
    EXPECT_EQ(error_of(api, "\"text\""), "request body: expected a JSON object");
  }
}

TEST(ServerRequest, RequestErrorDefaultsToInvalidRequest400) {
  try {
    parse_chat_completions_request("{}");
    FAIL() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(std::string(e.what()), "missing messages");
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

// The top object counts as one level: 256 levels pass, 257 do not.
TEST(ServerRequest, NestingLimitIs256Levels) {
  const auto body = [](int depth) {
    return "{\"x\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + ",\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]}";
  };
  EXPECT_EQ(error_of(Api::ChatCompletions, body(256)), "");
  EXPECT_EQ(error_of(Api::ChatCompletions, body(257)), "invalid JSON request");
  EXPECT_EQ(error_of(Api::Messages, body(100000)), "invalid JSON request");
  // Brackets inside strings (escaped quotes included) are not nesting.
  const std::string in_string = "{\"x\":\"\\\"" + std::string(1000, '[') + "\",\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]}";
  EXPECT_EQ(error_of(Api::ChatCompletions, in_string), "");
}

TEST(ServerRequest, TypeErrorsNameTheField) {
  const auto chat = [](std::string_view extra) {
    return error_of(Api::ChatCompletions, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," +
                                              std::string(extra) + "}");
  };
  EXPECT_EQ(chat(R"("temperature":"hot")"), "temperature: expected a number");
  EXPECT_EQ(chat(R"("top_p":true)"), "top_p: expected a number");
  EXPECT_EQ(chat(R"("min_p":[])"), "min_p: expected a number");
  EXPECT_EQ(chat(R"("temperature":1e300)"), "temperature: expected a number in float range");
  EXPECT_EQ(chat(R"("top_k":1.5)"), "top_k: expected an integer");
  EXPECT_EQ(chat(R"("top_k":"5")"), "top_k: expected an integer");
  EXPECT_EQ(chat(R"("top_k":99999999999)"), "top_k: expected an integer in range");
  EXPECT_EQ(chat(R"("seed":"x")"), "seed: expected a number");
  EXPECT_EQ(chat(R"("max_tokens":-1)"), "max_tokens: expected a non-negative integer");
  EXPECT_EQ(chat(R"("max_tokens":"10")"), "max_tokens: expected an integer");
  EXPECT_EQ(chat(R"("max_tokens":18446744073709551615)"), "max_tokens: expected an integer in range");
  EXPECT_EQ(chat(R"("max_completion_tokens":1e30)"), "max_completion_tokens: expected an integer");
  EXPECT_EQ(chat(R"("stream":"yes")"), "stream: expected a boolean");
  EXPECT_EQ(chat(R"("stream_options":true)"), "stream_options: expected an object");
  EXPECT_EQ(chat(R"("stream_options":{"include_usage":1})"), "stream_options.include_usage: expected a boolean");
  EXPECT_EQ(chat(R"("stop":5)"), "stop: expected a string or an array of strings");
  EXPECT_EQ(chat(R"("stop":["a",1])"), "stop[1]: expected a string");
  EXPECT_EQ(chat(R"("model":7)"), "model: expected a string");
  EXPECT_EQ(chat(R"("tools":{})"), "tools: expected an array");
  EXPECT_EQ(chat(R"("tools":[{"type":"function"}])"),
            "tools[0]: expected a tool {\"type\":\"function\",\"function\":{\"name\":…}}");
  EXPECT_EQ(chat(R"("tools":[{"type":"function","function":{"description":"d"}}])"),
            "tools[0].function.name: expected a string");
  EXPECT_EQ(chat(R"("think":"yes")"), "think: expected a boolean");
  EXPECT_EQ(chat(R"("thinking":"on")"), "thinking: expected a boolean, an object or null");
  EXPECT_EQ(chat(R"("thinking":{"budget":5})"), "thinking.type: expected \"enabled\", \"adaptive\" or \"disabled\"");
  EXPECT_EQ(chat(R"("thinking":{"type":"sometimes"})"),
            "thinking.type: unknown thinking type 'sometimes' (expected \"enabled\", \"adaptive\" or \"disabled\")");
  EXPECT_EQ(chat(R"("reasoning_effort":"extreme")"),
            "reasoning_effort: unknown effort 'extreme' (expected max, xhigh, high, medium, low, minimal or none)");
  EXPECT_EQ(chat(R"("reasoning_effort":3)"), "reasoning_effort: expected a string or null");

  const auto msgs = [](std::string_view messages) {
    return error_of(Api::ChatCompletions, "{\"messages\":" + std::string(messages) + "}");
  };
  EXPECT_EQ(msgs(R"({"role":"user"})"), "messages: expected an array of messages");
  EXPECT_EQ(msgs(R"(["hi"])"), "messages[0]: expected an object");
  EXPECT_EQ(msgs(R"([{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"content":5}])"),
            "messages[2].content: expected a string, an array or null");
  EXPECT_EQ(msgs(R"([{"role":1,"content":"a"}])"), "messages[0].role: expected a string");
  EXPECT_EQ(msgs(R"([{"content":[{"type":"text","text":3}]}])"), "messages[0].content[0].text: expected a string");
  EXPECT_EQ(msgs(R"([{"content":[7]}])"), "messages[0].content[0]: expected a string or an object");
  EXPECT_EQ(msgs(R"([{"role":"assistant","content":"","reasoning_content":{}}])"),
            "messages[0].reasoning_content: expected a string, an array or null");
  EXPECT_EQ(msgs(R"([{"role":"assistant","tool_calls":{}}])"), "messages[0].tool_calls: expected an array or null");
  EXPECT_EQ(msgs(R"([{"role":"assistant","tool_calls":[1]}])"), "messages[0].tool_calls[0]: expected an object");
  EXPECT_EQ(msgs(R"([{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":5}}]}])"),
            "messages[0].tool_calls[0].function.arguments: expected a JSON object text or an object");
  EXPECT_EQ(msgs(R"([{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"[1,2]"}}]}])"),
            "messages[0].tool_calls[0].function.arguments: expected a JSON object text");
  EXPECT_EQ(msgs(R"([{"role":"tool","content":"r","tool_call_id":5}])"), "messages[0].tool_call_id: expected a string");
  EXPECT_EQ(msgs(R"([{"role":"user","content":"a","prefix":"yes"}])"), "messages[0].prefix: expected a boolean");
}

TEST(ServerRequest, LogitBias) {
  const auto parse = [](std::string_view bias) {
    return parse_chat_completions_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"logit_bias\":" + std::string(bias) + "}");
  };
  const ChatRequest r = parse(R"({"15":-100,"7":2.5,"2147483647":100})");
  EXPECT_EQ(r.logit_bias, (std::map<int32_t, float>{{7, 2.5f}, {15, -100.0f}, {2147483647, 100.0f}}));
  EXPECT_TRUE(parse("null").logit_bias.empty());
  const auto err = [](std::string_view bias) {
    return error_of(Api::ChatCompletions, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"logit_bias\":" + std::string(bias) + "}");
  };
  EXPECT_EQ(err("[1]"), "logit_bias: expected an object mapping token ids to numbers");
  EXPECT_EQ(err(R"({"x1":1})"), "logit_bias: key 'x1' is not a token id (a non-negative decimal integer)");
  EXPECT_EQ(err(R"({"-1":1})"), "logit_bias: key '-1' is not a token id (a non-negative decimal integer)");
  EXPECT_EQ(err(R"({"2147483648":1})"),
            "logit_bias: key '2147483648' is not a token id (a non-negative decimal integer)");
  EXPECT_EQ(err(R"({"5":101})"), "logit_bias[\"5\"]: expected a number between -100 and 100");
  EXPECT_EQ(err(R"({"5":"1"})"), "logit_bias[\"5\"]: expected a number between -100 and 100");
  // Completions takes it too.
  EXPECT_EQ(parse_completions_request(R"({"prompt":"p","logit_bias":{"3":1}})").logit_bias.size(), 1u);
}

// ---------------------------------------------------------------------------
// Sampling, limits, streaming

TEST(ServerRequest, SamplingFieldsAbsentStayUnset) {
  for (Api api : {Api::ChatCompletions, Api::Completions, Api::Responses, Api::Messages}) {
    const ChatRequest r = parse_request(api, R"({"messages":[{"role":"user","content":"u"}],"prompt":"p","input":"i"})");
    EXPECT_EQ(r.api, api);
    EXPECT_EQ(r.model, "deepseek-v4-flash");
    EXPECT_FALSE(r.temperature || r.top_p || r.min_p || r.top_k || r.seed || r.max_tokens);
    EXPECT_FALSE(r.thinking);
    EXPECT_TRUE(r.stop.empty());
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.include_usage);
    EXPECT_FALSE(r.response_prefix);
    EXPECT_TRUE(r.tools.is_null());
    EXPECT_TRUE(r.logit_bias.empty());
  }
  // Explicit nulls are the same as absent fields.
  const ChatRequest r = parse_chat_completions_request(
      R"({"messages":[{"role":"user","content":"u"}],"temperature":null,"top_k":null,"seed":null,"max_tokens":null,"stop":null,
          "model":null,"stream":null})");
  EXPECT_FALSE(r.temperature || r.top_k || r.seed || r.max_tokens);
  EXPECT_EQ(r.model, "deepseek-v4-flash");
}

TEST(ServerRequest, ChatSamplingAndStreaming) {
  const ChatRequest r = parse_chat_completions_request(R"({
    "model": "my-model", "messages": [{"role": "user", "content": "u"}], "temperature": 0, "top_p": 0.5, "min_p": 0.1, "top_k": 40.0,
    "seed": 12345678901234, "max_tokens": 100, "max_completion_tokens": 200, "stream": true,
    "stream_options": {"include_usage": true}, "stop": ["END", "", "STOP"]})");
  EXPECT_EQ(r.model, "my-model");
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(r.top_p, 0.5f);
  EXPECT_EQ(r.min_p, 0.1f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.seed, 12345678901234u);
  EXPECT_EQ(r.max_tokens, 200);  // max_completion_tokens wins
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"END", "STOP"}));
  EXPECT_EQ(parse_chat_completions_request(R"({"messages":[{"role":"user","content":"u"}],"stop":"x"})").stop, std::vector<std::string>{"x"});
  EXPECT_EQ(parse_chat_completions_request(R"({"messages":[{"role":"user","content":"u"}],"seed":-5})").seed, 0u);
  EXPECT_EQ(parse_chat_completions_request(R"({"messages":[{"role":"user","content":"u"}],"seed":18446744073709551615})").seed,
            18446744073709551615u);
  EXPECT_EQ(parse_chat_completions_request(R"({"messages":[{"role":"user","content":"u"}],"max_tokens":7})").max_tokens, 7);
}

TEST(ServerRequest, PerApiSamplingFields) {
  // Messages: top_k yes; min_p and seed are not Anthropic fields.
  const ChatRequest m = parse_messages_request(
      R"({"messages":[{"role":"user","content":"u"}],"max_tokens":64,"temperature":0.2,"top_p":0.9,"top_k":5,"min_p":0.3,"seed":9,
          "stream":true,"stop_sequences":["\n\nHuman:"],"stop":["ignored"]})");
  EXPECT_EQ(m.max_tokens, 64);
  EXPECT_EQ(m.temperature, 0.2f);
  EXPECT_EQ(m.top_p, 0.9f);
  EXPECT_EQ(m.top_k, 5);
  EXPECT_FALSE(m.min_p);
  EXPECT_FALSE(m.seed);
  EXPECT_TRUE(m.stream);
  EXPECT_EQ(m.stop, std::vector<std::string>{"\n\nHuman:"});
  // Responses: temperature and top_p only; max_output_tokens wins over max_tokens.
  const ChatRequest r = parse_responses_request(
      R"({"input":"x","max_output_tokens":9,"max_tokens":3,"temperature":0.7,"top_p":0.8,"top_k":5,"stream":true})");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.temperature, 0.7f);
  EXPECT_EQ(r.top_p, 0.8f);
  EXPECT_FALSE(r.top_k);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(parse_responses_request(R"({"input":"x","max_tokens":3})").max_tokens, 3);
  // Completions: everything chat has.
  const ChatRequest c = parse_completions_request(
      R"({"prompt":"p","max_tokens":5,"min_p":0.2,"top_k":3,"seed":4,"stream":true,
          "stream_options":{"include_usage":true},"stop":"\n"})");
  EXPECT_EQ(c.max_tokens, 5);
  EXPECT_EQ(c.min_p, 0.2f);
  EXPECT_EQ(c.top_k, 3);
  EXPECT_EQ(c.seed, 4u);
  EXPECT_TRUE(c.stream && c.include_usage);
  EXPECT_EQ(c.stop, std::vector<std::string>{"\n"});
}

// ---------------------------------------------------------------------------
// Thinking controls and aliases (§5.4)

std::optional<ThinkingMode> chat_thinking(std::string_view fields) {
  return parse_chat_completions_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]" + std::string(fields) + "}").thinking;
}

TEST(ServerRequest, ChatThinkingControls) {
  EXPECT_EQ(chat_thinking(""), std::nullopt);
  EXPECT_EQ(chat_thinking(R"(,"thinking":{"type":"enabled"})"), ThinkingMode::High);
  EXPECT_EQ(chat_thinking(R"(,"thinking":{"type":"disabled"})"), ThinkingMode::None);
  EXPECT_EQ(chat_thinking(R"(,"thinking":true)"), ThinkingMode::High);
  EXPECT_EQ(chat_thinking(R"(,"thinking":false)"), ThinkingMode::None);
  EXPECT_EQ(chat_thinking(R"(,"thinking":null)"), std::nullopt);
  EXPECT_EQ(chat_thinking(R"(,"think":false)"), ThinkingMode::None);
  EXPECT_EQ(chat_thinking(R"(,"think":true)"), ThinkingMode::High);
  EXPECT_EQ(chat_thinking(R"(,"reasoning_effort":"max")"), ThinkingMode::Max);
  for (const char* effort : {"xhigh", "high", "medium", "low", "minimal"}) {
    EXPECT_EQ(chat_thinking(std::string(R"(,"reasoning_effort":")") + effort + "\""), ThinkingMode::High) << effort;
  }
  EXPECT_EQ(chat_thinking(R"(,"reasoning_effort":"none")"), ThinkingMode::None);
  EXPECT_EQ(chat_thinking(R"(,"reasoning_effort":null)"), std::nullopt);
  // Disabled wins over any effort; enabled + effort takes the effort.
  EXPECT_EQ(chat_thinking(R"(,"think":false,"reasoning_effort":"max")"), ThinkingMode::None);
  EXPECT_EQ(chat_thinking(R"(,"thinking":{"type":"enabled"},"reasoning_effort":"max")"), ThinkingMode::Max);
  EXPECT_EQ(chat_thinking(R"(,"thinking":true,"reasoning_effort":"none")"), ThinkingMode::None);
  // Completions reads the same fields.
  EXPECT_EQ(parse_completions_request(R"({"prompt":"p","think":false})").thinking, ThinkingMode::None);
  EXPECT_EQ(parse_completions_request(R"({"prompt":"p","reasoning_effort":"max"})").thinking, ThinkingMode::Max);
}

TEST(ServerRequest, ModelAliasesApplyOnlyWithoutExplicitControl) {
  const auto mode = [](Api api, std::string_view body) { return requested_thinking_mode(parse_request(api, body)); };
  EXPECT_EQ(mode(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}]})"), ThinkingMode::High);
  EXPECT_EQ(mode(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-chat"})"), ThinkingMode::None);
  EXPECT_EQ(mode(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-reasoner"})"), ThinkingMode::High);
  EXPECT_EQ(mode(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-chat","think":true})"), ThinkingMode::High);
  EXPECT_EQ(mode(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-chat","reasoning_effort":"max"})"),
            ThinkingMode::Max);
  EXPECT_EQ(mode(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-reasoner","think":false})"),
            ThinkingMode::None);
  EXPECT_EQ(mode(Api::Completions, R"({"prompt":"p","model":"deepseek-chat"})"), ThinkingMode::None);
  EXPECT_EQ(mode(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-chat"})"), ThinkingMode::None);
  EXPECT_EQ(mode(Api::Messages,
                 R"({"messages":[{"role":"user","content":"u"}],"model":"deepseek-chat","thinking":{"type":"enabled","budget_tokens":1024}})"),
            ThinkingMode::High);
  // Responses: only a non-null reasoning.effort is explicit.
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","model":"deepseek-chat"})"), ThinkingMode::None);
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","model":"deepseek-chat","reasoning":{"summary":"auto"}})"),
            ThinkingMode::None);
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","model":"deepseek-chat","reasoning":{"effort":null}})"),
            ThinkingMode::None);
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","model":"deepseek-chat","reasoning":{"effort":"high"}})"),
            ThinkingMode::High);
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","model":"deepseek-chat","think":true,"thinking":true})"),
            ThinkingMode::None);  // not Responses fields
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","reasoning":{"effort":"minimal"}})"), ThinkingMode::High);
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","reasoning":{"effort":"none"}})"), ThinkingMode::None);
  EXPECT_EQ(mode(Api::Responses, R"({"input":"x","reasoning":{"effort":"max"}})"), ThinkingMode::Max);
}

TEST(ServerRequest, AnthropicThinkingControls) {
  const auto thinking = [](std::string_view fields) {
    return parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]" + std::string(fields) + "}").thinking;
  };
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"enabled","budget_tokens":2048})"), ThinkingMode::High);
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"adaptive"})"), ThinkingMode::High);
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"disabled"})"), ThinkingMode::None);
  EXPECT_EQ(thinking(R"(,"output_config":{"effort":"max"})"), ThinkingMode::Max);
  EXPECT_EQ(thinking(R"(,"output_config":{"effort":"low"})"), ThinkingMode::High);
  EXPECT_EQ(thinking(R"(,"output_config":{"effort":null})"), std::nullopt);
  EXPECT_EQ(thinking(R"(,"output_config":{"format":{}})"), std::nullopt);
  EXPECT_EQ(thinking(R"(,"reasoning_effort":"none")"), ThinkingMode::None);
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"adaptive"},"output_config":{"effort":"max"})"), ThinkingMode::Max);
  EXPECT_EQ(thinking(R"(,"thinking":{"type":"disabled"},"output_config":{"effort":"max"})"), ThinkingMode::None);
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"output_config":{"effort":"huge"}})"),
            "output_config.effort: unknown effort 'huge' (expected max, xhigh, high, medium, low, minimal or none)");
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"output_config":"max"})"), "output_config: expected an object");
}

TEST(ServerRequest, ResponsesReasoningSummary) {
  const auto summary = [](std::string_view reasoning) {
    return parse_responses_request("{\"input\":\"x\",\"reasoning\":" + std::string(reasoning) + "}").reasoning_summary;
  };
  EXPECT_TRUE(summary(R"({"summary":"auto"})"));
  EXPECT_TRUE(summary(R"({"summary":"concise"})"));
  EXPECT_TRUE(summary(R"({"effort":"high","summary":"detailed"})"));
  EXPECT_FALSE(summary(R"({"summary":"none"})"));
  EXPECT_FALSE(summary(R"({"summary":null})"));
  EXPECT_FALSE(summary(R"({"effort":"high"})"));
  EXPECT_FALSE(summary("null"));
  EXPECT_EQ(error_of(Api::Responses, R"({"input":"x","reasoning":{"summary":1}})"),
            "reasoning.summary: expected a string");
  EXPECT_EQ(error_of(Api::Responses, R"({"input":"x","reasoning":"high"})"), "reasoning: expected an object");
  EXPECT_EQ(error_of(Api::Responses, R"({"input":"x","reasoning":{"effort":"turbo"}})"),
            "reasoning.effort: unknown effort 'turbo' (expected max, xhigh, high, medium, low, minimal or none)");
}

// ---------------------------------------------------------------------------
// Chat completions

TEST(ServerRequest, ChatMessagesConverge) {
  const ChatRequest r = parse_chat_completions_request(R"({
    "messages": [
      {"role": "system", "content": "S"},
      {"content": [{"type": "text", "text": "Hello "}, {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "world"}]},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [
         {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": {"b": 1, "a": [true, null]}}},
         {"id": "call_2", "type": "function", "function": {"name": "put", "arguments": "{\"x\": 1}"}},
         {"id": "call_3", "type": "function", "function": {"name": "nameless_args"}},
         {"id": "call_4", "type": "function", "function": {"arguments": "{}"}},
         {"id": "call_5", "type": "function"}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "R1", "name": "get"},
      {"role": "function", "content": "R2"},
      {"role": "narrator", "content": "dropped"},
      {"role": "user", "content": "next", "reasoning_content": "not kept", "tool_call_id": "not kept"}
    ]})");
  EXPECT_EQ(r.api, Api::ChatCompletions);
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "system", "content": "S"},
      {"role": "user", "content": "Hello world"},
      {"role": "assistant", "content": "", "reasoning_content": "think",
       "tool_calls": [
         {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"b\":1,\"a\":[true,null]}"}},
         {"id": "call_2", "type": "function", "function": {"name": "put", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "content": "R1", "tool_call_id": "call_1"},
      {"role": "tool", "content": "R2"},
      {"role": "user", "content": "next"}])").dump());
  EXPECT_TRUE(r.trailing_tool_result_ids.empty());
  EXPECT_FALSE(r.response_prefix);
}

TEST(ServerRequest, ChatInvalidArgumentTextIsKeptForTheOneParameterFallback) {
  const ChatRequest r = parse_chat_completions_request(R"({"messages": [
      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"x\": 1"}}]}]})");
  EXPECT_EQ(r.messages.dump(), J(R"([{"role": "assistant", "content": "",
      "tool_calls": [{"id": "", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1"}}]}])").dump());
}

TEST(ServerRequest, ChatTrailingToolResultIds) {
  const ChatRequest r = parse_chat_completions_request(R"({"messages": [
      {"role": "user", "content": "u"},
      {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}},
                                           {"id": "b", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "a", "content": "1"},
      {"role": "tool", "content": "no id"},
      {"role": "tool", "tool_call_id": "b", "content": "2"}]})");
  EXPECT_EQ(r.trailing_tool_result_ids, (std::vector<std::string>{"a", "b"}));
  const ChatRequest after_user = parse_chat_completions_request(R"({"messages": [
      {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "user", "content": "u"}]})");
  EXPECT_TRUE(after_user.trailing_tool_result_ids.empty());
}

TEST(ServerRequest, ChatToolsAndToolChoice) {
  const std::string tools = R"([
      {"type": "function", "function": {"name": "bash", "description": "Run", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}}}, "strict": true}},
      {"name": "direct", "input_schema": {"type": "object"}}])";
  const ChatRequest r = parse_chat_completions_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tools\":" + tools + "}");
  EXPECT_EQ(r.tools.dump(), J(R"([
      {"type": "function", "function": {"name": "bash", "description": "Run", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}}}, "strict": true}},
      {"type": "function", "function": {"name": "direct", "input_schema": {"type": "object"}}}])").dump());
  EXPECT_TRUE(parse_chat_completions_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":\"none\",\"tools\":" + tools + "}")
                  .tools.is_null());
  for (const char* choice : {"\"auto\"", "\"required\"", R"({"type":"function","function":{"name":"bash"}})"}) {
    EXPECT_EQ(parse_chat_completions_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":" + std::string(choice) +
                                             ",\"tools\":" + tools + "}")
                  .tools.size(),
              2u)
        << choice;
  }
  const auto choice = [&](std::string_view c) {
    return parse_chat_completions_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":" + std::string(c) + ",\"tools\":" + tools +
                                          "}");
  };
  EXPECT_FALSE(choice("\"auto\"").tool_required);
  EXPECT_TRUE(choice("\"required\"").tool_required);
  EXPECT_EQ(choice("\"required\"").forced_tool, "");
  EXPECT_TRUE(choice(R"({"type":"function","function":{"name":"bash"}})").tool_required);
  EXPECT_EQ(choice(R"({"type":"function","function":{"name":"bash"}})").forced_tool, "bash");
  EXPECT_EQ(error_of(Api::ChatCompletions, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"function\",\"function\":"
                                           "{\"name\":\"nope\"}},\"tools\":" + tools + "}"),
            "tool_choice names the tool 'nope', which the request does not define");
  EXPECT_EQ(error_of(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}],"tool_choice":"required"})"),
            "tool_choice requires a tool call but the request defines no tools");
  EXPECT_TRUE(parse_chat_completions_request(R"({"messages":[{"role":"user","content":"u"}],"tools":[]})").tools.is_null());
  EXPECT_TRUE(parse_chat_completions_request(R"({"messages":[{"role":"user","content":"u"}],"tools":null})").tools.is_null());
}

TEST(ServerRequest, ChatPrefixCompletion) {
  const ChatRequest r = parse_chat_completions_request(R"({"messages": [
      {"role": "user", "content": "Write a python function"},
      {"role": "assistant", "content": "```python\n", "prefix": true}]})");
  EXPECT_EQ(r.response_prefix, "```python\n");
  EXPECT_EQ(r.messages.dump(), J(R"([{"role": "user", "content": "Write a python function"}])").dump());
  // prefix:false is an ordinary message.
  const ChatRequest plain = parse_chat_completions_request(R"({"messages": [
      {"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "prefix": false}]})");
  EXPECT_FALSE(plain.response_prefix);
  EXPECT_EQ(plain.messages.size(), 2u);
  EXPECT_EQ(error_of(Api::ChatCompletions, R"({"messages": [
      {"role": "assistant", "content": "a", "prefix": true}, {"role": "user", "content": "u"}]})"),
            "messages[0].prefix: only the last message, with role assistant, can be a prefix");
  EXPECT_EQ(error_of(Api::ChatCompletions, R"({"messages": [{"role": "user", "content": "u", "prefix": true}]})"),
            "messages[0].prefix: only the last message, with role assistant, can be a prefix");
}

TEST(ServerRequest, ChatMissingMessages) {
  EXPECT_EQ(error_of(Api::ChatCompletions, R"({"model":"x"})"), "missing messages");
  EXPECT_EQ(error_of(Api::ChatCompletions, R"({"messages":null})"), "missing messages");
  EXPECT_EQ(error_of(Api::Messages, R"({"model":"x"})"), "missing messages");
  // An empty conversation: OpenAI answers 400 "[] is too short - 'messages'", Anthropic 400
  // "messages: at least one message is required"; a system prompt alone does not make one.
  EXPECT_EQ(error_of(Api::ChatCompletions, R"({"messages":[]})"), "messages: at least one message is required");
  EXPECT_EQ(error_of(Api::Messages, R"({"model":"x","messages":[]})"), "messages: at least one message is required");
  EXPECT_EQ(error_of(Api::Messages, R"({"model":"x","system":"s","messages":[]})"),
            "messages: at least one message is required");
}

// PROTOCOL.md §2.5 A: non-thinking through the deepseek-chat alias.
TEST(ServerRequest, RendersExampleA) {
  const ChatRequest r = parse_chat_completions_request(R"({"model": "deepseek-chat", "messages": [
      {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]})");
  EXPECT_EQ(render(r), std::string(kBos) + "You are terse.<｜User｜>Hello<｜Assistant｜></think>");
}

// PROTOCOL.md §2.5 B: old reasoning is dropped before the last user message.
TEST(ServerRequest, RendersExampleB) {
  const ChatRequest r = parse_chat_completions_request(R"({"messages": [
      {"role": "user", "content": "first"},
      {"role": "assistant", "reasoning_content": "old", "content": "first answer"},
      {"role": "user", "content": "second"}]})");
  EXPECT_EQ(render(r), std::string(kBos) +
                           "<｜User｜>first<｜Assistant｜></think>first answer<｜end▁of▁sentence｜>"
                           "<｜User｜>second<｜Assistant｜><think>");
}

// ---------------------------------------------------------------------------
// Completions

TEST(ServerRequest, CompletionsPromptBecomesDefaultChat) {
  const std::string expected =
      J(R"([{"role":"system","content":"You are a helpful assistant"},{"role":"user","content":"2+2="}])").dump();
  EXPECT_EQ(parse_completions_request(R"({"prompt":"2+2="})").messages.dump(), expected);
  EXPECT_EQ(parse_completions_request(R"({"prompt":["2+2=","ignored"]})").messages.dump(), expected);
  EXPECT_EQ(parse_completions_request(R"({"prompt":"2+2="})").api, Api::Completions);
  EXPECT_EQ(error_of(Api::Completions, R"({"model":"m"})"), "missing prompt");
  EXPECT_EQ(error_of(Api::Completions, R"({"prompt":null})"), "missing prompt");
  EXPECT_EQ(error_of(Api::Completions, R"({"prompt":[]})"), "missing prompt");
  EXPECT_EQ(error_of(Api::Completions, R"({"prompt":[1,2]})"), "prompt[0]: expected a string");
  EXPECT_EQ(error_of(Api::Completions, R"({"prompt":5})"), "prompt: expected a string or an array of strings");
}

// PROTOCOL.md §2.5 F.
TEST(ServerRequest, RendersExampleF) {
  EXPECT_EQ(render(parse_completions_request(R"({"prompt":"2+2="})")),
            std::string(kBos) + "You are a helpful assistant<｜User｜>2+2=<｜Assistant｜><think>");
}

// ---------------------------------------------------------------------------
// Anthropic Messages

// PROTOCOL.md §2.5 E: two tool_result blocks then a text block in one user message.
constexpr const char* kExampleE = R"({
  "model": "claude-sonnet-4-5", "max_tokens": 1024,
  "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1.0"},
             {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
             "Be brief."],
  "tools": [{"name": "read", "description": "Read a file",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
             "cache_control": {"type": "ephemeral"}}],
  "messages": [
    {"role": "user", "content": "read a and b"},
    {"content": [{"type": "thinking", "thinking": "two reads", "signature": "sig"},
                 {"type": "text", "text": "Reading."},
                 {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a", "z": 1}},
                 {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "b"}}],
     "role": "assistant"},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "R1"},
      {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
       "content": [{"type": "text", "text": "R"}, {"type": "image", "source": {}}, {"type": "text", "text": "2"}]},
      {"type": "text", "text": "reminder text"},
      {"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}]})";

TEST(ServerRequest, AnthropicExampleEMessages) {
  const ChatRequest r = parse_messages_request(kExampleE);
  EXPECT_EQ(r.api, Api::Messages);
  EXPECT_EQ(r.model, "claude-sonnet-4-5");
  EXPECT_EQ(r.max_tokens, 1024);
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "system", "content": "You are Claude Code.\nBe brief."},
      {"role": "user", "content": "read a and b"},
      {"role": "assistant", "content": "Reading.", "reasoning_content": "two reads", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\",\"z\":1}"}},
        {"id": "toolu_2", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"b\"}"}}]},
      {"role": "tool", "content": "R1", "tool_call_id": "toolu_1"},
      {"role": "tool", "content": "R2", "tool_call_id": "toolu_2"},
      {"role": "user", "content": "reminder text"}])").dump());
  EXPECT_EQ(r.tools.dump(), J(R"([{"type": "function", "function": {"name": "read", "description": "Read a file",
      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])").dump());
  EXPECT_EQ(r.trailing_tool_result_ids, (std::vector<std::string>{"toolu_1", "toolu_2"}));
}

// The official encoder merges the results and the text into one user turn,
// joined by "\n\n" (PROTOCOL.md §2.7; ds4 writes them without separator).
TEST(ServerRequest, RendersExampleE) {
  ChatRequest r = parse_messages_request(kExampleE);
  r.tools = nullptr;  // keep the expected text short; tools still keep the reasoning
  const std::string text = render(r);
  EXPECT_EQ(text, std::string(kBos) +
                      "You are Claude Code.\nBe brief.<｜User｜>read a and b<｜Assistant｜></think>Reading."
                      "\n\n<｜DSML｜tool_calls>\n"
                      "<｜DSML｜invoke name=\"read\">\n"
                      "<｜DSML｜parameter name=\"path\" string=\"true\">a</｜DSML｜parameter>\n"
                      "<｜DSML｜parameter name=\"z\" string=\"false\">1</｜DSML｜parameter>\n"
                      "</｜DSML｜invoke>\n"
                      "<｜DSML｜invoke name=\"read\">\n"
                      "<｜DSML｜parameter name=\"path\" string=\"true\">b</｜DSML｜parameter>\n"
                      "</｜DSML｜invoke>\n"
                      "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                      "<｜User｜><tool_result>R1</tool_result>\n\n<tool_result>R2</tool_result>\n\nreminder text"
                      "<｜Assistant｜><think>");
}

TEST(ServerRequest, AnthropicSystemForms) {
  const auto system_of = [](std::string_view system) {
    const ChatRequest r = parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"system\":" + std::string(system) + "}");
    // The user message is always there; a system message, when kept, comes before it.
    return r.messages[0]["role"] != "system" ? std::string("<none>") : r.messages[0]["content"].get<std::string>();
  };
  EXPECT_EQ(system_of(R"("Just text")"), "Just text");
  EXPECT_EQ(system_of(R"("x-anthropic-billing-header: a")"), "<none>");
  EXPECT_EQ(system_of(R"(["x-anthropic-cch=1", {"text": "A"}, "", {"type": "text", "text": "B"}])"), "A\nB");
  EXPECT_EQ(system_of(R"([])"), "<none>");
  EXPECT_EQ(system_of("null"), "<none>");
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"system":5})"),
            "system: expected a string or an array of text blocks");
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"system":[1]})"), "system[0]: expected a string or a text block");
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"system":[{"text":2}]})"), "system[0].text: expected a string");
}

TEST(ServerRequest, AnthropicPrefillBecomesResponsePrefix) {
  const ChatRequest r = parse_messages_request(R"({"messages": [
      {"role": "user", "content": "Answer in JSON"},
      {"role": "assistant", "content": [{"type": "text", "text": "{\"ans"}, {"type": "text", "text": "wer\":"}]}]})");
  EXPECT_EQ(r.response_prefix, "{\"answer\":");
  EXPECT_EQ(r.messages.dump(), J(R"([{"role": "user", "content": "Answer in JSON"}])").dump());
  EXPECT_EQ(parse_messages_request(R"({"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"P"}]})")
                .response_prefix,
            "P");
  // A trailing assistant turn with tool calls stays history.
  const ChatRequest calls = parse_messages_request(R"({"messages": [
      {"role": "user", "content": "u"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}]})");
  EXPECT_FALSE(calls.response_prefix);
  EXPECT_EQ(calls.messages.dump(), J(R"([{"role": "user", "content": "u"}, {"role": "assistant", "content": "",
      "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])").dump());
}

TEST(ServerRequest, AnthropicBlocksInOrder) {
  const ChatRequest r = parse_messages_request(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, "b",
                                   {"type": "tool_result", "tool_use_id": "t1"},
                                   {"type": "text", "text": "c"}]},
      {"role": "user", "content": []},
      {"role": "user", "content": null},
      {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}, {"type": "thinking",
        "thinking": ""}]},
      {"role": "user", "content": [{"type": "image", "source": {}}]},
      {"role": "narrator", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "dropped"}]}]})");
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "user", "content": "ab"},
      {"role": "tool", "content": "", "tool_call_id": "t1"},
      {"role": "user", "content": "c"},
      {"role": "user", "content": ""},
      {"role": "user", "content": ""},
      {"role": "assistant", "content": "", "reasoning_content": ""},
      {"role": "user", "content": ""}])").dump());
  EXPECT_TRUE(r.trailing_tool_result_ids.empty());
}

TEST(ServerRequest, AnthropicToolsAndChoice) {
  const std::string tools = R"([{"name": "a"}, {"name": "b", "description": "B", "input_schema": {"type": "object"}}])";
  const ChatRequest r = parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tools\":" + tools + "}");
  EXPECT_EQ(r.tools.dump(), J(R"([{"type": "function", "function": {"name": "a"}},
      {"type": "function", "function": {"name": "b", "description": "B", "parameters": {"type": "object"}}}])").dump());
  EXPECT_TRUE(parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"none\"},\"tools\":" + tools + "}")
                  .tools.is_null());
  EXPECT_EQ(parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"any\"},\"tools\":" + tools + "}")
                .tools.size(),
            2u);
  EXPECT_TRUE(parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"any\"},\"tools\":" + tools + "}")
                  .tool_required);
  const ChatRequest named =
      parse_messages_request("{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"b\"},\"tools\":" + tools + "}");
  EXPECT_TRUE(named.tool_required);
  EXPECT_EQ(named.forced_tool, "b");
  EXPECT_EQ(error_of(Api::Messages, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"zz\"},\"tools\":" +
                                        tools + "}"),
            "tool_choice names the tool 'zz', which the request does not define");
  EXPECT_EQ(error_of(Api::Messages, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tool_choice\":{\"type\":\"maybe\"},\"tools\":" + tools + "}"),
            "tool_choice.type: expected auto, none, any or tool, not \"maybe\"");
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"tools":[{"description":"x"}]})"),
            "tools[0].name: expected a string");
  EXPECT_EQ(error_of(Api::Messages, R"({"messages":[{"role":"user","content":"u"}],"tools":[{"name":"x","input_schema":[]}]})"),
            "tools[0].input_schema: expected an object");
}

TEST(ServerRequest, AnthropicTypeErrors) {
  const auto err = [](std::string_view messages) {
    return error_of(Api::Messages, "{\"messages\":" + std::string(messages) + "}");
  };
  EXPECT_EQ(err(R"([{"role":"user","content":5}])"),
            "messages[0].content: expected a string, an array of content blocks or null");
  EXPECT_EQ(err(R"([{"role":"user","content":[5]}])"), "messages[0].content[0]: expected a string or a content block");
  EXPECT_EQ(err(R"([{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{}"}]},
                    {"role":"user","content":"u"}])"),
            "messages[0].content[0].input: expected an object");
  EXPECT_EQ(err(R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":7}]}])"),
            "messages[0].content[0].content: expected a string, an array of content blocks or null");
  EXPECT_EQ(err(R"([{"role":"user","content":[{"type":"text","text":false}]}])"),
            "messages[0].content[0].text: expected a string");
  EXPECT_EQ(err(R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":1}]}])"),
            "messages[0].content[0].tool_use_id: expected a string");
}

// ---------------------------------------------------------------------------
// Responses

TEST(ServerRequest, ResponsesStringInput) {
  const ChatRequest r =
      parse_responses_request(R"({"model": "gpt-5-codex", "instructions": "Be a coder.", "input": "hi"})");
  EXPECT_EQ(r.api, Api::Responses);
  EXPECT_EQ(r.model, "gpt-5-codex");
  EXPECT_EQ(r.messages.dump(),
            J(R"([{"role":"system","content":"Be a coder."},{"role":"user","content":"hi"}])").dump());
  EXPECT_EQ(parse_responses_request(R"({"instructions": "", "input": "hi"})").messages.dump(),
            J(R"([{"role":"user","content":"hi"}])").dump());
}

TEST(ServerRequest, ResponsesCodexTranscript) {
  const ChatRequest r = parse_responses_request(R"({
    "instructions": "SYS",
    "input": [
      {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "DEV"}]},
      {"role": "user", "content": [{"type": "input_text", "text": "fix "}, {"type": "input_text", "text": "it"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}],
       "content": [{"type": "reasoning_text", "text": "details"}], "encrypted_content": "opaque"},
      {"type": "message", "role": "assistant", "status": "completed",
       "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "perplexity_search",
       "namespace": "mcp__perplexity__", "arguments": "{\"q\":\"x\"}", "status": "completed"},
      {"type": "custom_tool_call", "call_id": "call_b", "name": "apply_patch", "input": "*** Begin Patch"},
      {"type": "function_call_output", "call_id": "call_a", "output": "found"},
      {"type": "custom_tool_call_output", "call_id": "call_b",
       "output": [{"type": "input_text", "text": "applied"}, {"type": "output_text", "text": "!"}]},
      {"type": "compaction", "encrypted_content": "x"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "next"}]},
      {"type": "function_call", "id": "fc_2", "name": "shell", "arguments": {"cmd": ["ls"], "a": 1}},
      {"type": "function_call_output", "call_id": "fc_2", "output": "a.txt"}
    ]})");
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "system", "content": "SYS"},
      {"role": "developer", "content": "DEV"},
      {"role": "user", "content": "fix it"},
      {"role": "assistant", "content": "Looking.", "reasoning_content": "plan\ndetails", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "mcp__perplexity__perplexity_search",
          "arguments": "{\"q\":\"x\"}"}},
        {"id": "call_b", "type": "function", "function": {"name": "apply_patch",
          "arguments": "{\"input\":\"*** Begin Patch\"}"}}]},
      {"role": "tool", "content": "found", "tool_call_id": "call_a"},
      {"role": "tool", "content": "applied!", "tool_call_id": "call_b"},
      {"role": "assistant", "content": "", "reasoning_content": "next", "tool_calls": [
        {"id": "fc_2", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":[\"ls\"],\"a\":1}"}}]},
      {"role": "tool", "content": "a.txt", "tool_call_id": "fc_2"}])").dump());
  EXPECT_EQ(r.trailing_tool_result_ids, std::vector<std::string>{"fc_2"});
  EXPECT_TRUE(r.tools.is_null());
}

TEST(ServerRequest, ResponsesReasoningPlacement) {
  // Reasoning before a user message keeps its place in an empty assistant
  // turn; reasoning at the end does too.
  const ChatRequest r = parse_responses_request(R"({"input": [
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": ""}]},
      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "b"}]},
      {"role": "user", "content": "u"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "tail"}]}]})");
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "assistant", "content": "", "reasoning_content": "a\nb"},
      {"role": "user", "content": "u"},
      {"role": "assistant", "content": "", "reasoning_content": "tail"}])").dump());
  EXPECT_TRUE(r.trailing_tool_result_ids.empty());
}

// A call after reasoning that follows an assistant message which already has
// reasoning opens its own turn, so the reasoning stays before the call.
TEST(ServerRequest, ResponsesCallAfterSecondReasoningOpensATurn) {
  const ChatRequest r = parse_responses_request(R"({"input": [
      {"role": "user", "content": "u"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r1"}]},
      {"role": "assistant", "content": "a"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r2"}]},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})");
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "user", "content": "u"},
      {"role": "assistant", "content": "a", "reasoning_content": "r1"},
      {"role": "assistant", "content": "", "reasoning_content": "r2", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])").dump());
}

TEST(ServerRequest, ResponsesHostedCallsAndToolSearch) {
  const ChatRequest r = parse_responses_request(R"({
    "tools": [{"type": "tool_search", "execution": "client"}],
    "input": [
      {"role": "user", "content": "go"},
      {"type": "local_shell_call", "call_id": "ls_1", "action": {"type": "exec", "command": ["ls"]},
        "status": "completed"},
      {"type": "local_shell_call_output", "call_id": "ls_1", "output": "a"},
      {"type": "tool_search_call", "call_id": "ts_1", "arguments": {"query": "weather"}},
      {"type": "tool_search_output", "call_id": "ts_1",
       "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]},
      {"type": "web_search_call", "id": "ws_1", "action": {"type": "search", "query": "q"}},
      {"type": "web_search_call_output", "id": "ws_1", "result": {"hits": 2}}
    ]})");
  EXPECT_EQ(r.messages.dump(), J(R"([
      {"role": "user", "content": "go"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "ls_1", "type": "function", "function": {"name": "local_shell",
          "arguments": "{\"type\":\"exec\",\"command\":[\"ls\"]}"}}]},
      {"role": "tool", "content": "a", "tool_call_id": "ls_1"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "ts_1", "type": "function", "function": {"name": "tool_search",
          "arguments": "{\"query\":\"weather\"}"}}]},
      {"role": "tool",
        "content": "[{\"type\":\"function\",\"name\":\"weather\",\"parameters\":{\"type\":\"object\"}}]",
        "tool_call_id": "ts_1"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "ws_1", "type": "function", "function": {"name": "web_search_call",
          "arguments": "{\"type\":\"search\",\"query\":\"q\"}"}}]},
      {"role": "tool", "content": "{\"hits\":2}", "tool_call_id": "ws_1"}])").dump());
  EXPECT_EQ(r.tools.dump(), J(R"([
      {"type": "function", "function": {"name": "tool_search", "description": "Search available tools.",
        "parameters": {"type": "object", "properties": {}}}},
      {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])").dump());
  EXPECT_EQ(r.tool_wire_names.at("tool_search").kind, ToolWireName::Kind::ToolSearch);
  EXPECT_EQ(r.tool_wire_names.at("weather").kind, ToolWireName::Kind::Function);
  EXPECT_EQ(r.trailing_tool_result_ids, std::vector<std::string>{"ws_1"});
}

TEST(ServerRequest, ResponsesTools) {
  const ChatRequest r = parse_responses_request(R"({"input": "x", "tools": [
      {"type": "function", "name": "shell", "description": "Run", "strict": false,
       "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
      {"type": "namespace", "name": "mcp__perplexity__", "description": "ns", "tools": [
        {"type": "function", "name": "perplexity_search", "description": "Search",
         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
        {"name": "bare"},
        {"type": "custom", "name": "skipped"}]},
      {"type": "custom", "name": "apply_patch", "description": "Patch files",
       "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
      {"type": "tool_search", "description": "Find tools", "parameters": {"type": "object", "properties": {"q": {}}}},
      {"type": "web_search"},
      {"type": "function", "function": {"name": "chat_form", "parameters": {}}}]})");
  EXPECT_EQ(r.tools.dump(), J(R"([
      {"type": "function", "function": {"name": "shell", "description": "Run",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "mcp__perplexity__perplexity_search", "description": "Search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "mcp__perplexity__bare", "description": "",
        "parameters": {"type": "object", "properties": {}}}},
      {"type": "function", "function": {"name": "apply_patch", "description": "Patch files",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}},
      {"type": "function", "function": {"name": "tool_search", "description": "Find tools",
        "parameters": {"type": "object", "properties": {"q": {}}}}},
      {"type": "function", "function": {"name": "chat_form", "parameters": {}}}])").dump());
  const auto wire = [&r](const std::string& prompt_name) {
    const ToolWireName& w = r.tool_wire_names.at(prompt_name);
    return w.name + "|" + w.space + "|" + std::to_string(static_cast<int>(w.kind));
  };
  EXPECT_EQ(r.tool_wire_names.size(), 6u);
  EXPECT_EQ(wire("shell"), "shell||0");
  EXPECT_EQ(wire("mcp__perplexity__perplexity_search"), "perplexity_search|mcp__perplexity__|0");
  EXPECT_EQ(wire("mcp__perplexity__bare"), "bare|mcp__perplexity__|0");
  EXPECT_EQ(wire("apply_patch"), "apply_patch||1");
  EXPECT_EQ(wire("tool_search"), "tool_search||2");
  EXPECT_EQ(wire("chat_form"), "chat_form||0");
}

TEST(ServerRequest, ResponsesToolChoice) {
  const std::string tools = R"(,"tools":[{"type":"function","name":"f"}])";
  const auto parse = [&](std::string_view choice) {
    return parse_responses_request("{\"input\":\"x\"" + tools + ",\"tool_choice\":" + std::string(choice) + "}");
  };
  EXPECT_EQ(parse("\"auto\"").tools.size(), 1u);
  EXPECT_EQ(parse("null").tools.size(), 1u);
  EXPECT_TRUE(parse("\"none\"").tools.is_null());
  const auto err = [&](std::string_view choice) {
    return error_of(Api::Responses, "{\"input\":\"x\"" + tools + ",\"tool_choice\":" + std::string(choice) + "}");
  };
  // Forced calls (a DwarfStar extension over ds4, which refuses them):
  // constrained decoding makes them possible.
  EXPECT_TRUE(parse("\"required\"").tool_required);
  EXPECT_EQ(parse("\"required\"").forced_tool, "");
  EXPECT_EQ(parse(R"({"type":"function","name":"f"})").forced_tool, "f");
  EXPECT_EQ(err(R"({"type":"function","name":"g"})"),
            "tool_choice names the tool 'g', which the request does not define");
  EXPECT_EQ(err(R"({"type":"mcp","server_label":"x"})"), "forced tool_choice of type 'mcp' not supported");
  EXPECT_EQ(err("\"sometimes\""), "tool_choice=sometimes not supported");
  EXPECT_EQ(err("3"), "tool_choice: expected \"none\", \"auto\", \"required\" or a function");
}

TEST(ServerRequest, ResponsesRefusals) {
  const auto err = [](std::string_view body) { return error_of(Api::Responses, body); };
  EXPECT_EQ(err(R"({"model":"m"})"), "missing input");
  EXPECT_EQ(err(R"({"input":null})"), "missing input");
  EXPECT_EQ(err(R"({"input":5})"), "input: expected a string or an array of items");
  EXPECT_EQ(err(R"({"input":"x","previous_response_id":"resp_1"})"),
            "previous_response_id is not supported; replay full input instead");
  EXPECT_EQ(err(R"({"input":"x","conversation":{"id":"conv_1"}})"),
            "conversation is not supported; replay full input instead");
  EXPECT_EQ(err(R"({"input":"x","previous_response_id":null,"conversation":null})"), "");
  EXPECT_EQ(err(R"({"input":[{"type":"message","role":"assistant","status":"in_progress","content":"a"}]})"),
            "input[0].status: only completed items can be replayed (got 'in_progress')");
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":"u"},
                             {"type":"function_call","status":"incomplete","name":"f"}]})"),
            "input[1].status: only completed items can be replayed (got 'incomplete')");
  EXPECT_EQ(err(R"({"input":[{"type":"item_reference","id":"msg_1"}]})"),
            "input[0].type: unsupported item type 'item_reference'");
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:"}]}]})"),
            "input[0].content[0]: unsupported content type 'input_image' (only text content is supported)");
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":[{"text":"t"}]}]})"),
            "input[0].content[0].type: expected a string");
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":[{"type":"input_text"}]}]})"),
            "input[0].content[0].text: expected a string");
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":[3]}]})"),
            "input[0].content[0]: expected a string or a text content block");
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":{"text":"t"}}]})"),
            "input[0].content: expected a string, an array of text content blocks or null");
  EXPECT_EQ(err(R"({"input":[{"role":"robot","content":"u"}]})"), "input[0].role: unsupported role 'robot'");
  EXPECT_EQ(err(R"({"input":[7]})"), "input[0]: expected an object");
  EXPECT_EQ(err(R"({"input":[{"type":"function_call","name":"f","arguments":"[1]"}]})"),
            "input[0].arguments: expected a JSON object text");
  EXPECT_EQ(err(R"({"input":[{"type":"reasoning","summary":"text"}]})"), "input[0].summary: expected an array");
  EXPECT_EQ(err(R"({"input":"x","tools":[{"type":"function"}]})"), "tools[0].name: expected a string");
  EXPECT_EQ(err(R"({"input":"x","tools":[{"type":"namespace","name":"n","tools":[{"type":"function"}]}]})"),
            "tools[0].tools[0].name: expected a string");
  EXPECT_EQ(err(R"({"input":"x","tools":{}})"), "tools: expected an array of tools");
  EXPECT_EQ(err(R"({"input":[{"type":"tool_search_output","call_id":"c","tools":[{"type":"custom"}]}]})"),
            "input[0].tools[0].name: expected a string");
  // A blank status and compaction items are accepted.
  EXPECT_EQ(err(R"({"input":[{"type":"context_compaction"},{"role":"user","content":null,"status":""}]})"), "");
}

TEST(ServerRequest, ResponsesContentAcceptsEveryTextBlockType) {
  const ChatRequest r = parse_responses_request(R"({"input": [{"role": "user", "content": [
      {"type": "input_text", "text": "1"}, {"type": "output_text", "text": "2"}, {"type": "text", "text": "3"},
      {"type": "summary_text", "text": "4"}, {"type": "reasoning_text", "text": "5"}, "6",
      {"type": "input_text", "text": null}]}]})");
  EXPECT_EQ(r.messages.dump(), J(R"([{"role": "user", "content": "123456"}])").dump());
}

// The same Codex turn rendered: namespaced prompt names reach the DSML block.
TEST(ServerRequest, RendersResponsesToolTurn) {
  const ChatRequest r = parse_responses_request(R"({"model": "deepseek-chat", "input": [
      {"role": "user", "content": "q"},
      {"type": "function_call", "call_id": "c1", "namespace": "ns__", "name": "f", "arguments": "{\"a\":\"b\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "out"}]})");
  EXPECT_EQ(render(r), std::string(kBos) +
                           "<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"
                           "<｜DSML｜invoke name=\"ns__f\">\n"
                           "<｜DSML｜parameter name=\"a\" string=\"true\">b</｜DSML｜parameter>\n"
                           "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                           "<｜User｜><tool_result>out</tool_result><｜Assistant｜></think>");
}

TEST(ServerRequest, ParseRequestDispatches) {
  EXPECT_EQ(parse_request(Api::ChatCompletions, R"({"messages":[{"role":"user","content":"u"}]})").api, Api::ChatCompletions);
  EXPECT_EQ(parse_request(Api::Completions, R"({"prompt":""})").api, Api::Completions);
  EXPECT_EQ(parse_request(Api::Responses, R"({"input":""})").api, Api::Responses);
  EXPECT_EQ(parse_request(Api::Messages, R"({"messages":[{"role":"user","content":"u"}]})").api, Api::Messages);
}

}  // namespace
}  // namespace ds4::server
