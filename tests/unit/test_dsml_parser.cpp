// DSML parsing of generated text: DeepSeek's official gold parse results
// (encoding/test_encoding_dsv4.py on tests/test_output_{1,2,3}.txt, assistant
// turns copied below without their EOS), the PROTOCOL.md §3.3 example,
// results the official parse_message_from_completion_text gives for further
// inputs (computed with it, quoted as expectations), the lenient forms and
// degradations PROTOCOL.md §3.3 describes, and for every case: the same
// message and the same concatenated stream whether the bytes arrive at once,
// one at a time or in 200 random splits. Also the §3.6 syntax tracker on a
// hand-annotated block, a render → parse round trip, and every assistant turn
// of the official-encoder goldens in tests/data/chat parsing back to its message.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "text/dsml_parser.h"
#include "text/dsml_render.h"

namespace ds4::text {
namespace {

using Json = nlohmann::ordered_json;
using Kind = DsmlEvent::Kind;

// What a client sees when it applies the event stream.
struct StreamView {
  std::string reasoning, content;
  std::vector<std::string> names, arguments;
  bool block_end = false;
  int aborts = 0, warnings = 0;
};

void apply_events(StreamView& v, const std::vector<DsmlEvent>& events) {
  for (const DsmlEvent& e : events) {
    switch (e.kind) {
      case Kind::ReasoningDelta: v.reasoning += e.text; break;
      case Kind::ContentDelta: v.content += e.text; break;
      case Kind::ToolCallBegin:
        ASSERT_EQ(e.index, static_cast<int>(v.names.size()));
        v.names.push_back(e.text);
        v.arguments.emplace_back();
        break;
      case Kind::ToolArgumentsDelta:
        ASSERT_EQ(e.index + 1, static_cast<int>(v.names.size()));
        v.arguments.back() += e.text;
        break;
      case Kind::ToolCallEnd: ASSERT_EQ(e.index + 1, static_cast<int>(v.names.size())); break;
      case Kind::ToolBlockEnd: v.block_end = true; break;
      case Kind::ToolBlockAbort:
        ++v.aborts;
        v.names.clear();
        v.arguments.clear();
        break;
      case Kind::Warning: ++v.warnings; break;
    }
    if (e.kind == Kind::ReasoningDelta || e.kind == Kind::ContentDelta || e.kind == Kind::ToolArgumentsDelta) {
      EXPECT_FALSE(e.text.empty());
    }
  }
}

struct Run {
  ParsedMessage message;
  StreamView stream;
};

Run run_split(std::string_view text, const DsmlOptions& options, const std::vector<size_t>& cuts) {
  DsmlStreamParser parser(options);
  Run r;
  size_t prev = 0;
  for (size_t cut : cuts) {
    apply_events(r.stream, parser.feed(text.substr(prev, cut - prev)));
    prev = cut;
  }
  apply_events(r.stream, parser.feed(text.substr(prev)));
  apply_events(r.stream, parser.finish());
  r.message = parser.message();
  return r;
}

void expect_same(const ParsedMessage& a, const ParsedMessage& b, const std::string& how) {
  EXPECT_EQ(a.reasoning, b.reasoning) << how;
  EXPECT_EQ(a.content, b.content) << how;
  EXPECT_EQ(a.raw_tool_block, b.raw_tool_block) << how;
  EXPECT_EQ(a.tool_block_complete, b.tool_block_complete) << how;
  EXPECT_EQ(a.thinking_closed, b.thinking_closed) << how;
  EXPECT_EQ(a.tool_block_unterminated, b.tool_block_unterminated) << how;
  EXPECT_EQ(a.warnings, b.warnings) << how;
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << how;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name) << how;
    EXPECT_EQ(a.tool_calls[i].arguments_json, b.tool_calls[i].arguments_json) << how;
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments) << how;
  }
}

// The stream must describe the message: deltas concatenate to it, and tool
// events survive only for the calls the message keeps.
void expect_stream_matches(const Run& r, const std::string& how) {
  EXPECT_EQ(r.stream.reasoning, r.message.reasoning) << how;
  EXPECT_EQ(r.stream.content, r.message.content) << how;
  EXPECT_EQ(r.stream.block_end, r.message.tool_block_complete) << how;
  EXPECT_EQ(static_cast<size_t>(r.stream.warnings), r.message.warnings.size()) << how;
  ASSERT_EQ(r.stream.names.size(), r.message.tool_calls.size()) << how;
  for (size_t i = 0; i < r.stream.names.size(); ++i) {
    EXPECT_EQ(r.stream.names[i], r.message.tool_calls[i].name) << how;
    EXPECT_EQ(r.stream.arguments[i], r.message.tool_calls[i].arguments_json) << how;
    EXPECT_EQ(Json::parse(r.message.tool_calls[i].arguments_json), r.message.tool_calls[i].arguments) << how;
  }
}

// Parses `text` whole, byte by byte and in 200 seeded random splits; all must
// agree. Returns the message.
ParsedMessage parse_everywhere(std::string_view text, DsmlOptions options = {}) {
  const Run whole = run_split(text, options, {});
  expect_stream_matches(whole, "whole");
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  const Run bytewise = run_split(text, options, every);
  expect_same(whole.message, bytewise.message, "byte by byte");
  expect_stream_matches(bytewise, "byte by byte");
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200 && text.size() > 1; ++trial) {
    std::vector<size_t> cuts;
    const size_t n = std::uniform_int_distribution<size_t>(1, std::min<size_t>(text.size() - 1, 12))(rng);
    for (size_t i = 0; i < n; ++i) cuts.push_back(std::uniform_int_distribution<size_t>(1, text.size() - 1)(rng));
    std::sort(cuts.begin(), cuts.end());
    const Run split = run_split(text, options, cuts);
    const std::string how = "random split " + std::to_string(trial);
    expect_same(whole.message, split.message, how);
    expect_stream_matches(split, how);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(parse_dsml_completion(text, options).content, whole.message.content);
  return whole.message;
}

void expect_call(const ParsedMessage& m, size_t i, std::string_view name, std::string_view arguments_json) {
  ASSERT_LT(i, m.tool_calls.size());
  EXPECT_EQ(m.tool_calls[i].name, name);
  EXPECT_EQ(m.tool_calls[i].arguments_json, arguments_json);
  EXPECT_EQ(m.tool_calls[i].arguments, Json::parse(arguments_json));
}

// ---- official gold (test_encoding_dsv4.py) ----

// test_output_1.txt, first assistant turn (after "<｜Assistant｜><think>").
constexpr std::string_view kGold1First =
    "The user wants to know the weather in Beijing. I should use the get_weather tool.</think>\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>";

TEST(DsmlParser, OfficialGold1ToolTurn) {
  const ParsedMessage m = parse_everywhere(kGold1First);
  EXPECT_EQ(m.reasoning, "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  expect_call(m, 0, "get_weather", R"({"location":"Beijing","unit":"celsius"})");
  EXPECT_TRUE(m.tool_block_complete);
  EXPECT_TRUE(m.thinking_closed);
  EXPECT_TRUE(m.warnings.empty());
  EXPECT_EQ(m.raw_tool_block, kGold1First.substr(kGold1First.find("</think>") + 8));
}

TEST(DsmlParser, OfficialGold1FinalTurn) {
  const ParsedMessage m = parse_everywhere(
      "Got the weather data. Let me format a nice response.</think>The weather in Beijing is currently sunny with "
      "a temperature of 22°C and 45% humidity.");
  EXPECT_EQ(m.reasoning, "Got the weather data. Let me format a nice response.");
  EXPECT_EQ(m.content, "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_FALSE(m.tool_block_complete);
  EXPECT_TRUE(m.warnings.empty());
}

TEST(DsmlParser, OfficialGold2) {
  const ParsedMessage m =
      parse_everywhere("The user asks about the capital of France. It is Paris.</think>The capital of France is Paris.");
  EXPECT_EQ(m.reasoning, "The user asks about the capital of France. It is Paris.");
  EXPECT_EQ(m.content, "The capital of France is Paris.");
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(DsmlParser, OfficialGold3ToolTurn) {
  // test_output_3.txt; the official parser gives this (not asserted by its test).
  const ParsedMessage m = parse_everywhere(
      "用户想知道小柴胡冲剂和布洛芬能否一起服用。</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n"
      "<｜DSML｜parameter name=\"queries\" string=\"true\">小柴胡冲剂 布洛芬 相互作用 一起吃</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(m.reasoning, "用户想知道小柴胡冲剂和布洛芬能否一起服用。");
  EXPECT_EQ(m.content, "");
  expect_call(m, 0, "search", R"({"queries":"小柴胡冲剂 布洛芬 相互作用 一起吃"})");
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every golden prompt in tests/data/chat was rendered by the official encoder
// from a JSON message list: each rendered assistant turn must parse back to
// that assistant message (reasoning where it was kept, content, tool calls).
TEST(DsmlParser, OfficialRenderedTurnsParseBack) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(DS4_TEST_DATA_DIR) / "chat";
  if (!fs::exists(dir)) GTEST_SKIP() << "no chat goldens";
  constexpr std::string_view kAssistant = "<｜Assistant｜>", kEos = "<｜end▁of▁sentence｜>";
  int turns_checked = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path txt = entry.path();
    if (txt.extension() != ".txt") continue;
    std::string stem = txt.stem().string();
    fs::path input = txt;
    if (stem.starts_with("test_output_")) {
      input = dir / ("test_input_" + stem.substr(12) + ".json");
    } else {
      input.replace_extension(".json");
    }
    if (!fs::exists(input)) continue;
    SCOPED_TRACE(stem);
    const Json in = Json::parse(read_text(input));
    const Json& messages = in.is_array() ? in : in.at("messages");
    std::vector<const Json*> assistants;
    for (const Json& m : messages) {
      if (m.value("role", "") == "assistant") assistants.push_back(&m);
    }
    const std::string prompt = read_text(txt);
    // Rendered turns: "<｜Assistant｜>" + (<think>reasoning</think> | </think>) + ... + EOS.
    std::vector<std::string> turns;
    for (size_t at = prompt.find(kAssistant); at != std::string::npos; at = prompt.find(kAssistant, at + 1)) {
      const size_t begin = at + kAssistant.size();
      const size_t eos = prompt.find(kEos, begin);
      if (eos == std::string::npos) continue;  // the generation prefix
      turns.push_back(prompt.substr(begin, eos - begin));
    }
    if (turns.size() != assistants.size()) continue;  // consecutive assistants share a marker
    for (size_t i = 0; i < turns.size(); ++i) {
      const Json& want = *assistants[i];
      if (turns[i].find("｜>") != std::string::npos) continue;  // task tokens (<｜action｜>) are not DSML
      DsmlOptions options;
      std::string_view turn = turns[i];
      if (turn.starts_with("<think>")) {
        turn.remove_prefix(7);
      } else {
        ASSERT_TRUE(turn.starts_with("</think>"));
        turn.remove_prefix(8);
        options.thinking = false;
      }
      const ParsedMessage m = parse_everywhere(turn, options);
      SCOPED_TRACE("assistant turn " + std::to_string(i));
      const Json calls = want.value("tool_calls", Json::array());
      bool raw_close_tag_in_value = false;
      for (const Json& call : calls) {
        const Json args = Json::parse(call.at("function").at("arguments").get<std::string>(), nullptr, false);
        if (!args.is_object()) continue;
        for (const auto& [key, value] : args.items()) {
          raw_close_tag_in_value |= value.is_string() && value.get<std::string>().find("</｜DSML｜parameter>") != std::string::npos;
        }
      }
      if (raw_close_tag_in_value) {
        // The official encoder writes such a string raw: no parser can read
        // it back; the block degrades to content.
        const size_t close = turn.find("</think>");
        EXPECT_EQ(m.content, options.thinking ? turn.substr(close + 8) : turn);
        EXPECT_TRUE(m.tool_calls.empty());
        EXPECT_FALSE(m.warnings.empty());
        ++turns_checked;
        continue;
      }
      EXPECT_TRUE(m.warnings.empty());
      if (options.thinking) {
        EXPECT_EQ(m.reasoning, want.value("reasoning_content", ""));
      }
      const Json content = want.value("content", Json());
      EXPECT_EQ(m.content, content.is_string() ? content.get<std::string>() : "");
      ASSERT_EQ(m.tool_calls.size(), calls.size());
      for (size_t c = 0; c < calls.size(); ++c) {
        const Json& fn = calls[c].at("function");
        EXPECT_EQ(m.tool_calls[c].name, fn.at("name").get<std::string>());
        const std::string args = fn.at("arguments").get<std::string>();
        Json expected = Json::parse(args, nullptr, false);
        if (expected.is_discarded()) expected = Json{{"arguments", args}};  // official fallback
        EXPECT_EQ(m.tool_calls[c].arguments, expected);
      }
      EXPECT_EQ(m.tool_block_complete, !calls.empty());
      ++turns_checked;
    }
  }
  EXPECT_GE(turns_checked, 10);
  std::printf("checked %d rendered assistant turns\n", turns_checked);
}

// ---- PROTOCOL.md §3.3 example ----

TEST(DsmlParser, ProtocolExample) {
  const std::string block =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
      "<｜DSML｜parameter name=\"command\" string=\"true\">ls -la && pwd</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"timeout\" string=\"false\">10</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const ParsedMessage m = parse_everywhere("checking</think>I will list them." + block);
  EXPECT_EQ(m.reasoning, "checking");
  EXPECT_EQ(m.content, "I will list them.");
  expect_call(m, 0, "bash", R"({"command":"ls -la && pwd","timeout":10})");
  EXPECT_EQ(m.raw_tool_block, block);
  EXPECT_TRUE(m.tool_block_complete);
}

// ---- more official-parser results (computed with encoding_dsv4.py) ----

TEST(DsmlParser, MultipleInvokesAndZeroParameters) {
  // Official rendering of a call without arguments: ">\n\n</｜DSML｜invoke>".
  const ParsedMessage m = parse_everywhere(
      "r</think>Two things.\n\n<｜DSML｜tool_calls>\n"
      "<｜DSML｜invoke name=\"read\">\n<｜DSML｜parameter name=\"path\" string=\"true\">a.txt</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"read\">\n<｜DSML｜parameter name=\"path\" string=\"true\">b.txt</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"lines\" string=\"false\">5</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>");
  EXPECT_EQ(m.content, "Two things.");
  ASSERT_EQ(m.tool_calls.size(), 3u);
  expect_call(m, 0, "read", R"({"path":"a.txt"})");
  expect_call(m, 1, "now", "{}");
  expect_call(m, 2, "read", R"({"path":"b.txt","lines":5})");
}

TEST(DsmlParser, JsonValuesAreMinifiedRawText) {
  // json.dumps spacing; number spellings survive (1e-07, 10.0), string
  // literals keep their spaces and escapes.
  const ParsedMessage m = parse_everywhere(
      "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"cfg\">\n"
      "<｜DSML｜parameter name=\"obj\" string=\"false\">{\"a\": [1, 2, {\"b\": null}], \"c\": \"x y\\\" }\"}"
      "</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"eps\" string=\"false\">1e-07</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"f\" string=\"false\">10.0</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"ok\" string=\"false\">true</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"list\" string=\"false\">[\n  \"多\",\n  \"é\"\n]</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  expect_call(m, 0, "cfg",
              R"({"obj":{"a":[1,2,{"b":null}],"c":"x y\" }"},"eps":1e-07,"f":10.0,"ok":true,"list":["多","é"]})");
  EXPECT_EQ(m.reasoning, "");
}

TEST(DsmlParser, StringValuesAreRaw) {
  // No entity decoding, JSON-escaped in arguments_json; the official parser
  // keeps "&amp;" and "&lt;" literally.
  const ParsedMessage m = parse_everywhere(
      "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write\">\n"
      "<｜DSML｜parameter name=\"text\" string=\"true\">a &amp; b &lt;tag> \"q\" \\ 😀\nline2\t</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"empty\" string=\"true\"></｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  expect_call(m, 0, "write", R"({"text":"a &amp; b &lt;tag> \"q\" \\ 😀\nline2\t","empty":""})");
  EXPECT_EQ(m.tool_calls[0].arguments["text"], "a &amp; b &lt;tag> \"q\" \\ 😀\nline2\t");
}

TEST(DsmlParser, UnicodeNamesAndContent) {
  const ParsedMessage m = parse_everywhere(
      "思考 🤔</think>好的，我来查。\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"查询\">\n"
      "<｜DSML｜parameter name=\"城市\" string=\"true\">北京 ☀️</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>");
  EXPECT_EQ(m.reasoning, "思考 🤔");
  EXPECT_EQ(m.content, "好的，我来查。");
  expect_call(m, 0, "查询", R"({"城市":"北京 ☀️"})");
}

TEST(DsmlParser, ContentKeepsWhitespaceBeforeTheSeparator) {
  // The official start token is "\n\n<｜DSML｜tool_calls": only those two
  // newlines belong to the block.
  const ParsedMessage m = parse_everywhere(
      "</think>foo \n\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(m.content, "foo \n");
  EXPECT_TRUE(m.raw_tool_block.starts_with("\n\n<｜DSML｜tool_calls>"));
  expect_call(m, 0, "x", "{}");
}

TEST(DsmlParser, LaterPlainTagIsText) {
  // A plain "<tool_calls>" that starts no block stays content (the official
  // parser only knows the DSML spelling).
  const ParsedMessage m = parse_everywhere(
      "</think>Use <tool_calls> here.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n"
      "<｜DSML｜parameter name=\"a\" string=\"true\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(m.content, "Use <tool_calls> here.");
  expect_call(m, 0, "x", R"({"a":"1"})");
  EXPECT_EQ(m.warnings.size(), 1u);  // the false start is reported
}

TEST(DsmlParser, EmptyBlock) {
  const ParsedMessage m = parse_everywhere("</think>hi\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(m.content, "hi");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_TRUE(m.tool_block_complete);
  EXPECT_TRUE(m.warnings.empty());
}

// ---- thinking and modes ----

TEST(DsmlParser, DsmlInsideReasoningIsNeverACall) {
  const std::string block =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"rm\">\n"
      "<｜DSML｜parameter name=\"path\" string=\"true\">/</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "</｜DSML｜tool_calls>";
  const ParsedMessage m = parse_everywhere("I could write" + block + " but won't.</think>Done.");
  EXPECT_EQ(m.reasoning, "I could write" + block + " but won't.");
  EXPECT_EQ(m.content, "Done.");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_FALSE(m.tool_block_complete);
}

TEST(DsmlParser, ThinkingWithoutCloseIsAllReasoning) {
  const ParsedMessage m = parse_everywhere(
      "<think>still thinking\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n");
  EXPECT_EQ(m.reasoning, "still thinking\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n");
  EXPECT_EQ(m.content, "");
  EXPECT_FALSE(m.thinking_closed);
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(DsmlParser, LeadingThinkTagSkippedOnlyAtStart) {
  const ParsedMessage a = parse_everywhere("<think>x</think>y");
  EXPECT_EQ(a.reasoning, "x");
  EXPECT_EQ(a.content, "y");
  const ParsedMessage b = parse_everywhere("a<think>x</think>y");
  EXPECT_EQ(b.reasoning, "a<think>x");
  const ParsedMessage c = parse_everywhere("<thin");
  EXPECT_EQ(c.reasoning, "<thin");
}

TEST(DsmlParser, NonThinkingMode) {
  DsmlOptions o;
  o.thinking = false;
  const ParsedMessage m = parse_everywhere(
      "Hi.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", o);
  EXPECT_EQ(m.reasoning, "");
  EXPECT_EQ(m.content, "Hi.");
  expect_call(m, 0, "x", "{}");
  const ParsedMessage t = parse_everywhere("<think>a</think>b", o);
  EXPECT_EQ(t.content, "<think>a</think>b");
}

TEST(DsmlParser, ToolsInactiveLeavesBlocksAsText) {
  DsmlOptions o;
  o.tools_active = false;
  const std::string text =
      "Hi.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>  ";
  const ParsedMessage m = parse_everywhere("r</think>" + text, o);
  EXPECT_EQ(m.content, text);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_FALSE(m.tool_block_complete);
  EXPECT_TRUE(m.warnings.empty());
}

// ---- ds4 leniency (PROTOCOL.md §3.3) ----

TEST(DsmlParser, LenientForms) {
  // No "\n\n": the block takes the whitespace run before the tag.
  ParsedMessage m = parse_everywhere(
      "</think>text \n<｜DSML｜tool_calls><｜DSML｜invoke name=\"a\"><｜DSML｜parameter string=\"false\"  "
      "name=\"n\">\n 3 \n</｜DSML｜parameter></｜DSML｜invoke ></｜DSML｜tool_calls>");
  EXPECT_EQ(m.content, "text");
  EXPECT_EQ(m.raw_tool_block.substr(0, 3), " \n<");
  expect_call(m, 0, "a", R"({"n":3})");
  // First bar missing.
  m = parse_everywhere(
      "</think>x\n\n<DSML｜tool_calls>\n<DSML｜invoke name=\"a\">\n<DSML｜parameter name=\"p\" "
      "string=\"true\">v</DSML｜parameter>\n</DSML｜invoke>\n</DSML｜tool_calls>");
  EXPECT_EQ(m.content, "x");
  expect_call(m, 0, "a", R"({"p":"v"})");
  // Plain tags; a missing string attribute means "true".
  m = parse_everywhere(
      "</think>x<tool_calls>\n<invoke name=\"a\">\n<parameter name=\"p\">1</parameter>\n</invoke>\n"
      "</tool_calls>\n");
  EXPECT_EQ(m.content, "x");
  expect_call(m, 0, "a", R"({"p":"1"})");
  EXPECT_TRUE(m.warnings.empty());
}

TEST(DsmlParser, TextAfterTheBlockIsIgnored) {
  const std::string head =
      "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  ParsedMessage m = parse_everywhere(head + "\n\nmore words");
  expect_call(m, 0, "a", "{}");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.warnings.size(), 1u);
  m = parse_everywhere(head + " \n");
  EXPECT_TRUE(m.warnings.empty());
}

TEST(DsmlParser, ParameterCloseEscapeOption) {
  const std::string text =
      "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"w\">\n<｜DSML｜parameter name=\"s\" "
      "string=\"true\">a&lt;/｜DSML｜parameter>b</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  expect_call(parse_everywhere(text), 0, "w", R"({"s":"a&lt;/｜DSML｜parameter>b"})");
  DsmlOptions o;
  o.decode_parameter_close_escape = true;
  expect_call(parse_everywhere(text, o), 0, "w", R"({"s":"a</｜DSML｜parameter>b"})");
}

TEST(DsmlParser, InvalidUtf8InStringValueBecomesReplacement) {
  const ParsedMessage m = parse_everywhere(
      "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"w\">\n<｜DSML｜parameter name=\"s\" "
      "string=\"true\">a\xff\xe4\xb8</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  expect_call(m, 0, "w", "{\"s\":\"a\xEF\xBF\xBD\xEF\xBF\xBD\"}");
}

// ---- degradation ----

struct Malformed {
  const char* what;
  std::string block;  // follows "\n\n"
};

TEST(DsmlParser, MalformedBlocksDegradeToContent) {
  const std::string inv = "<｜DSML｜invoke name=\"a\">\n";
  const std::string end = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const std::vector<Malformed> cases = {
      {"bad JSON", "<｜DSML｜tool_calls>\n" + inv +
                       "<｜DSML｜parameter name=\"n\" string=\"false\">{oops</｜DSML｜parameter>\n" + end},
      {"NUL after JSON", "<｜DSML｜tool_calls>\n" + inv + "<｜DSML｜parameter name=\"n\" string=\"false\">[1]" +
                             std::string(3, '\0') + "</｜DSML｜parameter>\n" + end},
      {"empty JSON", "<｜DSML｜tool_calls>\n" + inv +
                         "<｜DSML｜parameter name=\"n\" string=\"false\"></｜DSML｜parameter>\n" + end},
      {"invoke without name", "<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"a\">\n" + end},
      {"string=maybe", "<｜DSML｜tool_calls>\n" + inv +
                           "<｜DSML｜parameter name=\"n\" string=\"maybe\">1</｜DSML｜parameter>\n" + end},
      {"parameter without name",
       "<｜DSML｜tool_calls>\n" + inv + "<｜DSML｜parameter string=\"true\">1</｜DSML｜parameter>\n" + end},
      {"duplicate parameter", "<｜DSML｜tool_calls>\n" + inv +
                                  "<｜DSML｜parameter name=\"n\" string=\"true\">1</｜DSML｜parameter>\n"
                                  "<｜DSML｜parameter name=\"n\" string=\"true\">2</｜DSML｜parameter>\n" +
                                  end},
      {"text between tags", "<｜DSML｜tool_calls>\n" + inv + "oops\n" + end},
      {"text before invoke", "<｜DSML｜tool_calls>\nhello " + inv + end},
      {"wrong family", "<｜DSML｜tool_calls>\n<invoke name=\"a\">\n</invoke>\n</｜DSML｜tool_calls>"},
      {"second invoke broken", "<｜DSML｜tool_calls>\n" + inv + "</｜DSML｜invoke>\n<｜DSML｜invoke>\n" + end},
      {"bad attribute", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name='a'>\n" + end},
  };
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string after = "Answer.\n\n" + c.block;
    const ParsedMessage m = parse_everywhere("r</think>" + after);
    EXPECT_EQ(m.reasoning, "r");
    EXPECT_EQ(m.content, after);
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_FALSE(m.tool_block_complete);
    EXPECT_FALSE(m.warnings.empty());
    EXPECT_EQ(m.raw_tool_block, "");
  }
}

TEST(DsmlParser, UnterminatedBlock) {
  const std::string after =
      "x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n<｜DSML｜parameter name=\"p\" string=\"true\">ab";
  DsmlStreamParser p(DsmlOptions{});
  StreamView v;
  apply_events(v, p.feed("r</think>" + after));
  EXPECT_EQ(v.content, "x");  // the separator and the block are held / streamed as a call
  ASSERT_EQ(v.names.size(), 1u);
  EXPECT_EQ(v.arguments[0], R"({"p":"ab)");
  apply_events(v, p.finish());
  EXPECT_EQ(v.aborts, 1);
  EXPECT_TRUE(v.names.empty());
  EXPECT_EQ(v.content, after);
  const ParsedMessage m = parse_everywhere("r</think>" + after);
  EXPECT_EQ(m.content, after);
  EXPECT_TRUE(m.tool_block_unterminated);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.warnings.size(), 1u);
  // Ends right after the start tag.
  const ParsedMessage n = parse_everywhere("r</think>y\n\n<｜DSML｜tool_calls>\n");
  EXPECT_EQ(n.content, "y\n\n<｜DSML｜tool_calls>\n");
  EXPECT_TRUE(n.tool_block_unterminated);
}

TEST(DsmlParser, NoLaterBlockAfterAnAnnouncedFailure) {
  const std::string bad =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\nxx</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const std::string good =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const ParsedMessage m = parse_everywhere("</think>" + bad + good);
  EXPECT_EQ(m.content, bad + good);
  EXPECT_TRUE(m.tool_calls.empty());
}

// ---- streaming hold-back ----

TEST(DsmlParser, StreamHoldsBackSeparatorMarkersAndPartialUtf8) {
  DsmlStreamParser p(DsmlOptions{});
  StreamView v;
  apply_events(v, p.feed("thought</thi"));
  EXPECT_EQ(v.reasoning, "thought");
  apply_events(v, p.feed("nk>Hello\n\n"));
  EXPECT_EQ(v.content, "Hello");
  apply_events(v, p.feed("<｜DS"));
  EXPECT_EQ(v.content, "Hello");
  apply_events(v, p.feed("ML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\" string=\"true\">\xC3"));
  ASSERT_EQ(v.names.size(), 1u);
  EXPECT_EQ(v.names[0], "f");
  EXPECT_EQ(v.arguments[0], R"({"s":")");  // half of "é" is held
  apply_events(v, p.feed("\xA9</｜DSML｜para"));
  EXPECT_EQ(v.arguments[0], "{\"s\":\"é");
  apply_events(v, p.feed("meter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
  EXPECT_EQ(v.arguments[0], "{\"s\":\"é\"}");
  EXPECT_TRUE(p.tool_block_complete());  // before finish(): the caller stops here
  EXPECT_TRUE(v.block_end);
  apply_events(v, p.finish());
  EXPECT_EQ(v.content, "Hello");
  EXPECT_EQ(p.message().content, "Hello");

  DsmlStreamParser q(DsmlOptions{.thinking = false});
  StreamView w;
  apply_events(w, q.feed("caf\xC3"));
  EXPECT_EQ(w.content, "caf");
  apply_events(w, q.feed("\xA9 ok "));
  EXPECT_EQ(w.content, "café ok");
  apply_events(w, q.finish());
  EXPECT_EQ(w.content, "café ok ");
}

// ---- syntax tracker (PROTOCOL.md §3.6) ----

TEST(DsmlSyntaxTracker, HandAnnotatedRegions) {
  using R = DsmlSyntaxTracker::Region;
  // Each piece is fed, then the region for the next byte is checked.
  const std::vector<std::pair<std::string, R>> steps = {
      {"some text", R::Outside},
      {"\n\n<｜DSML｜tool_", R::Outside},  // the opening marker is sampled
      {"calls>", R::Structural},
      {"\n<｜DSML｜invoke name=\"", R::Structural},
      {"bash\">\n", R::Structural},
      {"<｜DSML｜parameter name=\"command\" string=\"true\">", R::StringBody},
      {"ls <", R::StringBody},  // one byte of a possible close: still payload
      {"/", R::Structural},     // "</" of the close tag: greedy
      {"x", R::StringBody},     // not the close tag after all
      {"</｜DSML｜parameter>", R::Structural},
      {"\n<｜DSML｜parameter name=\"opts\" string=\"false\">", R::JsonValue},
      {"{\"a\": ", R::JsonValue},
      {"\"v", R::JsonString},
      {"\\\"", R::JsonString},  // escaped quote stays inside the literal
      {"\"", R::JsonValue},
      {", \"n\": 1}", R::JsonValue},
      {"</｜DSML｜param", R::Structural},
      {"eter>\n</｜DSML｜invoke>\n", R::Structural},
      {"</｜DSML｜tool_calls>", R::Outside},
  };
  DsmlSyntaxTracker t;
  EXPECT_EQ(t.region(), R::Outside);
  for (const auto& [piece, region] : steps) {
    t.feed(piece);
    EXPECT_EQ(t.region(), region) << "after \"" << piece << "\"";
    EXPECT_EQ(t.greedy(), region == R::Structural || region == R::JsonValue);
  }
}

// ---- round trip with the renderer ----

TEST(DsmlParser, RenderThenParseGivesTheSameCalls) {
  const std::vector<ToolCallText> calls = {
      {"bash", R"({"command":"ls -la && pwd","timeout":10})"},
      {"now", "{}"},
      {"edit", R"({"path":"a/b.cpp","patch":"x < y && z > \"w\"\n","opts":{"dry":false,"n":[1,2.5,-3]},"u":"多"})"},
  };
  const std::string block = render_tool_calls_dsml(calls);
  const ParsedMessage m = parse_everywhere("plan</think>Doing it." + block);
  EXPECT_EQ(m.content, "Doing it.");
  EXPECT_EQ(m.raw_tool_block, block);
  ASSERT_EQ(m.tool_calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(m.tool_calls[i].name, calls[i].name);
    EXPECT_EQ(m.tool_calls[i].arguments, Json::parse(calls[i].arguments_json));
    EXPECT_EQ(m.tool_calls[i].arguments_json, calls[i].arguments_json);
  }
}

}  // namespace
}  // namespace ds4::text
