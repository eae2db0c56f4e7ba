// Reply formatters of ds4-server against PROTOCOL.md §5.5–5.7 and §5.9: the
// exact SSE event sequences of each API (every event's JSON, key order
// included, and the framing bytes), usage numbers (§5.6), the non-streaming
// bodies and the error shapes. Expected events are written out by hand from
// the spec; random item ids are checked for their format and then substituted.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "server/reply.h"

namespace ds4::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kCreated = 1700000000;

ChatRequest request_for(Api api) {
  ChatRequest request;
  request.api = api;
  request.model = "deepseek-v4-flash";
  request.stream = true;
  return request;
}

ReplyIds ids_for(const std::string& id) {
  ReplyIds ids;
  ids.id = id;
  ids.created = kCreated;
  return ids;
}

Usage usage(int64_t prompt, int64_t cached, int64_t completion) {
  Usage u;
  u.prompt_tokens = prompt;
  u.cached_tokens = cached;
  u.completion_tokens = completion;
  return u;
}

ReplyToolCall call(std::string id, std::string name, std::string arguments) {
  return ReplyToolCall{std::move(id), std::move(name), std::move(arguments)};
}

// Expected framing, written independently of the formatter's helpers.
std::string data_frame(const Json& j) { return "data: " + j.dump() + "\n\n"; }
std::string event_frame(const std::string& name, const Json& j) {
  return "event: " + name + "\ndata: " + j.dump() + "\n\n";
}

struct SseEvent {
  std::string name;  // "" without an `event:` line
  std::string data;
};

// Splits a stream into events; every event is `[event: X\n]data: Y\n\n`.
std::vector<SseEvent> split_sse(const std::string& text) {
  std::vector<SseEvent> events;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event at " << pos;
    if (end == std::string::npos) break;
    std::string block = text.substr(pos, end - pos);
    SseEvent event;
    if (block.rfind("event: ", 0) == 0) {
      const size_t nl = block.find('\n');
      EXPECT_NE(nl, std::string::npos);
      event.name = block.substr(7, nl - 7);
      block = block.substr(nl + 1);
    }
    EXPECT_EQ(block.rfind("data: ", 0), 0u) << block;
    EXPECT_EQ(block.find('\n'), std::string::npos) << "one data line per event: " << block;
    event.data = block.substr(6);
    events.push_back(event);
    pos = end + 2;
  }
  return events;
}

// --- OpenAI chat completions ------------------------------------------------

Json chat_chunk(const Json& delta, const Json& finish = nullptr, const std::string& id = "chatcmpl-7") {
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", kCreated},
              {"model", "deepseek-v4-flash"},
              {"choices", Json::array({Json{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
}

Json openai_u(int64_t prompt, int64_t completion, int64_t cached, int64_t written) {
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}, {"cache_write_tokens", written}}}};
}

TEST(ServerReplyChat, RoleChunkBytesAreExact) {
  auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-7"));
  EXPECT_EQ(stream->begin(),
            "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
            "\"model\":\"deepseek-v4-flash\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},"
            "\"finish_reason\":null}]}\n\n");
}

TEST(ServerReplyChat, PlainTextWithoutUsage) {
  auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-7"));
  std::string out = stream->begin();
  out += stream->content("Hel");
  out += stream->content("");  // nothing to send
  out += stream->content("lo \xC3\xA9");
  out += stream->raw("Hello");  // chat streams ignore raw bytes
  Reply reply;
  reply.content = "Hello \xC3\xA9";
  reply.usage = usage(10, 0, 3);
  out += stream->finish(reply);

  const std::string expected = data_frame(chat_chunk({{"role", "assistant"}})) +
                               data_frame(chat_chunk({{"content", "Hel"}})) +
                               data_frame(chat_chunk({{"content", "lo \xC3\xA9"}})) +
                               data_frame(chat_chunk(Json::object(), "stop")) + "data: [DONE]\n\n";
  EXPECT_EQ(out, expected);
  EXPECT_EQ(split_sse(out).size(), 5u);
}

TEST(ServerReplyChat, ReasoningThenTextWithUsageChunk) {
  ChatRequest request = request_for(Api::ChatCompletions);
  request.include_usage = true;
  auto stream = make_reply_stream(request, ids_for("chatcmpl-7"));
  std::string out = stream->begin();
  out += stream->reasoning("Let me ");
  out += stream->reasoning("think.");
  out += stream->content("Answer.");
  Reply reply;
  reply.reasoning = "Let me think.";
  reply.content = "Answer.";
  reply.thinking = reply.thinking_closed = true;
  reply.usage = usage(100, 60, 7);
  out += stream->finish(reply);

  const Json usage_chunk{{"id", "chatcmpl-7"},       {"object", "chat.completion.chunk"},
                         {"created", kCreated},      {"model", "deepseek-v4-flash"},
                         {"choices", Json::array()}, {"usage", openai_u(100, 7, 60, 40)}};
  const std::string expected =
      data_frame(chat_chunk({{"role", "assistant"}})) + data_frame(chat_chunk({{"reasoning_content", "Let me "}})) +
      data_frame(chat_chunk({{"reasoning_content", "think."}})) + data_frame(chat_chunk({{"content", "Answer."}})) +
      data_frame(chat_chunk(Json::object(), "stop")) + data_frame(usage_chunk) + "data: [DONE]\n\n";
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyChat, ToolCallsStreamedLive) {
  auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-7"));
  std::string out = stream->begin();
  out += stream->content("I will list them.");
  out += stream->tool_call_begin(0, "call_0123456789abcdef0123456789abcdef", "bash");
  for (const char* fragment : {"{", "\"command\":\"", "ls -la", "\"", ",\"timeout\":", "10", "}"}) {
    out += stream->tool_call_arguments(0, fragment);
  }
  out += stream->tool_call_begin(1, "call_ffffffffffffffffffffffffffffffff", "pwd");
  out += stream->tool_call_arguments(1, "{}");
  Reply reply;
  reply.content = "I will list them.";
  reply.tool_calls = {call("call_0123456789abcdef0123456789abcdef", "bash", R"({"command":"ls -la","timeout":10})"),
                      call("call_ffffffffffffffffffffffffffffffff", "pwd", "{}")};
  reply.finish = FinishReason::ToolCalls;
  out += stream->finish(reply);

  auto header = [](int index, const std::string& id, const std::string& name) {
    return chat_chunk({{"tool_calls", Json::array({Json{{"index", index},
                                                        {"id", id},
                                                        {"type", "function"},
                                                        {"function", {{"name", name}, {"arguments", ""}}}}})}});
  };
  auto fragment = [](int index, const std::string& text) {
    return chat_chunk({{"tool_calls", Json::array({Json{{"index", index}, {"function", {{"arguments", text}}}}})}});
  };
  std::string expected = data_frame(chat_chunk({{"role", "assistant"}})) +
                         data_frame(chat_chunk({{"content", "I will list them."}})) +
                         data_frame(header(0, "call_0123456789abcdef0123456789abcdef", "bash"));
  for (const char* text : {"{", "\"command\":\"", "ls -la", "\"", ",\"timeout\":", "10", "}"}) {
    expected += data_frame(fragment(0, text));
  }
  expected += data_frame(header(1, "call_ffffffffffffffffffffffffffffffff", "pwd"));
  expected += data_frame(fragment(1, "{}"));
  expected += data_frame(chat_chunk(Json::object(), "tool_calls")) + "data: [DONE]\n\n";
  EXPECT_EQ(out, expected);

  // The fragments concatenate to the call's arguments.
  std::string arguments;
  for (const SseEvent& e : split_sse(out)) {
    if (e.data == "[DONE]") continue;
    const Json j = Json::parse(e.data);
    const Json& delta = j["choices"][0]["delta"];
    if (delta.contains("tool_calls") && delta["tool_calls"][0]["index"] == 0) {
      arguments += delta["tool_calls"][0]["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(arguments, R"({"command":"ls -la","timeout":10})");
}

TEST(ServerReplyChat, ToolCallsOnlyAtTheEndGoOutInOneDelta) {
  auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-7"));
  std::string out = stream->begin();
  Reply reply;
  reply.tool_calls = {call("call_aa", "bash", R"({"command":"ls"})"), call("call_bb", "read", R"({"path":"a.txt"})")};
  reply.finish = FinishReason::ToolCalls;
  out += stream->finish(reply);

  const Json calls = Json::array({Json{{"index", 0},
                                       {"id", "call_aa"},
                                       {"type", "function"},
                                       {"function", {{"name", "bash"}, {"arguments", R"({"command":"ls"})"}}}},
                                  Json{{"index", 1},
                                       {"id", "call_bb"},
                                       {"type", "function"},
                                       {"function", {{"name", "read"}, {"arguments", R"({"path":"a.txt"})"}}}}});
  const std::string expected = data_frame(chat_chunk({{"role", "assistant"}})) +
                               data_frame(chat_chunk({{"tool_calls", calls}})) +
                               data_frame(chat_chunk(Json::object(), "tool_calls")) + "data: [DONE]\n\n";
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyChat, LengthAndErrorFinishReasons) {
  for (auto [finish, name] : {std::pair{FinishReason::Length, "length"}, std::pair{FinishReason::Error, "error"}}) {
    auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-9"));
    Reply reply;
    reply.finish = finish;
    const std::string out = stream->finish(reply);
    EXPECT_EQ(out, data_frame(chat_chunk(Json::object(), name, "chatcmpl-9")) + "data: [DONE]\n\n");
  }
}

TEST(ServerReplyChat, StreamErrorEvent) {
  auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-7"));
  EXPECT_EQ(stream->error("prefill failed"),
            "event: error\ndata: {\"error\":{\"message\":\"prefill failed\",\"type\":\"server_error\"}}\n\n");
  EXPECT_EQ(stream->error(""),
            "event: error\ndata: {\"error\":{\"message\":\"internal server error\",\"type\":\"server_error\"}}\n\n");
}

TEST(ServerReplyChat, InvalidUtf8IsReplaced) {
  auto stream = make_reply_stream(request_for(Api::ChatCompletions), ids_for("chatcmpl-7"));
  const std::string out = stream->content("a\xC3");
  EXPECT_EQ(out, data_frame(chat_chunk({{"content", "a\xEF\xBF\xBD"}})));
}

TEST(ServerReplyChat, BodyWithReasoningAndToolCalls) {
  ChatRequest request = request_for(Api::ChatCompletions);
  request.stream = false;
  Reply reply;
  reply.reasoning = "checking";
  reply.content = "";
  reply.tool_calls = {call("call_aa", "bash", R"({"command":"ls -la && pwd","timeout":10})")};
  reply.finish = FinishReason::ToolCalls;
  reply.usage = usage(50, 20, 12);
  const Json expected{
      {"id", "chatcmpl-3"},
      {"object", "chat.completion"},
      {"created", kCreated},
      {"model", "deepseek-v4-flash"},
      {"choices",
       Json::array({Json{
           {"index", 0},
           {"message",
            {{"role", "assistant"},
             {"content", ""},
             {"reasoning_content", "checking"},
             {"tool_calls",
              Json::array({Json{
                  {"id", "call_aa"},
                  {"type", "function"},
                  {"function", {{"name", "bash"}, {"arguments", R"({"command":"ls -la && pwd","timeout":10})"}}}}})}}},
           {"finish_reason", "tool_calls"}}})},
      {"usage", openai_u(50, 12, 20, 30)}};
  EXPECT_EQ(reply_body(request, ids_for("chatcmpl-3"), reply), expected);
}

TEST(ServerReplyChat, BodyPlainHasNoReasoningKey) {
  ChatRequest request = request_for(Api::ChatCompletions);
  Reply reply;
  reply.content = "whole text, thinking never closed";
  reply.thinking = true;
  reply.finish = FinishReason::Length;
  reply.usage = usage(5, 0, 9);
  const Json body = reply_body(request, ids_for("chatcmpl-4"), reply);
  const Json expected_message{{"role", "assistant"}, {"content", "whole text, thinking never closed"}};
  EXPECT_EQ(body["choices"][0]["message"], expected_message);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], openai_u(5, 9, 0, 5));
}

// --- OpenAI legacy completions ----------------------------------------------

Json completion_chunk(const std::string& text, const Json& finish = nullptr) {
  return Json{{"id", "cmpl-5"},
              {"object", "text_completion"},
              {"created", kCreated},
              {"model", "deepseek-v4-flash"},
              {"choices", Json::array({Json{{"text", text}, {"index", 0}, {"finish_reason", finish}}})}};
}

TEST(ServerReplyCompletions, RawTextStreamWithUsage) {
  ChatRequest request = request_for(Api::Completions);
  request.include_usage = true;
  auto stream = make_reply_stream(request, ids_for("cmpl-5"));
  std::string out = stream->begin();
  out += stream->reasoning("hidden?");  // completions only follow raw()
  out += stream->raw("<think>a");
  out += stream->raw("</think>b");
  out += stream->content("b");
  Reply reply;
  reply.raw_text = "<think>a</think>b";
  reply.finish = FinishReason::Length;
  reply.usage = usage(8, 8, 2);
  out += stream->finish(reply);
  const Json usage_chunk{{"id", "cmpl-5"},           {"object", "text_completion"},
                         {"created", kCreated},      {"model", "deepseek-v4-flash"},
                         {"choices", Json::array()}, {"usage", openai_u(8, 2, 8, 0)}};
  const std::string expected = data_frame(completion_chunk("<think>a")) + data_frame(completion_chunk("</think>b")) +
                               data_frame(completion_chunk("", "length")) + data_frame(usage_chunk) +
                               "data: [DONE]\n\n";
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyCompletions, StreamWithoutUsageAndBody) {
  auto stream = make_reply_stream(request_for(Api::Completions), ids_for("cmpl-5"));
  Reply reply;
  reply.raw_text = "hi";
  reply.content = "ignored";
  reply.usage = usage(4, 1, 1);
  EXPECT_EQ(stream->finish(reply), data_frame(completion_chunk("", "stop")) + "data: [DONE]\n\n");

  const Json expected{{"id", "cmpl-5"},
                      {"object", "text_completion"},
                      {"created", kCreated},
                      {"model", "deepseek-v4-flash"},
                      {"choices", Json::array({Json{{"text", "hi"}, {"index", 0}, {"finish_reason", "stop"}}})},
                      {"usage", openai_u(4, 1, 1, 3)}};
  EXPECT_EQ(reply_body(request_for(Api::Completions), ids_for("cmpl-5"), reply), expected);
}

// --- Anthropic Messages -----------------------------------------------------

Json ua(int64_t input, int64_t output, int64_t read, int64_t creation) {
  return Json{{"input_tokens", input},
              {"output_tokens", output},
              {"cache_read_input_tokens", read},
              {"cache_creation_input_tokens", creation}};
}

std::string message_start(const std::string& id, const Json& usage_json) {
  return event_frame("message_start", Json{{"type", "message_start"},
                                           {"message",
                                            {{"id", id},
                                             {"type", "message"},
                                             {"role", "assistant"},
                                             {"model", "deepseek-v4-flash"},
                                             {"content", Json::array()},
                                             {"stop_reason", nullptr},
                                             {"stop_sequence", nullptr},
                                             {"usage", usage_json}}}});
}

std::string block_start(int index, const Json& block) {
  return event_frame("content_block_start",
                     Json{{"type", "content_block_start"}, {"index", index}, {"content_block", block}});
}
std::string block_delta(int index, const Json& delta) {
  return event_frame("content_block_delta", Json{{"type", "content_block_delta"}, {"index", index}, {"delta", delta}});
}
std::string block_stop(int index) {
  return event_frame("content_block_stop", Json{{"type", "content_block_stop"}, {"index", index}});
}
std::string message_end(const std::string& stop_reason, int64_t output_tokens) {
  return event_frame("message_delta", Json{{"type", "message_delta"},
                                           {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", nullptr}}},
                                           {"usage", {{"output_tokens", output_tokens}}}}) +
         event_frame("message_stop", Json{{"type", "message_stop"}});
}
const Json kThinkingStart{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
const Json kTextStart{{"type", "text"}, {"text", ""}};
Json thinking_delta(const std::string& text) { return Json{{"type", "thinking_delta"}, {"thinking", text}}; }
Json text_delta(const std::string& text) { return Json{{"type", "text_delta"}, {"text", text}}; }
Json signature(const std::string& id) { return Json{{"type", "signature_delta"}, {"signature", id}}; }
Json tool_start(const std::string& id, const std::string& name) {
  return Json{{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", Json::object()}};
}
Json input_delta(const std::string& json) { return Json{{"type", "input_json_delta"}, {"partial_json", json}}; }

TEST(ServerReplyMessages, ReasoningThenTextWithPromptUsage) {
  ReplyIds ids = ids_for("chatcmpl-11");
  ids.prompt_usage = usage(100, 60, 0);
  auto stream = make_reply_stream(request_for(Api::Messages), ids);
  std::string out = stream->begin();
  out += stream->reasoning("Let me ");
  out += stream->reasoning("think.");
  out += stream->content("Hello");
  out += stream->content(" world");
  Reply reply;
  reply.reasoning = "Let me think.";
  reply.content = "Hello world";
  reply.thinking = reply.thinking_closed = true;
  reply.usage = usage(100, 60, 9);
  out += stream->finish(reply);

  // UA: input = prompt − read − creation = 0, read = cached, creation = prompt − cached.
  const std::string expected = message_start("chatcmpl-11", ua(0, 0, 60, 40)) + block_start(0, kThinkingStart) +
                               block_delta(0, thinking_delta("Let me ")) + block_delta(0, thinking_delta("think.")) +
                               block_delta(0, signature("chatcmpl-11")) + block_stop(0) + block_start(1, kTextStart) +
                               block_delta(1, text_delta("Hello")) + block_delta(1, text_delta(" world")) +
                               block_stop(1) + message_end("end_turn", 9);
  EXPECT_EQ(out, expected);
  for (const SseEvent& e : split_sse(out)) {
    EXPECT_EQ(Json::parse(e.data)["type"], e.name);  // event name = payload type
  }
}

TEST(ServerReplyMessages, ThinkingOnlyGetsAnEmptyTextBlock) {
  auto stream = make_reply_stream(request_for(Api::Messages), ids_for("chatcmpl-12"));
  std::string out = stream->begin();
  out += stream->reasoning("still thinking");
  Reply reply;
  reply.content = "still thinking";  // non-streaming view of an unclosed think
  reply.thinking = true;
  reply.finish = FinishReason::Length;
  reply.usage = usage(0, 0, 4);
  out += stream->finish(reply);
  const std::string expected = message_start("chatcmpl-12", ua(0, 0, 0, 0)) + block_start(0, kThinkingStart) +
                               block_delta(0, thinking_delta("still thinking")) +
                               block_delta(0, signature("chatcmpl-12")) + block_stop(0) + block_start(1, kTextStart) +
                               block_stop(1) + message_end("max_tokens", 4);
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyMessages, EmptyReplyGetsAnEmptyTextBlock) {
  auto stream = make_reply_stream(request_for(Api::Messages), ids_for("chatcmpl-17"));
  std::string out = stream->begin();
  Reply reply;
  out += stream->finish(reply);
  EXPECT_EQ(out, message_start("chatcmpl-17", ua(0, 0, 0, 0)) + block_start(0, kTextStart) + block_stop(0) +
                     message_end("end_turn", 0));
}

TEST(ServerReplyMessages, ToolUseStreamedLive) {
  auto stream = make_reply_stream(request_for(Api::Messages), ids_for("chatcmpl-13"));
  std::string out = stream->begin();
  out += stream->reasoning("plan");
  out += stream->content("Listing.");
  out += stream->tool_call_begin(0, "toolu_0123456789abcdef0123456789abcdef", "bash");
  out += stream->tool_call_arguments(0, "{");
  out += stream->tool_call_arguments(0, "\"command\":\"ls\"");
  out += stream->tool_call_arguments(0, "}");
  out += stream->tool_call_begin(1, "toolu_ffffffffffffffffffffffffffffffff", "pwd");
  out += stream->tool_call_arguments(1, "{}");
  Reply reply;
  reply.reasoning = "plan";
  reply.content = "Listing.";
  reply.tool_calls = {call("toolu_0123456789abcdef0123456789abcdef", "bash", R"({"command":"ls"})"),
                      call("toolu_ffffffffffffffffffffffffffffffff", "pwd", "{}")};
  reply.finish = FinishReason::ToolCalls;
  reply.usage = usage(10, 0, 30);
  out += stream->finish(reply);
  const std::string expected =
      message_start("chatcmpl-13", ua(0, 0, 0, 0)) + block_start(0, kThinkingStart) +
      block_delta(0, thinking_delta("plan")) + block_delta(0, signature("chatcmpl-13")) + block_stop(0) +
      block_start(1, kTextStart) + block_delta(1, text_delta("Listing.")) + block_stop(1) +
      block_start(2, tool_start("toolu_0123456789abcdef0123456789abcdef", "bash")) + block_delta(2, input_delta("{")) +
      block_delta(2, input_delta("\"command\":\"ls\"")) + block_delta(2, input_delta("}")) + block_stop(2) +
      block_start(3, tool_start("toolu_ffffffffffffffffffffffffffffffff", "pwd")) + block_delta(3, input_delta("{}")) +
      block_stop(3) + message_end("tool_use", 30);
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyMessages, ToolUseOnlyAtTheEnd) {
  auto stream = make_reply_stream(request_for(Api::Messages), ids_for("chatcmpl-14"));
  std::string out = stream->begin();
  Reply reply;
  reply.tool_calls = {call("toolu_aa", "read", R"({"path":"a.txt","lines":[1,2.50]})")};
  reply.finish = FinishReason::ToolCalls;
  reply.usage = usage(0, 0, 5);
  out += stream->finish(reply);
  const std::string expected =
      message_start("chatcmpl-14", ua(0, 0, 0, 0)) + block_start(0, tool_start("toolu_aa", "read")) +
      block_delta(0, input_delta(R"({"path":"a.txt","lines":[1,2.50]})")) + block_stop(0) + message_end("tool_use", 5);
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyMessages, AbortedToolBlockContinuesAsText) {
  auto stream = make_reply_stream(request_for(Api::Messages), ids_for("chatcmpl-15"));
  std::string out = stream->begin();
  out += stream->tool_call_begin(0, "toolu_aa", "bash");
  out += stream->tool_call_arguments(0, "{");
  out += stream->tool_block_abort();
  out += stream->content("<tool_calls>oops");
  Reply reply;
  reply.content = "<tool_calls>oops";
  out += stream->finish(reply);
  const std::string expected =
      message_start("chatcmpl-15", ua(0, 0, 0, 0)) + block_start(0, tool_start("toolu_aa", "bash")) +
      block_delta(0, input_delta("{")) + block_stop(0) + block_start(1, kTextStart) +
      block_delta(1, text_delta("<tool_calls>oops")) + block_stop(1) + message_end("end_turn", 0);
  EXPECT_EQ(out, expected);
}

TEST(ServerReplyMessages, StreamErrorEvent) {
  auto stream = make_reply_stream(request_for(Api::Messages), ids_for("chatcmpl-16"));
  EXPECT_EQ(stream->error("prefill failed"),
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
            "\"message\":\"prefill failed\"}}\n\n");
}

TEST(ServerReplyMessages, Bodies) {
  const ChatRequest request = request_for(Api::Messages);
  const ReplyIds ids = ids_for("chatcmpl-20");
  auto body = [&](const Reply& reply) { return reply_body(request, ids, reply); };
  auto envelope = [&](const Json& content, const std::string& stop, const Json& usage_json) {
    return Json{{"id", "chatcmpl-20"},          {"type", "message"},  {"role", "assistant"},
                {"model", "deepseek-v4-flash"}, {"content", content}, {"stop_reason", stop},
                {"stop_sequence", nullptr},     {"usage", usage_json}};
  };

  Reply full;
  full.reasoning = "r";
  full.content = "t";
  full.tool_calls = {call("toolu_aa", "bash", R"({"command":"ls","n":10})")};
  full.finish = FinishReason::ToolCalls;
  full.usage = usage(100, 60, 9);
  EXPECT_EQ(body(full),
            envelope(Json::array({Json{{"type", "thinking"}, {"thinking", "r"}, {"signature", "chatcmpl-20"}},
                                  Json{{"type", "text"}, {"text", "t"}},
                                  Json{{"type", "tool_use"},
                                       {"id", "toolu_aa"},
                                       {"name", "bash"},
                                       {"input", {{"command", "ls"}, {"n", 10}}}}}),
                     "tool_use", ua(0, 9, 60, 40)));

  Reply empty;
  EXPECT_EQ(body(empty), envelope(Json::array({Json{{"type", "text"}, {"text", ""}}}), "end_turn", ua(0, 0, 0, 0)));

  Reply thinking_only;
  thinking_only.reasoning = "r";
  thinking_only.finish = FinishReason::Length;
  EXPECT_EQ(body(thinking_only),
            envelope(Json::array({Json{{"type", "thinking"}, {"thinking", "r"}, {"signature", "chatcmpl-20"}},
                                  Json{{"type", "text"}, {"text", ""}}}),
                     "max_tokens", ua(0, 0, 0, 0)));

  Reply tools_only;
  tools_only.tool_calls = {call("toolu_bb", "pwd", "not json")};
  tools_only.finish = FinishReason::ToolCalls;
  EXPECT_EQ(body(tools_only),
            envelope(Json::array(
                         {Json{{"type", "tool_use"}, {"id", "toolu_bb"}, {"name", "pwd"}, {"input", Json::object()}}}),
                     "tool_use", ua(0, 0, 0, 0)));

  Reply error;
  error.content = "partial";
  error.finish = FinishReason::Error;
  EXPECT_EQ(body(error)["stop_reason"], "end_turn");
}

// --- OpenAI Responses -------------------------------------------------------

const std::regex kRs("rs_[0-9a-f]{24}"), kMsg("msg_[0-9a-f]{24}"), kFc("fc_[0-9a-f]{24}");

Json ur(int64_t input, int64_t cached, int64_t written, int64_t output) {
  return Json{{"input_tokens", input},
              {"input_tokens_details", {{"cached_tokens", cached}, {"cache_write_tokens", written}}},
              {"output_tokens", output},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", input + output}};
}

// Events of a Responses stream: no `event:` lines, "type" first and
// "sequence_number" second counting from 0.
std::vector<Json> responses_events(const std::string& out) {
  std::vector<Json> events;
  int64_t n = 0;
  for (const SseEvent& e : split_sse(out)) {
    EXPECT_EQ(e.name, "");
    Json j = Json::parse(e.data);
    auto it = j.begin();
    EXPECT_EQ(it.key(), "type");
    ++it;
    EXPECT_EQ(it.key(), "sequence_number");
    EXPECT_EQ(it.value(), n) << e.data;
    ++n;
    events.push_back(std::move(j));
  }
  return events;
}

Json ev(const std::string& type, int64_t sequence, const Json& fields) {
  Json j{{"type", type}, {"sequence_number", sequence}};
  for (const auto& [key, value] : fields.items()) j[key] = value;
  return j;
}

Json response_head(const std::string& status) {
  return Json{{"id", "resp_0123456789abcdef01234567"},
              {"object", "response"},
              {"created_at", kCreated},
              {"status", status},
              {"model", "deepseek-v4-flash"}};
}

Json text_part(const std::string& text) {
  return Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
}

Json message_item(const std::string& id, const std::string& status, const std::string& text) {
  return Json{{"id", id},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", Json::array({text_part(text)})}};
}

std::string expected_text(const std::vector<Json>& events) {
  std::string out;
  for (const Json& e : events) out += data_frame(e);
  return out;
}

TEST(ServerReplyResponses, PlainTextHidesReasoningWithoutSummary) {
  ReplyIds ids = ids_for("resp_0123456789abcdef01234567");
  auto stream = make_reply_stream(request_for(Api::Responses), ids);
  std::string out = stream->begin();
  out += stream->reasoning("hidden");
  out += stream->content("Hel");
  out += stream->content("lo");
  Reply reply;
  reply.reasoning = "hidden";
  reply.content = "Hello";
  reply.thinking = reply.thinking_closed = true;
  reply.usage = usage(100, 60, 7);
  out += stream->finish(reply);

  const std::vector<Json> events = responses_events(out);
  ASSERT_EQ(events.size(), 9u);
  const std::string msg = events[1]["item"]["id"];
  EXPECT_TRUE(std::regex_match(msg, kMsg)) << msg;

  Json created = response_head("in_progress");
  created["output"] = Json::array();
  Json done = response_head("completed");
  done["output"] = Json::array({message_item(msg, "completed", "Hello")});
  done["usage"] = ur(100, 60, 40, 7);
  const std::vector<Json> expected = {
      ev("response.created", 0, {{"response", created}}),
      ev("response.output_item.added", 1,
         {{"output_index", 0},
          {"item",
           {{"id", msg},
            {"type", "message"},
            {"status", "in_progress"},
            {"role", "assistant"},
            {"content", Json::array()}}}}),
      ev("response.content_part.added", 2,
         {{"item_id", msg}, {"output_index", 0}, {"content_index", 0}, {"part", text_part("")}}),
      ev("response.output_text.delta", 3,
         {{"item_id", msg}, {"output_index", 0}, {"content_index", 0}, {"delta", "Hel"}}),
      ev("response.output_text.delta", 4,
         {{"item_id", msg}, {"output_index", 0}, {"content_index", 0}, {"delta", "lo"}}),
      ev("response.output_text.done", 5,
         {{"item_id", msg}, {"output_index", 0}, {"content_index", 0}, {"text", "Hello"}}),
      ev("response.content_part.done", 6,
         {{"item_id", msg}, {"output_index", 0}, {"content_index", 0}, {"part", text_part("Hello")}}),
      ev("response.output_item.done", 7, {{"output_index", 0}, {"item", message_item(msg, "completed", "Hello")}}),
      ev("response.completed", 8, {{"response", done}}),
  };
  EXPECT_EQ(out, expected_text(expected));
}

TEST(ServerReplyResponses, SummaryTextAndNamespacedCallAtTheEnd) {
  ChatRequest request = request_for(Api::Responses);
  request.reasoning_summary = true;
  request.tool_wire_names["mcp__docs__search"] = ToolWireName{"search", "mcp__docs", ToolWireName::Kind::Function};
  auto stream = make_reply_stream(request, ids_for("resp_0123456789abcdef01234567"));
  std::string out = stream->begin();
  out += stream->reasoning("plan");
  out += stream->content("Searching.");
  // Live tool events are not part of a Responses stream.
  out += stream->tool_call_begin(0, "call_aa", "mcp__docs__search");
  out += stream->tool_call_arguments(0, "{}");
  Reply reply;
  reply.reasoning = "plan";
  reply.content = "Searching.";
  reply.thinking = reply.thinking_closed = true;
  reply.tool_calls = {call("call_aa", "mcp__docs__search", R"({"q":"kv cache"})")};
  reply.finish = FinishReason::ToolCalls;
  reply.usage = usage(20, 0, 11);
  out += stream->finish(reply);

  const std::vector<Json> events = responses_events(out);
  ASSERT_EQ(events.size(), 18u);
  const std::string rs = events[1]["item"]["id"];
  const std::string msg = events[4]["item"]["id"];
  const std::string fc = events[13]["item"]["id"];
  EXPECT_TRUE(std::regex_match(rs, kRs)) << rs;
  EXPECT_TRUE(std::regex_match(msg, kMsg)) << msg;
  EXPECT_TRUE(std::regex_match(fc, kFc)) << fc;

  const Json summary_part{{"type", "summary_text"}, {"text", "plan"}};
  const Json reasoning_done{
      {"id", rs}, {"type", "reasoning"}, {"status", "completed"}, {"summary", Json::array({summary_part})}};
  const Json call_done{{"id", fc},
                       {"type", "function_call"},
                       {"status", "completed"},
                       {"name", "search"},
                       {"namespace", "mcp__docs"},
                       {"call_id", "call_aa"},
                       {"arguments", R"({"q":"kv cache"})"}};
  Json call_added = call_done;
  call_added["status"] = "in_progress";
  call_added["arguments"] = "";
  Json created = response_head("in_progress");
  created["output"] = Json::array();
  Json done = response_head("completed");
  done["output"] = Json::array({reasoning_done, message_item(msg, "completed", "Searching."), call_done});
  done["usage"] = ur(20, 0, 20, 11);
  const std::vector<Json> expected = {
      ev("response.created", 0, {{"response", created}}),
      ev("response.output_item.added", 1,
         {{"output_index", 0},
          {"item", {{"id", rs}, {"type", "reasoning"}, {"status", "in_progress"}, {"summary", Json::array()}}}}),
      ev("response.reasoning_summary_part.added", 2,
         {{"item_id", rs},
          {"output_index", 0},
          {"summary_index", 0},
          {"part", {{"type", "summary_text"}, {"text", ""}}}}),
      ev("response.reasoning_summary_text.delta", 3,
         {{"item_id", rs}, {"output_index", 0}, {"summary_index", 0}, {"delta", "plan"}}),
      ev("response.output_item.added", 4,
         {{"output_index", 1},
          {"item",
           {{"id", msg},
            {"type", "message"},
            {"status", "in_progress"},
            {"role", "assistant"},
            {"content", Json::array()}}}}),
      ev("response.content_part.added", 5,
         {{"item_id", msg}, {"output_index", 1}, {"content_index", 0}, {"part", text_part("")}}),
      ev("response.output_text.delta", 6,
         {{"item_id", msg}, {"output_index", 1}, {"content_index", 0}, {"delta", "Searching."}}),
      ev("response.reasoning_summary_text.done", 7,
         {{"item_id", rs}, {"output_index", 0}, {"summary_index", 0}, {"text", "plan"}}),
      ev("response.reasoning_summary_part.done", 8,
         {{"item_id", rs}, {"output_index", 0}, {"summary_index", 0}, {"part", summary_part}}),
      ev("response.output_item.done", 9, {{"output_index", 0}, {"item", reasoning_done}}),
      ev("response.output_text.done", 10,
         {{"item_id", msg}, {"output_index", 1}, {"content_index", 0}, {"text", "Searching."}}),
      ev("response.content_part.done", 11,
         {{"item_id", msg}, {"output_index", 1}, {"content_index", 0}, {"part", text_part("Searching.")}}),
      ev("response.output_item.done", 12,
         {{"output_index", 1}, {"item", message_item(msg, "completed", "Searching.")}}),
      ev("response.output_item.added", 13, {{"output_index", 2}, {"item", call_added}}),
      ev("response.function_call_arguments.delta", 14,
         {{"item_id", fc}, {"output_index", 2}, {"delta", R"({"q":"kv cache"})"}}),
      ev("response.function_call_arguments.done", 15,
         {{"item_id", fc},
          {"output_index", 2},
          {"name", "search"},
          {"namespace", "mcp__docs"},
          {"arguments", R"({"q":"kv cache"})"}}),
      ev("response.output_item.done", 16, {{"output_index", 2}, {"item", call_done}}),
      ev("response.completed", 17, {{"response", done}}),
  };
  EXPECT_EQ(out, expected_text(expected));
}

TEST(ServerReplyResponses, LengthWhileThinkingIsIncomplete) {
  ChatRequest request = request_for(Api::Responses);
  request.reasoning_summary = true;
  auto stream = make_reply_stream(request, ids_for("resp_0123456789abcdef01234567"));
  std::string out = stream->begin();
  out += stream->reasoning("a long thought");
  Reply reply;
  reply.content = "a long thought";
  reply.thinking = true;
  reply.thinking_closed = false;
  reply.finish = FinishReason::Length;
  reply.usage = usage(3, 0, 4);
  out += stream->finish(reply);

  const std::vector<Json> events = responses_events(out);
  ASSERT_EQ(events.size(), 8u);
  const std::string rs = events[1]["item"]["id"];
  const Json reasoning_done{{"id", rs},
                            {"type", "reasoning"},
                            {"status", "incomplete"},
                            {"summary", Json::array({Json{{"type", "summary_text"}, {"text", "a long thought"}}})}};
  EXPECT_EQ(events[4]["type"], "response.reasoning_summary_text.done");
  EXPECT_EQ(events[6], ev("response.output_item.done", 6, {{"output_index", 0}, {"item", reasoning_done}}));
  Json terminal = response_head("incomplete");
  terminal["incomplete_details"] = Json{{"reason", "max_tokens"}};
  terminal["output"] = Json::array({reasoning_done});
  terminal["usage"] = ur(3, 0, 3, 4);
  EXPECT_EQ(events[7], ev("response.incomplete", 7, {{"response", terminal}}));
}

TEST(ServerReplyResponses, ErrorFinishFailsTheResponse) {
  auto stream = make_reply_stream(request_for(Api::Responses), ids_for("resp_0123456789abcdef01234567"));
  std::string out = stream->begin();
  out += stream->content("partial");
  Reply reply;
  reply.content = "partial";
  reply.finish = FinishReason::Error;
  reply.error = "unterminated tool call";
  out += stream->finish(reply);
  const std::vector<Json> events = responses_events(out);
  ASSERT_EQ(events.size(), 8u);
  const std::string msg = events[1]["item"]["id"];
  EXPECT_EQ(events[6]["item"], message_item(msg, "incomplete", "partial"));
  Json terminal = response_head("failed");
  terminal["error"] = Json{{"code", "server_error"}, {"message", "generation failed"}};
  terminal["output"] = Json::array({message_item(msg, "incomplete", "partial")});
  terminal["usage"] = ur(0, 0, 0, 0);
  EXPECT_EQ(events[7], ev("response.failed", 7, {{"response", terminal}}));
}

TEST(ServerReplyResponses, AbortedBlockTextIsOrdinaryOutputText) {
  auto stream = make_reply_stream(request_for(Api::Responses), ids_for("resp_0123456789abcdef01234567"));
  std::string out = stream->begin();
  out += stream->content("a");
  out += stream->tool_block_abort();
  out += stream->content("<tool_calls>b");
  const std::vector<Json> events = responses_events(out);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[3]["type"], "response.output_text.delta");
  EXPECT_EQ(events[4]["type"], "response.output_text.delta");
  EXPECT_EQ(events[4]["delta"], "<tool_calls>b");
  EXPECT_EQ(events[4]["output_index"], 0);
}

TEST(ServerReplyResponses, CustomAndToolSearchCalls) {
  ChatRequest request = request_for(Api::Responses);
  request.tool_wire_names["apply_patch"] = ToolWireName{"apply_patch", "", ToolWireName::Kind::Custom};
  request.tool_wire_names["tool_search"] = ToolWireName{"tool_search", "", ToolWireName::Kind::ToolSearch};
  auto stream = make_reply_stream(request, ids_for("resp_0123456789abcdef01234567"));
  std::string out = stream->begin();
  Reply reply;
  reply.tool_calls = {call("call_p", "apply_patch", R"({"input":"*** Begin Patch"})"),
                      call("call_s", "tool_search", R"({"query":"git"})")};
  reply.finish = FinishReason::ToolCalls;
  out += stream->finish(reply);
  const std::vector<Json> events = responses_events(out);
  std::vector<std::string> types;
  for (const Json& e : events) types.push_back(e["type"]);
  const std::vector<std::string> expected_types = {"response.created",
                                                   "response.output_item.added",
                                                   "response.custom_tool_call_input.delta",
                                                   "response.custom_tool_call_input.done",
                                                   "response.output_item.done",
                                                   "response.output_item.added",
                                                   "response.output_item.done",
                                                   "response.completed"};
  ASSERT_EQ(types, expected_types);
  const std::string patch_id = events[1]["item"]["id"], search_id = events[5]["item"]["id"];
  EXPECT_TRUE(std::regex_match(patch_id, kFc));
  EXPECT_TRUE(std::regex_match(search_id, kFc));
  EXPECT_NE(patch_id, search_id);
  EXPECT_EQ(events[1]["item"], (Json{{"id", patch_id},
                                     {"type", "custom_tool_call"},
                                     {"status", "in_progress"},
                                     {"name", "apply_patch"},
                                     {"call_id", "call_p"},
                                     {"input", ""}}));
  EXPECT_EQ(events[3], ev("response.custom_tool_call_input.done", 3,
                          {{"item_id", patch_id}, {"output_index", 0}, {"input", "*** Begin Patch"}}));
  EXPECT_EQ(events[6]["item"], (Json{{"id", search_id},
                                     {"type", "tool_search_call"},
                                     {"status", "completed"},
                                     {"call_id", "call_s"},
                                     {"execution", "client"},
                                     {"arguments", {{"query", "git"}}}}));
  EXPECT_EQ(events[7]["response"]["output"][1], events[6]["item"]);
}

TEST(ServerReplyResponses, Bodies) {
  ChatRequest request = request_for(Api::Responses);
  request.stream = false;
  request.reasoning_summary = true;
  const ReplyIds ids = ids_for("resp_0123456789abcdef01234567");
  Reply reply;
  reply.reasoning = "plan";
  reply.content = "ok";
  reply.thinking = reply.thinking_closed = true;
  reply.tool_calls = {call("call_aa", "read", R"({"path":"x"})")};
  reply.finish = FinishReason::ToolCalls;
  reply.usage = usage(30, 10, 5);
  const Json body = reply_body(request, ids, reply);
  const std::string rs = body["output"][0]["id"], msg = body["output"][1]["id"], fc = body["output"][2]["id"];
  EXPECT_TRUE(std::regex_match(rs, kRs));
  EXPECT_TRUE(std::regex_match(msg, kMsg));
  EXPECT_TRUE(std::regex_match(fc, kFc));
  Json expected = response_head("completed");
  expected["output"] = Json::array({Json{{"id", rs},
                                         {"type", "reasoning"},
                                         {"status", "completed"},
                                         {"summary", Json::array({Json{{"type", "summary_text"}, {"text", "plan"}}})}},
                                    message_item(msg, "completed", "ok"),
                                    Json{{"id", fc},
                                         {"type", "function_call"},
                                         {"status", "completed"},
                                         {"name", "read"},
                                         {"call_id", "call_aa"},
                                         {"arguments", R"({"path":"x"})"}}});
  expected["usage"] = ur(30, 10, 20, 5);
  EXPECT_EQ(body, expected);

  // Without the summary opt-in no reasoning item; length → incomplete.
  request.reasoning_summary = false;
  Reply cut;
  cut.reasoning = "plan";
  cut.content = "par";
  cut.finish = FinishReason::Length;
  const Json incomplete = reply_body(request, ids, cut);
  Json expected_incomplete = response_head("incomplete");
  expected_incomplete["incomplete_details"] = Json{{"reason", "max_tokens"}};
  expected_incomplete["output"] = Json::array({message_item(incomplete["output"][0]["id"], "incomplete", "par")});
  expected_incomplete["usage"] = ur(0, 0, 0, 0);
  EXPECT_EQ(incomplete, expected_incomplete);

  Reply failed;
  failed.finish = FinishReason::Error;
  Json expected_failed = response_head("failed");
  expected_failed["error"] = Json{{"code", "server_error"}, {"message", "generation failed"}};
  expected_failed["output"] = Json::array();
  expected_failed["usage"] = ur(0, 0, 0, 0);
  EXPECT_EQ(reply_body(request, ids, failed), expected_failed);
}

TEST(ServerReplyResponses, StreamErrorEventHasTheOpenAIShape) {
  auto stream = make_reply_stream(request_for(Api::Responses), ids_for("resp_0123456789abcdef01234567"));
  EXPECT_EQ(stream->error("boom"),
            "event: error\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n");
}

// --- Errors, usage, ids -----------------------------------------------------

TEST(ServerReplyErrors, PlainRequestErrorForEveryApi) {
  const RequestError error("missing messages");
  for (Api api : {Api::ChatCompletions, Api::Completions, Api::Responses, Api::Messages}) {
    EXPECT_EQ(error_body(api, error).dump(),
              R"({"error":{"message":"missing messages","type":"invalid_request_error"}})");
  }
}

TEST(ServerReplyErrors, ContextLength) {
  RequestError error("Prompt has 40000 tokens, but the configured context size is 32768 tokens");
  error.param = "messages";
  error.code = "context_length_exceeded";
  error.extra = Json{{"n_prompt_tokens", 40000}, {"n_ctx", 32768}};
  EXPECT_EQ(error_body(Api::ChatCompletions, error).dump(),
            R"({"error":{"message":"Prompt has 40000 tokens, but the configured context size is 32768 tokens",)"
            R"("type":"invalid_request_error","param":"messages","code":"context_length_exceeded",)"
            R"("n_prompt_tokens":40000,"n_ctx":32768}})");
  EXPECT_EQ(error_body(Api::Messages, error).dump(),
            R"({"type":"error","error":{"type":"invalid_request_error",)"
            R"("message":"Prompt has 40000 tokens, but the configured context size is 32768 tokens",)"
            R"("n_prompt_tokens":40000,"n_ctx":32768}})");
}

TEST(ServerReplyErrors, StatusTypeIsKept) {
  RequestError error("server is shutting down", 503, "server_error");
  EXPECT_EQ(error_body(Api::Messages, error).dump(),
            R"({"error":{"message":"server is shutting down","type":"server_error"}})");
}

TEST(ServerReplyUsage, SplitsAndClamps) {
  EXPECT_EQ(openai_usage(usage(10, 4, 3)), openai_u(10, 3, 4, 6));
  EXPECT_EQ(anthropic_usage(usage(10, 4, 3)), ua(0, 3, 4, 6));
  EXPECT_EQ(responses_usage(usage(10, 4, 3)), ur(10, 4, 6, 3));
  // A reported reuse longer than the prompt counts as the whole prompt.
  EXPECT_EQ(anthropic_usage(usage(10, 15, 0)), ua(0, 0, 10, 0));
}

TEST(ServerReplyIds, RandomHexIds) {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    const std::string id = random_hex_id("fc_");
    EXPECT_TRUE(std::regex_match(id, kFc)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_TRUE(std::regex_match(random_hex_id("call_", 16), std::regex("call_[0-9a-f]{32}")));
}

}  // namespace
}  // namespace ds4::server
