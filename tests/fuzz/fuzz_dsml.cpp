// libFuzzer target for the DSML stream parser. Input: one control byte (bit 0
// thinking, bit 1 tools active, bit 2 decode the closing-tag escape, bits 3-7
// seed the chunking) followed by generated text. Checks that parsing never
// crashes, that the message is the same whole, byte by byte and in seeded
// random chunks, that each stream's deltas concatenate to the message, that
// arguments_json is the JSON of `arguments`, and that a complete block is
// replayable (content + raw block occur in the text). Also drives the syntax
// tracker over the text.
// Built with -DDS4_FUZZ_REPLAY it is a plain program that runs every file of
// the directories given on the command line through the same target.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "text/dsml_parser.h"

namespace {

using ds4::text::DsmlEvent;
using ds4::text::DsmlOptions;
using ds4::text::DsmlStreamParser;
using ds4::text::DsmlSyntaxTracker;
using ds4::text::ParsedMessage;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Stream {
  std::string reasoning, content;
  std::vector<std::string> names, arguments;
  bool block_end = false;
};

void apply_events(Stream& s, const std::vector<DsmlEvent>& events) {
  for (const DsmlEvent& e : events) {
    switch (e.kind) {
      case DsmlEvent::Kind::ReasoningDelta: s.reasoning += e.text; break;
      case DsmlEvent::Kind::ContentDelta: s.content += e.text; break;
      case DsmlEvent::Kind::ToolCallBegin:
        check(e.index == static_cast<int>(s.names.size()));
        s.names.push_back(e.text);
        s.arguments.emplace_back();
        break;
      case DsmlEvent::Kind::ToolArgumentsDelta:
        check(e.index + 1 == static_cast<int>(s.names.size()));
        s.arguments.back() += e.text;
        break;
      case DsmlEvent::Kind::ToolCallEnd: check(e.index + 1 == static_cast<int>(s.names.size())); break;
      case DsmlEvent::Kind::ToolBlockEnd: s.block_end = true; break;
      case DsmlEvent::Kind::ToolBlockAbort:
        s.names.clear();
        s.arguments.clear();
        break;
      case DsmlEvent::Kind::Warning: break;
    }
  }
}

ParsedMessage parse_in_chunks(std::string_view text, const DsmlOptions& options, uint32_t seed, size_t max_chunk) {
  DsmlStreamParser parser(options);
  Stream s;
  uint32_t state = seed * 2654435761u + 1;
  for (size_t pos = 0; pos < text.size();) {
    state = state * 1664525u + 1013904223u;
    const size_t n = std::min(text.size() - pos, 1 + (state >> 8) % max_chunk);
    apply_events(s, parser.feed(text.substr(pos, n)));
    pos += n;
  }
  apply_events(s, parser.finish());
  const ParsedMessage& m = parser.message();
  check(s.reasoning == m.reasoning);
  check(s.content == m.content);
  check(s.block_end == m.tool_block_complete);
  check(s.names.size() == m.tool_calls.size());
  for (size_t i = 0; i < s.names.size(); ++i) {
    check(s.names[i] == m.tool_calls[i].name);
    check(s.arguments[i] == m.tool_calls[i].arguments_json);
  }
  return m;
}

void check_same(const ParsedMessage& a, const ParsedMessage& b) {
  check(a.reasoning == b.reasoning);
  check(a.content == b.content);
  check(a.raw_tool_block == b.raw_tool_block);
  check(a.tool_block_complete == b.tool_block_complete);
  check(a.thinking_closed == b.thinking_closed);
  check(a.tool_block_unterminated == b.tool_block_unterminated);
  check(a.warnings == b.warnings);
  check(a.tool_calls.size() == b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    check(a.tool_calls[i].name == b.tool_calls[i].name);
    check(a.tool_calls[i].arguments_json == b.tool_calls[i].arguments_json);
    check(a.tool_calls[i].arguments == b.tool_calls[i].arguments);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  DsmlOptions options;
  options.thinking = (data[0] & 1) != 0;
  options.tools_active = (data[0] & 2) != 0;
  options.decode_parameter_close_escape = (data[0] & 4) != 0;
  const uint32_t seed = data[0] >> 3;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const ParsedMessage whole = parse_in_chunks(text, options, seed, text.size() + 1);
  check_same(whole, parse_in_chunks(text, options, seed, 1));
  check_same(whole, parse_in_chunks(text, options, seed, 7));
  check_same(whole, parse_in_chunks(text, options, seed, 64));

  for (const auto& call : whole.tool_calls) {
    const auto reparsed = nlohmann::ordered_json::parse(call.arguments_json, nullptr, false);
    check(!reparsed.is_discarded() && reparsed == call.arguments);
  }
  check(whole.tool_calls.empty() || whole.tool_block_complete);
  if (whole.tool_block_complete) {
    check(options.tools_active);
    check(text.find(whole.content + whole.raw_tool_block) != std::string_view::npos);
  }

  DsmlSyntaxTracker tracker;
  for (size_t i = 0; i < text.size(); i += 3) {
    tracker.feed(text.substr(i, 3));
    const auto r = tracker.region();
    check(tracker.greedy() == (r == DsmlSyntaxTracker::Region::Structural || r == DsmlSyntaxTracker::Region::JsonValue));
  }
  return 0;
}

#include "replay_main.h"
