// Tool calls through ds4-server on a tiny random-weight model. The model's
// own logits choose the call (tool_choice "required" / a named tool runs the
// decode under the DSML grammar of the request's tools), so these calls come
// out of the engine like any other reply: the tests check the calls against
// the tools' JSON schemas, streamed against non-streamed, the API shapes
// (call_ / toolu_ ids, finish reasons), and a full round trip in which the
// client sends the call and its result back and the server continues on the
// live KV (exact replay of the sampled block).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/server_harness.h"

namespace ds4::server {
namespace {

const Json& weather_tools() {
  static const Json tools = Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"Weather for a city",
      "parameters":{"type":"object","properties":{
        "city":{"type":"string","enum":["Paris","Rome","Tokyo"]},
        "days":{"type":"integer"}},"required":["city","days"]}}},
    {"type":"function","function":{"name":"get_time","description":"Local time",
      "parameters":{"type":"object","properties":{"zone":{"type":"string","enum":["UTC","CET"]}},
      "required":["zone"]}}}])");
  return tools;
}

// A token holds at least one byte, so a forced call never takes more tokens
// than its longest accepted text has bytes (ToolCallConstraint's grammar for
// weather_tools(): the longer tool, its longest enum value, an 18-digit
// negative integer), plus the EOS after it. A lower max_tokens makes the test
// depend on which tokens a random model's greedy path happens to pick, which
// differs between ISA levels.
int64_t longest_forced_call_tokens() {
  const std::string longest = std::string("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n") +
                              "<｜DSML｜parameter name=\"city\" string=\"true\">Tokyo</｜DSML｜parameter>\n" +
                              "<｜DSML｜parameter name=\"days\" string=\"false\">-" + std::string(18, '9') +
                              "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  return static_cast<int64_t>(longest.size()) + 1;
}

Json chat(const Json& tool_choice) {
  return Json{{"model", "deepseek-v4-flash"},
              {"messages", Json::array({Json{{"role", "user"}, {"content", "What is the weather in Rome?"}}})},
              {"tools", weather_tools()},
              {"tool_choice", tool_choice},
              {"max_tokens", longest_forced_call_tokens()},
              {"temperature", 0},
              {"think", false}};
}

// A call valid against weather_tools()' schemas.
void expect_valid_call(const std::string& name, const Json& args) {
  if (name == "get_weather") {
    ASSERT_TRUE(args.contains("city")) << args;
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome" || args["city"] == "Tokyo") << args;
    ASSERT_TRUE(args.contains("days")) << args;
    EXPECT_TRUE(args["days"].is_number_integer()) << args;
    EXPECT_EQ(args.size(), 2u) << args;
  } else {
    ASSERT_EQ(name, "get_time");
    ASSERT_TRUE(args.contains("zone")) << args;
    EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET") << args;
  }
}

// The streamed call of a chat completion: (id, name, concatenated arguments,
// finish reason).
struct StreamedCall {
  std::string id, name, arguments, finish;
};

StreamedCall streamed_call(const std::string& body) {
  StreamedCall c;
  for (const std::string& e : sse_data(body)) {
    if (e == "[DONE]") break;
    const Json j = Json::parse(e);
    if (j["choices"].empty()) continue;  // the usage chunk
    const Json& choice = j["choices"][0];
    if (!choice["finish_reason"].is_null()) c.finish = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    const Json& tc = choice["delta"]["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    if (tc.contains("id")) c.id = tc["id"];
    if (tc["function"].contains("name")) c.name = tc["function"]["name"];
    c.arguments += tc["function"]["arguments"].get<std::string>();
  }
  return c;
}

TEST(ServerTools, RequiredCallStreamsAndItsResultContinuesOnTheLiveKv) {
  Harness h;
  // The header comes as soon as the invoke tag is complete, then argument
  // fragments that concatenate to a schema-valid JSON object.
  Json first = chat("required");
  first["stream"] = true;
  first["stream_options"] = Json{{"include_usage", true}};
  auto sr = h.post("/v1/chat/completions", first);
  ASSERT_TRUE(sr);
  const StreamedCall call = streamed_call(sr->body);
  EXPECT_EQ(call.finish, "tool_calls") << sr->body;
  EXPECT_TRUE(std::regex_match(call.id, std::regex("call_[0-9a-f]{32}"))) << call.id;
  expect_valid_call(call.name, Json::parse(call.arguments));
  Json usage;
  for (const std::string& e : sse_data(sr->body)) {
    if (e != "[DONE]" && Json::parse(e).contains("usage")) usage = Json::parse(e)["usage"];
  }
  ASSERT_FALSE(usage.is_null());

  // The client runs the tool and sends everything back.
  Json second = first;
  second.erase("tool_choice");
  second.erase("stream");
  second.erase("stream_options");
  second["max_tokens"] = 4;
  second["messages"].push_back(Json{
      {"role", "assistant"},
      {"content", ""},
      {"tool_calls", Json::array({Json{{"id", call.id},
                                       {"type", "function"},
                                       {"function", Json{{"name", call.name}, {"arguments", call.arguments}}}}})}});
  second["messages"].push_back(Json{{"role", "tool"}, {"tool_call_id", call.id}, {"content", "sunny, 21 C"}});
  const Json r2 = h.post_json("/v1/chat/completions", second);
  const int64_t p1 = usage["prompt_tokens"], c1 = usage["completion_tokens"];
  const int64_t cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"];
  // The whole first exchange is reused: its prompt and every generated token
  // but the closing tag, which ended generation unevaluated.
  EXPECT_EQ(cached, p1 + c1 - 1) << r2.dump();
  EXPECT_GT(r2["usage"]["prompt_tokens"].get<int64_t>(), cached);
}

TEST(ServerTools, AnthropicForcedToolStreamsAToolUseBlock) {
  Harness h;
  Json tools = Json::array();
  for (const Json& t : weather_tools()) {
    tools.push_back(Json{{"name", t["function"]["name"]},
                         {"description", t["function"]["description"]},
                         {"input_schema", t["function"]["parameters"]}});
  }
  const Json req{{"model", "deepseek-v4-flash"},
                 {"max_tokens", longest_forced_call_tokens()},
                 {"temperature", 0},
                 {"thinking", Json{{"type", "disabled"}}},
                 {"tools", tools},
                 {"tool_choice", Json{{"type", "tool"}, {"name", "get_weather"}}},
                 {"messages", Json::array({Json{{"role", "user"}, {"content", "Weather?"}}})}};
  Json sreq = req;
  sreq["stream"] = true;
  auto sr = h.post("/v1/messages", sreq);
  ASSERT_TRUE(sr);
  std::string partial, stop_reason, block_name, block_id;
  for (const std::string& e : sse_data(sr->body)) {
    const Json j = Json::parse(e);
    if (j["type"] == "content_block_start" && j["content_block"]["type"] == "tool_use") {
      block_name = j["content_block"]["name"];
      block_id = j["content_block"]["id"];
    }
    if (j["type"] == "content_block_delta" && j["delta"]["type"] == "input_json_delta") {
      partial += j["delta"]["partial_json"].get<std::string>();
    }
    if (j["type"] == "message_delta") stop_reason = j["delta"]["stop_reason"];
  }
  EXPECT_EQ(block_name, "get_weather");
  expect_valid_call("get_weather", Json::parse(partial));
  EXPECT_EQ(stop_reason, "tool_use") << sr->body;
  EXPECT_TRUE(std::regex_match(block_id, std::regex("toolu_[0-9a-f]{32}"))) << block_id;
}

TEST(ServerTools, ForcedToolErrorsAreClientErrors) {
  Harness h;
  Json req = chat(Json{{"type", "function"}, {"function", Json{{"name", "launch_rockets"}}}});
  const Json e = h.post_json("/v1/chat/completions", req, 400);
  EXPECT_EQ(e["error"]["message"], "tool_choice names the tool 'launch_rockets', which the request does not define");
}

}  // namespace
}  // namespace ds4::server
