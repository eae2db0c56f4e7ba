// Forced tool calls as constrained decoding (runtime::ToolCallConstraint):
//  - the byte automaton accepts exactly the DSML block the header describes
//    (hand-written texts, accepted and rejected), and every accepted block
//    parses (text::parse_dsml_completion) to the intended call;
//  - the token mask equals the per-token check at every byte of a block, and
//    along a single literal it is exactly "the token's bytes are a prefix of
//    what must come";
//  - runtime::generate with the constraint on the tiny random-weight model:
//    every step is the argmax of the forward pass's logits among the allowed
//    tokens, the result is one schema-valid call and stops with ToolCalls;
//    the model's logits pick the enum value; a forced name is honoured;
//    thinking mode passes reasoning through until </think>;
//  - the time per mask on a vocabulary of DeepSeek V4's size (printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/forward.h"
#include "core/gguf.h"
#include "model/synthetic_tokenizer.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "runtime/tool_call_constraint.h"
#include "support/error_of.h"
#include "support/synthetic_model.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

namespace ds4::runtime {
namespace {

using Json = nlohmann::ordered_json;
using test::error_of;

const Json& tools() {
  static const Json t = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
      "type": "object",
      "properties": {
        "location": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "detail": {"type": "boolean"}
      },
      "required": ["location", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
      "type": "object",
      "properties": {
        "query": {"type": "string", "minLength": 0},
        "limit": {"type": "number"},
        "filters": {"type": "object"},
        "tags": {"type": "array"},
        "extra": {},
        "level": {"enum": [1, "two", null]},
        "none": {"type": "null"}
      },
      "required": ["query", "limit", "filters", "tags", "extra", "level", "none"]}}}
  ])");
  return t;
}

const std::string kOpen = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"";
const std::string kClose = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

std::string param(const std::string& key, bool is_string, const std::string& value) {
  return "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">" + value +
         "</｜DSML｜parameter>\n";
}

std::string block(const std::string& name, const std::string& params) {
  return kOpen + name + "\">\n" + params + kClose;
}

const text::Tokenizer& small_tokenizer() {
  static const text::Tokenizer t = text::Tokenizer::from_data(model::make_synthetic_tokenizer(1024));
  return t;
}

std::shared_ptr<const VocabTrie> small_vocab() {
  static const auto v = std::make_shared<const VocabTrie>(small_tokenizer());
  return v;
}

ToolCallConstraint make(const std::string& forced = "", bool thinking = false) {
  return ToolCallConstraint(tools(), forced, small_vocab(), thinking);
}

// Whether the whole text is accepted, and complete at its end.
bool complete_block(const std::string& text, const std::string& forced = "") {
  ToolCallConstraint c = make(forced);
  if (!c.accepts_bytes(text)) return false;
  c.feed_bytes(text);
  return c.complete();
}

text::ParsedMessage parse(const std::string& text, bool thinking = false) {
  return text::parse_dsml_completion(text, text::DsmlOptions{thinking, true, false});
}

TEST(ToolCallConstraint, AcceptsTheBlockAndItParsesToTheCall) {
  const std::string text = block("get_weather", param("location", true, "Paris, FR") + param("days", false, "3"));
  EXPECT_EQ(text,
            "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
            "<｜DSML｜parameter name=\"location\" string=\"true\">Paris, FR</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  ToolCallConstraint c = make();
  EXPECT_FALSE(c.complete());
  c.feed_bytes(text);
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.text(), text);
  EXPECT_FALSE(c.accepts_bytes("\n"));  // nothing after the closing tag

  const text::ParsedMessage m = parse(text);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_TRUE(m.tool_block_complete);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments_json, R"({"location":"Paris, FR","days":3})");
}

TEST(ToolCallConstraint, OptionalParametersMayBeSkippedButOrderAndRequiredHold) {
  const std::string loc = param("location", true, "Oslo");
  const std::string days = param("days", false, "-12");
  const std::string unit = param("unit", true, "fahrenheit");
  const std::string detail = param("detail", false, "false");
  for (const std::string& params : {loc + days, loc + unit + days, loc + days + detail, loc + unit + days + detail}) {
    EXPECT_TRUE(complete_block(block("get_weather", params))) << params;
    const text::ParsedMessage m = parse(block("get_weather", params));
    ASSERT_EQ(m.tool_calls.size(), 1u) << params;
    EXPECT_EQ(m.tool_calls[0].arguments["location"], "Oslo");
    EXPECT_EQ(m.tool_calls[0].arguments["days"], -12);
  }
  EXPECT_EQ(parse(block("get_weather", loc + unit + days)).tool_calls[0].arguments["unit"], "fahrenheit");
  EXPECT_FALSE(complete_block(block("get_weather", days + loc)));         // schema order
  EXPECT_FALSE(complete_block(block("get_weather", loc)));                // days is required
  EXPECT_FALSE(complete_block(block("get_weather", unit + loc + days)));  // location is required first
  EXPECT_FALSE(complete_block(block("get_weather", loc + days + unit)));  // unit comes before days
  EXPECT_FALSE(complete_block(block("get_weather", loc + loc + days)));   // no repeats
  EXPECT_TRUE(complete_block(block("get_time", "")));
  EXPECT_FALSE(complete_block(block("get_time", loc)));                   // no parameters there
}

TEST(ToolCallConstraint, ValuesFollowTheirSchemas) {
  const auto weather = [](const std::string& location, const std::string& days, const std::string& extra = "") {
    return complete_block(block("get_weather", param("location", true, location) + extra + param("days", false, days)));
  };
  // Strings: 1..maxLength bytes of UTF-8 without '<'.
  EXPECT_TRUE(weather("x", "0"));
  EXPECT_TRUE(weather("Sã ☂ Oslo", "0"));  // 12 bytes: the cap
  EXPECT_FALSE(weather("Sã ☂ Oslo!", "0"));
  {
    ToolCallConstraint c = make();
    c.feed_bytes(kOpen + "get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">abcdefghij");
    EXPECT_TRUE(c.accepts_bytes("é"));      // bytes 11-12
    EXPECT_FALSE(c.accepts_bytes("\xE2"));  // a 3-byte character would not fit: refused at its lead byte
  }

  EXPECT_FALSE(weather("", "0"));              // default minLength 1
  EXPECT_FALSE(weather("a<b", "0"));
  EXPECT_FALSE(weather("\xC0\xAF", "0"));      // overlong
  EXPECT_FALSE(weather("\xED\xA0\x80", "0"));  // surrogate
  EXPECT_FALSE(weather("ab\xE2\x98", "0"));    // close inside a character
  // Integers.
  EXPECT_TRUE(weather("x", "-0"));
  EXPECT_TRUE(weather("x", "123456789012345678"));
  EXPECT_FALSE(weather("x", "1234567890123456789"));  // 19 digits
  EXPECT_FALSE(weather("x", "01"));
  EXPECT_FALSE(weather("x", "1.5"));
  EXPECT_FALSE(weather("x", "+1"));
  EXPECT_FALSE(weather("x", ""));
  EXPECT_FALSE(weather("x", "\"3\""));
  // Enums and booleans.
  EXPECT_TRUE(weather("x", "1", param("unit", true, "celsius")));
  EXPECT_FALSE(weather("x", "1", param("unit", true, "kelvin")));
  EXPECT_FALSE(weather("x", "1", param("unit", false, "\"celsius\"")));
  EXPECT_FALSE(weather("x", "1", param("unit", true, "celsius ")));

  const auto search = [](const std::string& limit, const std::string& level, const std::string& query = "q") {
    return block("search", param("query", true, query) + param("limit", false, limit) +
                               param("filters", false, "{}") + param("tags", false, "[]") +
                               param("extra", false, "null") + level + param("none", false, "null"));
  };
  const std::string one = param("level", false, "1");
  EXPECT_TRUE(complete_block(search("3.25", one)));
  EXPECT_TRUE(complete_block(search("-0.12345678901234567", one)));
  EXPECT_TRUE(complete_block(search("7", param("level", true, "two"))));
  EXPECT_TRUE(complete_block(search("7", param("level", false, "null"))));
  EXPECT_TRUE(complete_block(search("7", one, "")));  // minLength 0
  EXPECT_FALSE(complete_block(search("3.", one)));
  EXPECT_FALSE(complete_block(search(".5", one)));
  EXPECT_FALSE(complete_block(search("1.123456789012345678", one)));  // 18 fraction digits
  EXPECT_FALSE(complete_block(search("1e5", one)));
  EXPECT_FALSE(complete_block(search("7", param("level", true, "1"))));
  EXPECT_FALSE(complete_block(search("7", param("level", false, "2"))));

  const text::ParsedMessage m = parse(search("3.25", param("level", true, "two"), ""));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments_json,
            R"({"query":"","limit":3.25,"filters":{},"tags":[],"extra":null,"level":"two","none":null})");
}

TEST(ToolCallConstraint, ToolNamesAndForcedName) {
  EXPECT_TRUE(complete_block(block("get_time", "")));
  EXPECT_FALSE(complete_block(block("get_tim", "")));
  EXPECT_FALSE(complete_block(block("get_times", "")));
  EXPECT_FALSE(complete_block(block("other", "")));
  EXPECT_TRUE(complete_block(block("get_time", ""), "get_time"));
  EXPECT_FALSE(complete_block(block("get_time", ""), "get_weather"));
  // The opening must be exact.
  EXPECT_FALSE(make().accepts_bytes("\n<｜DSML｜tool_calls>"));
  EXPECT_FALSE(make().accepts_bytes(" "));

  EXPECT_NE(error_of([] { make("nope"); }).find("no tool named \"nope\""), std::string::npos);
  EXPECT_NE(error_of([] { ToolCallConstraint(Json::array(), "", small_vocab(), false); }).find("needs tools"),
            std::string::npos);
  const Json bad = Json::parse(R"([{"type":"function","function":{"name":"a\"b"}}])");
  EXPECT_NE(error_of([&] { ToolCallConstraint(bad, "", small_vocab(), false); }).find("DSML cannot carry"),
            std::string::npos);
  const Json bad_length = Json::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"properties":{"s":{"type":"string",
          "minLength":5,"maxLength":2}}}}}])");
  EXPECT_NE(error_of([&] { ToolCallConstraint(bad_length, "", small_vocab(), false); }).find("minLength"),
            std::string::npos);
}

TEST(ToolCallConstraint, ThinkingPassesReasoningUntilEndThink) {
  ToolCallConstraint c = make("", true);
  const text::Tokenizer& tok = small_tokenizer();
  EXPECT_FALSE(c.allows(tok.eos()));
  c.feed_bytes("Let me <b>think</b> about </thin");
  EXPECT_TRUE(c.accepts_bytes("g, anything at all <｜User｜>"));
  EXPECT_FALSE(c.allows(tok.eos()));
  c.feed_bytes("g? </think");
  c.feed_bytes(">");  // "</think>" complete: the block follows at once
  EXPECT_FALSE(c.accepts_bytes("Answer"));
  const std::string b = block("get_time", "");
  ASSERT_TRUE(c.accepts_bytes(b));
  c.feed_bytes(b);
  EXPECT_TRUE(c.complete());
  const text::ParsedMessage m = parse(c.text(), true);
  EXPECT_EQ(m.reasoning, "Let me <b>think</b> about </thing? ");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_time");
}

// Every token whose bytes the per-token check accepts, by brute force.
std::vector<int32_t> brute_force(const ToolCallConstraint& c, uint32_t vocab) {
  std::vector<int32_t> out;
  for (uint32_t id = 0; id < vocab; ++id) {
    if (c.allows(static_cast<int32_t>(id))) out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

TEST(ToolCallConstraint, MaskAlongALiteralIsExactlyThePrefixTokens) {
  const text::Tokenizer& tok = small_tokenizer();
  const std::string text = block("get_time", "");
  ToolCallConstraint c = make("get_time");
  for (size_t at = 0; at < text.size(); ++at) {
    const std::string rest = text.substr(at);
    std::vector<int32_t> expected;
    for (uint32_t id = 0; id < tok.vocab_size(); ++id) {
      const std::string bytes = tok.token_bytes(static_cast<int32_t>(id));
      if (!bytes.empty() && rest.compare(0, bytes.size(), bytes) == 0) expected.push_back(static_cast<int32_t>(id));
    }
    ASSERT_EQ(c.allowed_tokens(), expected) << "at byte " << at;
    c.feed_bytes(text.substr(at, 1));
  }
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.allowed_tokens(), std::vector<int32_t>{tok.eos()});
  // The special token ｜DSML｜ is among the allowed ones where its text comes next.
  ToolCallConstraint d = make("get_time");
  d.feed_bytes("\n\n<");
  const std::vector<int32_t> after_lt = d.allowed_tokens();
  EXPECT_NE(std::find(after_lt.begin(), after_lt.end(), tok.dsml()), after_lt.end());
}

TEST(ToolCallConstraint, MaskEqualsThePerTokenCheckAtEveryByte) {
  const text::Tokenizer& tok = small_tokenizer();
  const std::string text =
      block("get_weather", param("location", true, "Zürich") + param("unit", true, "celsius") +
                               param("days", false, "-42"));
  ToolCallConstraint c = make();
  std::vector<float> logits(tok.vocab_size());
  for (size_t at = 0; at <= text.size(); ++at) {
    const std::vector<int32_t> allowed = c.allowed_tokens();
    ASSERT_EQ(allowed, brute_force(c, tok.vocab_size())) << "at byte " << at;
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7);
    c.mask(logits);
    for (size_t i = 0; i < logits.size(); ++i) {
      const bool in = std::binary_search(allowed.begin(), allowed.end(), static_cast<int32_t>(i));
      ASSERT_EQ(logits[i], in ? static_cast<float>(i % 7) : -std::numeric_limits<float>::infinity()) << i;
    }
    if (at < text.size()) c.feed_bytes(text.substr(at, 1));
  }
  EXPECT_TRUE(c.complete());
  // Inside the string value: no EOS, and '<' only where the closing tag begins.
  ToolCallConstraint s = make();
  s.feed_bytes(kOpen + "get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">");
  const std::vector<int32_t> in_string = s.allowed_tokens();
  EXPECT_GT(in_string.size(), tok.vocab_size() / 2);
  EXPECT_EQ(std::count(in_string.begin(), in_string.end(), tok.eos()), 0);
  const std::string close = "</｜DSML｜parameter>\n";
  for (int32_t id : in_string) {
    const std::string bytes = tok.token_bytes(id);
    const size_t lt = bytes.find('<');
    if (lt != std::string::npos) {
      EXPECT_EQ(close.compare(0, bytes.size() - lt, bytes, lt), 0) << bytes;
    }
  }
  EXPECT_THROW(s.accept(tok.eos()), Error);
}

// --- decoding with the tiny model --------------------------------------------

class ConstrainedGenerateTest : public testing::Test {
 protected:
  ConstrainedGenerateTest()
      : m_(model::preset_tiny(), model::QuantMix::F32, 21),
        file_(gguf::File::open(m_.path())),
        tok_(text::Tokenizer::from_gguf(file_)),
        vocab_(std::make_shared<const VocabTrie>(tok_)),
        forward_(m_.model(), cpu::Numerics::Default, nullptr) {}

  cpu::Session prompt_session() {
    cpu::Session s = forward_.make_session(512);
    std::vector<int32_t> prompt = {tok_.bos()};
    const auto body = tok_.encode("Call the tool.", false);
    prompt.insert(prompt.end(), body.begin(), body.end());
    forward_.eval(s, prompt);
    return s;
  }

  // Replays r: at every step the token is the argmax of the masked logits.
  void expect_argmax_of_allowed(const cpu::Session& start, const ToolCallConstraint& initial,
                                const GenerateResult& r) {
    cpu::Session replay = start;
    ToolCallConstraint c = initial;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      std::vector<float> masked(replay.logits().begin(), replay.logits().end());
      c.mask(masked);
      ASSERT_EQ(r.tokens[i], argmax(masked)) << "step " << i;
      ASSERT_TRUE(c.allows(r.tokens[i]));
      c.accept(r.tokens[i]);
      if (i + 1 < r.tokens.size()) {
        const int32_t one[1] = {r.tokens[i]};
        forward_.eval(replay, one);
      }
    }
    EXPECT_TRUE(c.complete());
    EXPECT_EQ(c.text(), r.text);
  }

  test::SyntheticModel m_;
  gguf::File file_;
  text::Tokenizer tok_;
  std::shared_ptr<const VocabTrie> vocab_;
  cpu::Forward forward_;
};

const Json& decode_tools() {
  static const Json t = Json::parse(R"([
    {"type": "function", "function": {"name": "lookup", "parameters": {
      "type": "object",
      "properties": {
        "mode": {"type": "string", "enum": ["alpha", "beta"]},
        "word": {"type": "string", "maxLength": 6},
        "count": {"type": "integer"},
        "verbose": {"type": "boolean"}
      },
      "required": ["mode", "word", "count"]}}},
    {"type": "function", "function": {"name": "pick", "parameters": {
      "type": "object", "properties": {"mode": {"type": "string", "enum": ["alpha", "beta"]}}, "required": ["mode"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
  ])");
  return t;
}

// The most tokens a forced lookup call can take: a token holds at least one
// byte, so no more than the bytes of its longest accepted text (the longer
// enum value, word at maxLength, a 19-character integer, the optional
// boolean at its longer value), plus the EOS after it. With less (this test
// had 400, the longest call is 422 bytes), whether the call closes in time
// depends on the digits and options a random model's greedy path picks,
// which differ between ISA levels.
int64_t longest_lookup_call_tokens() {
  const std::string longest =
      block("lookup", param("mode", true, "alpha") + param("word", true, std::string(6, 'w')) +
                          param("count", false, "-" + std::string(18, '9')) + param("verbose", false, "false"));
  return static_cast<int64_t>(longest.size()) + 1;
}

TEST_F(ConstrainedGenerateTest, GreedyDecodeIsTheArgmaxAmongAllowedAndParses) {
  const ToolCallConstraint constraint(decode_tools(), "lookup", vocab_, false);
  GenerateLimits limits;
  limits.max_tokens = static_cast<int>(longest_lookup_call_tokens());
  limits.thinking = false;
  limits.constraint = &constraint;  // no stop_at_tool_block: the constraint alone ends the turn
  cpu::Session s = prompt_session();
  const cpu::Session start = s;
  Sampler sampler(SamplingParams::greedy(), 1);
  const GenerateResult r = generate(forward_, s, tok_, sampler, limits, {});
  EXPECT_EQ(r.reason, StopReason::ToolCalls);
  EXPECT_EQ(r.unevaluated, std::vector<int32_t>{r.tokens.back()});
  EXPECT_FALSE(constraint.complete());  // generate() advanced its own copy
  expect_argmax_of_allowed(start, constraint, r);

  const text::ParsedMessage m = parse(r.text);
  ASSERT_EQ(m.tool_calls.size(), 1u) << r.text;
  const text::ParsedToolCall& call = m.tool_calls[0];
  EXPECT_EQ(call.name, "lookup");  // forced
  EXPECT_TRUE(call.arguments["mode"] == "alpha" || call.arguments["mode"] == "beta") << call.arguments_json;
  ASSERT_TRUE(call.arguments["word"].is_string());
  const std::string word = call.arguments["word"].get<std::string>();
  EXPECT_GE(word.size(), 1u);
  EXPECT_LE(word.size(), 6u);
  EXPECT_TRUE(call.arguments["count"].is_number_integer()) << call.arguments_json;
  if (call.arguments.contains("verbose")) {
    EXPECT_TRUE(call.arguments["verbose"].is_boolean());
  }
  EXPECT_EQ(r.text.rfind(kOpen + "lookup\">\n", 0), 0u);
  std::printf("[ decode ] %zu tokens: %s\n", r.tokens.size(), call.arguments_json.c_str());
}

TEST_F(ConstrainedGenerateTest, TheLogitsChooseTheEnumValueAndTheTool) {
  // Bias every token that could start one enum value's text: the model's
  // (biased) logits, not the constraint, pick the value.
  for (const std::string want : {"alpha", "beta"}) {
    const ToolCallConstraint constraint(decode_tools(), "pick", vocab_, false);
    GenerateLimits limits;
    limits.max_tokens = 200;
    limits.thinking = false;
    limits.stop_at_tool_block = true;
    limits.constraint = &constraint;
    for (uint32_t id = 0; id < tok_.vocab_size(); ++id) {
      const std::string bytes = tok_.token_bytes(static_cast<int32_t>(id));
      if (!bytes.empty() && bytes.size() <= want.size() && want.compare(0, bytes.size(), bytes) == 0) {
        limits.logit_bias[static_cast<int32_t>(id)] = 30.0f;
      }
    }
    cpu::Session s = prompt_session();
    Sampler sampler(SamplingParams::greedy(), 1);
    const GenerateResult r = generate(forward_, s, tok_, sampler, limits, {});
    ASSERT_EQ(r.reason, StopReason::ToolCalls);
    const text::ParsedMessage m = parse(r.text);
    ASSERT_EQ(m.tool_calls.size(), 1u) << r.text;
    EXPECT_EQ(r.text, block("pick", param("mode", true, want)));
  }
  // Any tool: biasing every token whose bytes occur in "ping" makes the model
  // call ping. (Biasing only the tokens of encode("p"), ..., encode("ping")
  // left the step after "pi" to the raw logits when no such encoding held
  // "n" or "ng": ping or pick, as the model's path happened to go.)
  const ToolCallConstraint any(decode_tools(), "", vocab_, false);
  GenerateLimits limits;
  limits.max_tokens = 200;
  limits.thinking = false;
  limits.constraint = &any;
  const std::string ping = "ping";
  for (uint32_t id = 0; id < tok_.vocab_size(); ++id) {
    const std::string bytes = tok_.token_bytes(static_cast<int32_t>(id));
    if (!bytes.empty() && ping.find(bytes) != std::string::npos) limits.logit_bias[static_cast<int32_t>(id)] = 30.0f;
  }
  cpu::Session s = prompt_session();
  Sampler sampler(SamplingParams::greedy(), 1);
  const GenerateResult r = generate(forward_, s, tok_, sampler, limits, {});
  ASSERT_EQ(r.reason, StopReason::ToolCalls);
  EXPECT_EQ(r.text, block("ping", ""));
}

TEST_F(ConstrainedGenerateTest, ThinkingReasonsFreelyThenCalls) {
  const ToolCallConstraint constraint(decode_tools(), "ping", vocab_, true);
  cpu::Session s = prompt_session();
  const cpu::Session start = s;
  // Reasoning: the same tokens as without the constraint (EOS aside). Kept
  // in reasoning by a bias: a greedy </think> (wherever a random model's path
  // happens to put one) would start the forced block in one run only.
  GenerateLimits limits;
  limits.max_tokens = 6;
  limits.ignore_eos = true;
  limits.constraint = &constraint;
  limits.logit_bias[tok_.end_think()] = -1000.0f;
  Sampler sampler(SamplingParams::greedy(), 1);
  const GenerateResult with = generate(forward_, s, tok_, sampler, limits, {});
  GenerateLimits free = limits;
  free.constraint = nullptr;
  cpu::Session s2 = start;
  const GenerateResult without = generate(forward_, s2, tok_, sampler, free, {});
  EXPECT_EQ(with.tokens, without.tokens);
  EXPECT_EQ(with.reason, StopReason::MaxTokens);

  // </think> (pushed by a bias) ends reasoning; the block follows at once.
  GenerateLimits think = limits;
  think.max_tokens = 100;
  think.ignore_eos = false;
  think.stop_at_tool_block = true;
  think.logit_bias[tok_.end_think()] = 1000.0f;
  cpu::Session s3 = start;
  const GenerateResult r = generate(forward_, s3, tok_, sampler, think, {});
  EXPECT_EQ(r.reason, StopReason::ToolCalls);
  EXPECT_EQ(r.text, "</think>" + block("ping", ""));
  const text::ParsedMessage m = parse(r.text, true);
  EXPECT_TRUE(m.thinking_closed);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "ping");
}

// --- speed on a vocabulary of DeepSeek V4's size ------------------------------

// The synthetic V4-size table with its padding replaced by random BPE-like
// tokens (words, spaces, punctuation, CJK, runs), so the trie has a real shape.
text::Tokenizer v4_size_tokenizer() {
  model::TokenizerData d = model::make_synthetic_tokenizer(model::kV4VocabSize);
  std::mt19937 rng(5);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const std::vector<std::string> cjk = {"的", "一", "是", "不", "了", "人", "我", "在", "有", "他", "这", "中"};
  std::set<std::string> seen(d.tokens.begin(), d.tokens.end());
  for (size_t id = 0; id < d.tokens.size(); ++id) {
    if (d.token_types[id] != static_cast<int32_t>(model::TokenType::Unused)) continue;
    std::string bytes;
    do {
      bytes.clear();
      const unsigned kind = rng() % 10;
      if (kind < 6) {  // " word" / "word"
        if (rng() % 2) bytes += ' ';
        if (rng() % 5 == 0) bytes += static_cast<char>('A' + rng() % 26);
        for (unsigned n = 2 + rng() % 9; n > 0; --n) bytes += letters[std::min<size_t>(rng() % 26, rng() % 26)];
      } else if (kind == 6) {
        for (unsigned n = 1 + rng() % 4; n > 0; --n) bytes += cjk[rng() % cjk.size()];
      } else if (kind == 7) {  // characters split by the token's ends
        if (rng() % 2) bytes += cjk[rng() % cjk.size()].substr(1 + rng() % 2);
        bytes += letters[rng() % 26];
        if (rng() % 2) bytes += cjk[rng() % cjk.size()];
        bytes += cjk[rng() % cjk.size()].substr(0, 1 + rng() % 2);
      } else if (kind == 8) {
        for (unsigned n = 1 + rng() % 3; n > 0; --n) bytes += "(){}[].,;:_-=+*/<>\"'\n"[rng() % 21];
      } else {
        bytes.append(1 + rng() % 16, " -=#\n"[rng() % 5]);
      }
      std::string symbols;
      for (const char ch : bytes) symbols += model::gpt2_byte_symbol(static_cast<uint8_t>(ch));
      bytes = symbols;
    } while (!seen.insert(bytes).second);
    d.tokens[id] = bytes;
    d.token_types[id] = static_cast<int32_t>(model::TokenType::Normal);
  }
  return text::Tokenizer::from_data(d);
}

TEST(ToolCallConstraintSpeed, MaskOnAV4SizeVocabulary) {
  const text::Tokenizer tok = v4_size_tokenizer();
  ASSERT_EQ(tok.vocab_size(), model::kV4VocabSize);
  auto t0 = std::chrono::steady_clock::now();
  const auto vocab = std::make_shared<const VocabTrie>(tok);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const auto time_mask = [&](ToolCallConstraint& c, int reps) {
    std::vector<float> logits(tok.vocab_size(), 0.0f);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) c.mask(logits);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / reps;
  };
  ToolCallConstraint thinking(tools(), "", vocab, true);
  const double think_ms = time_mask(thinking, 5);
  const size_t think_allowed = thinking.allowed_tokens().size();
  ToolCallConstraint in_string(tools(), "", vocab, false);
  in_string.feed_bytes(kOpen + "search\">\n<｜DSML｜parameter name=\"query\" string=\"true\">");
  const double string_ms = time_mask(in_string, 5);
  ToolCallConstraint in_tag(tools(), "", vocab, false);
  in_tag.feed_bytes(kOpen);
  const double tag_ms = time_mask(in_tag, 20);
  ToolCallConstraint near_cap(tools(), "", vocab, false);
  near_cap.feed_bytes(kOpen + "search\">\n<｜DSML｜parameter name=\"query\" string=\"true\">" +
                      std::string(250, 'x'));
  const double near_cap_ms = time_mask(near_cap, 20);
  std::printf("[ perf ] string value 6 bytes before its cap: %.3f ms\n", near_cap_ms);
  std::printf("[ perf ] V4-size vocab (%u tokens, %zu trie nodes): trie build %.1f ms; mask: reasoning %.2f ms "
              "(%zu allowed), string value %.2f ms, tool name %.3f ms\n",
              tok.vocab_size(), vocab->node_count(), build_ms, think_ms, think_allowed, string_ms, tag_ms);
  // The subtree shortcuts give what the per-token check gives, on this
  // vocabulary's shape (words, CJK, punctuation, whitespace runs).
  std::vector<ToolCallConstraint> states = {thinking, in_string, in_tag, near_cap};
  states.emplace_back(tools(), "", vocab, true);
  states.back().feed_bytes("so </th");
  states.emplace_back(in_string);
  states.back().feed_bytes("\xE7\x9A");  // inside a character
  states.emplace_back(in_string);
  states.back().feed_bytes("ab<");
  states.emplace_back(near_cap);
  states.back().feed_bytes("xx");  // 4 bytes left: a split 3-byte character must still fit
  for (size_t k = 0; k < states.size(); ++k) {
    std::vector<int32_t> brute;
    for (uint32_t id = 0; id < tok.vocab_size(); ++id) {
      if (states[k].allows(static_cast<int32_t>(id))) brute.push_back(static_cast<int32_t>(id));
    }
    EXPECT_EQ(states[k].allowed_tokens(), brute) << "state " << k;
  }
  // Every token but EOS and the empty ones can continue reasoning.
  EXPECT_GT(think_allowed, tok.vocab_size() - 300);
  // The times are printed, not asserted (the target is < 5 ms a mask): a
  // wall-clock bound fails on a slow or loaded machine, or under the
  // sanitizers, for reasons that are not this code's.
}

}  // namespace
}  // namespace ds4::runtime
