#include "text/dsml_render.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace ds4::text {

void append_json_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
}
namespace {

constexpr std::string_view kBlockOpen = "\n\n<｜DSML｜tool_calls>\n";
constexpr std::string_view kBlockClose = "\n</｜DSML｜tool_calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke name=\"";
constexpr std::string_view kInvokeClose = "\n</｜DSML｜invoke>";
constexpr std::string_view kParamOpen = "<｜DSML｜parameter name=\"";
constexpr std::string_view kParamClose = "</｜DSML｜parameter>";

void append_python_string(std::string& out, const std::string& s) {
  out += '"';
  append_json_escaped(out, s);
  out += '"';
}

void append_python_json(std::string& out, const nlohmann::ordered_json& v) {
  using T = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case T::null: out += "null"; return;
    case T::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case T::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case T::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case T::number_float: out += python_float_repr(v.get<double>()); return;
    case T::string: append_python_string(out, v.get_ref<const std::string&>()); return;
    case T::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        append_python_json(out, e);
      }
      out += ']';
      return;
    }
    case T::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, e] : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_python_string(out, key);
        out += ": ";
        append_python_json(out, e);
      }
      out += '}';
      return;
    }
    case T::binary:
    case T::discarded:
      break;
  }
  throw Error("python_json_dumps: value of type " + std::string(v.type_name()) + " has no JSON form");
}

// The arguments object the official encoder iterates: the parsed text, or
// {"arguments": raw text} when the text is not JSON.
nlohmann::ordered_json arguments_object(const ToolCallText& call) {
  auto parsed = nlohmann::ordered_json::parse(call.arguments_json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    nlohmann::ordered_json fallback = nlohmann::ordered_json::object();
    fallback["arguments"] = call.arguments_json;
    return fallback;
  }
  if (!parsed.is_object()) {
    throw Error("tool call '" + call.name + "': arguments must be a JSON object, got " +
                std::string(parsed.type_name()) + ": " + call.arguments_json);
  }
  return parsed;
}

}  // namespace

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  // Shortest round-trip digits, as Python's repr picks them; only the layout
  // (fixed vs exponent) follows Python's own rule below.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // [-]d[.ddd]e±XX
  const size_t e_pos = sci.find('e');
  std::string_view mant = sci.substr(0, e_pos);
  const int exp10 = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string out;
  if (!mant.empty() && mant[0] == '-') {
    out += '-';
    mant.remove_prefix(1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  } else if (exp10 >= 0) {
    const auto int_len = static_cast<size_t>(exp10) + 1;
    if (digits.size() <= int_len) {
      out += digits;
      out.append(int_len - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, int_len);
      out += '.';
      out.append(digits, int_len);
    }
  } else {
    out += "0.";
    out.append(static_cast<size_t>(-exp10 - 1), '0');
    out += digits;
  }
  return out;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_python_json(out, value);
  return out;
}

void render_tool_calls_dsml(std::span<const ToolCallText> calls, const DsmlPieceSink& sink) {
  if (calls.empty()) return;
  sink(kBlockOpen, true);
  bool first_call = true;
  for (const auto& call : calls) {
    const auto args = arguments_object(call);
    if (!first_call) sink("\n", true);
    first_call = false;
    sink(kInvokeOpen, true);
    sink(call.name, false);
    sink("\">\n", true);
    bool first_param = true;
    for (const auto& [key, v] : args.items()) {
      if (!first_param) sink("\n", true);
      first_param = false;
      sink(kParamOpen, true);
      sink(key, false);
      sink(v.is_string() ? "\" string=\"true\">" : "\" string=\"false\">", true);
      sink(v.is_string() ? v.get_ref<const std::string&>() : python_json_dumps(v), false);
      sink(kParamClose, true);
    }
    sink(kInvokeClose, true);
  }
  sink(kBlockClose, true);
}

std::string render_tool_calls_dsml(std::span<const ToolCallText> calls) {
  std::string out;
  render_tool_calls_dsml(calls, [&out](std::string_view text, bool) { out += text; });
  return out;
}

}  // namespace ds4::text
