// Rendering of assistant tool calls as DSML, byte-for-byte as DeepSeek's
// official V4 encoder (encoding_dsv4.py) writes them into the prompt, and the
// json.dumps-compatible serializer that rendering (and the tools block) needs.
//
// Block layout (PROTOCOL.md §3.1; official `tool_calls_template`):
//   "\n\n<｜DSML｜tool_calls>\n" + invokes joined by "\n" + "\n</｜DSML｜tool_calls>"
//   invoke = "<｜DSML｜invoke name=\"NAME\">\n" + params joined by "\n" + "\n</｜DSML｜invoke>"
//   param  = "<｜DSML｜parameter name=\"KEY\" string=\"true|false\">VALUE</｜DSML｜parameter>"
// so a call without arguments renders ">\n\n</｜DSML｜invoke>" (official; ds4
// writes ">\n</…invoke>"). String values are written raw (no escaping at all,
// not even of a closing parameter tag), other values as python_json_dumps.
// Names and keys are written raw too. Arguments text that is not valid JSON
// becomes one string parameter named "arguments" holding the raw text
// (official); valid JSON that is not an object throws ds4::Error (the official
// encoder crashes there).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ds4::text {

struct ToolCallText {
  std::string name;
  std::string arguments_json;  // arguments as a JSON object text
};

// The whole block, INCLUDING the leading "\n\n" (the official encoder appends
// it after the assistant content). Empty `calls` → "" (official: no block).
std::string render_tool_calls_dsml(std::span<const ToolCallText> calls);

// Same bytes delivered piecewise: `is_template` is true for DSML markup and
// false for text that came from the caller (names, keys, values), so a
// tokenizer can refuse to turn caller text into control tokens.
using DsmlPieceSink = std::function<void(std::string_view text, bool is_template)>;
void render_tool_calls_dsml(std::span<const ToolCallText> calls, const DsmlPieceSink& sink);

// The body of a JSON string literal (no quotes): ", \\ and control characters
// escaped exactly as both Python's json.dumps and nlohmann::json::dump write
// them (\n \r \t \b \f, others \u00xx), everything else raw.
void append_json_escaped(std::string& out, std::string_view s);

// json.dumps(value, ensure_ascii=False) with the default separators ", " and
// ": ": keys in stored order, non-ASCII written raw, `"` `\` and control
// characters escaped (\n \r \t \b \f, others \u00xx lower-case hex), floats in
// Python's repr (shortest round trip: 1.5, 1e-07, 10.0, 1e+16, -0.0),
// NaN/Infinity as Python writes them. Binary values throw ds4::Error.
std::string python_json_dumps(const nlohmann::ordered_json& value);

// Python float repr (the number part of python_json_dumps for floats).
std::string python_float_repr(double value);

}  // namespace ds4::text
