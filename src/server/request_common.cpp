// Shared request parsing: body, typed getters, thinking controls, stop,
// sampling, logit_bias, tool call arguments; parse_request and
// requested_thinking_mode (PROTOCOL.md §4, §5.3, §5.4, §5.9).
#include "server/request_common.h"

#include <cfloat>
#include <cmath>
#include <limits>

namespace ds4::server {
namespace request {

namespace {

// Container nesting of a JSON text, scanned before parsing so a deep body is
// refused before anything is built from it. Malformed text may be miscounted;
// the parser rejects it anyway.
bool nesting_within_limit(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonNesting) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

const char* effort_names = "max, xhigh, high, medium, low, minimal or none";

}  // namespace

[[noreturn]] void fail(const std::string& message) { throw RequestError(message); }

[[noreturn]] void type_error(const std::string& where, std::string_view what) {
  fail(where + ": expected " + std::string(what));
}

std::string field_path(const std::string& parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return parent + "." + std::string(key);
}

std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

Json parse_body(std::string_view body) {
  if (!nesting_within_limit(body)) fail("invalid JSON request");
  Json parsed = Json::parse(body.begin(), body.end(), nullptr, false);
  if (parsed.is_discarded()) fail("invalid JSON request");
  if (!parsed.is_object()) fail("request body: expected a JSON object");
  return parsed;
}

const Json* find(const Json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const Json* member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> opt_string(const Json& obj, std::string_view key, const std::string& where) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) type_error(field_path(where, key), "a string");
  return v->get<std::string>();
}

std::optional<bool> opt_bool(const Json& obj, std::string_view key, const std::string& where) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) type_error(field_path(where, key), "a boolean");
  return v->get<bool>();
}

std::optional<double> opt_number(const Json& obj, std::string_view key, const std::string& where) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) type_error(field_path(where, key), "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) type_error(field_path(where, key), "a finite number");
  return d;
}

std::optional<float> opt_float(const Json& obj, std::string_view key, const std::string& where) {
  const auto d = opt_number(obj, key, where);
  if (!d) return std::nullopt;
  if (std::fabs(*d) > static_cast<double>(FLT_MAX)) type_error(field_path(where, key), "a number in float range");
  return static_cast<float>(*d);
}

std::optional<int64_t> opt_integer(const Json& obj, std::string_view key, const std::string& where) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  const std::string path = field_path(where, key);
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) type_error(path, "an integer in range");
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // 2^63 is exact as a double; anything at or above it does not fit.
    if (!std::isfinite(d) || std::trunc(d) != d || d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
      type_error(path, "an integer");
    }
    return static_cast<int64_t>(d);
  }
  type_error(path, "an integer");
}

const Json* opt_object(const Json& obj, std::string_view key, const std::string& where) {
  const Json* v = member(obj, key);
  if (v && !v->is_object()) type_error(field_path(where, key), "an object");
  return v;
}

const Json* opt_array(const Json& obj, std::string_view key, const std::string& where) {
  const Json* v = member(obj, key);
  if (v && !v->is_array()) type_error(field_path(where, key), "an array");
  return v;
}

std::optional<text::ThinkingMode> parse_effort(const Json& value, const std::string& where) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_string()) type_error(where, "a string or null");
  const std::string& s = value.get_ref<const std::string&>();
  if (s == "max") return text::ThinkingMode::Max;
  if (s == "xhigh" || s == "high" || s == "medium" || s == "low" || s == "minimal") return text::ThinkingMode::High;
  if (s == "none") return text::ThinkingMode::None;
  fail(where + ": unknown effort '" + s + "' (expected " + effort_names + ")");
}

std::optional<text::ThinkingMode> ThinkingControl::resolve() const {
  if (enabled && !*enabled) return text::ThinkingMode::None;
  if (effort) return effort;
  if (enabled) return text::ThinkingMode::High;
  return std::nullopt;
}

std::optional<bool> parse_thinking_flag(const Json& value, const std::string& where) {
  if (value.is_null()) return std::nullopt;
  if (value.is_boolean()) return value.get<bool>();
  if (!value.is_object()) type_error(where, "a boolean, an object or null");
  const auto type = opt_string(value, "type", where);
  if (!type) type_error(field_path(where, "type"), "\"enabled\", \"adaptive\" or \"disabled\"");
  if (*type == "enabled" || *type == "adaptive") return true;
  if (*type == "disabled") return false;
  fail(field_path(where, "type") + ": unknown thinking type '" + *type +
       "' (expected \"enabled\", \"adaptive\" or \"disabled\")");
}

std::vector<std::string> parse_stop(const Json& value, const std::string& where) {
  std::vector<std::string> out;
  if (value.is_null()) return out;
  if (value.is_string()) {
    if (!value.get_ref<const std::string&>().empty()) out.push_back(value.get<std::string>());
    return out;
  }
  if (!value.is_array()) type_error(where, "a string or an array of strings");
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) type_error(index_path(where, i), "a string");
    if (!value[i].get_ref<const std::string&>().empty()) out.push_back(value[i].get<std::string>());
  }
  return out;
}

std::map<int32_t, float> parse_logit_bias(const Json& value, const std::string& where) {
  std::map<int32_t, float> out;
  if (value.is_null()) return out;
  if (!value.is_object()) type_error(where, "an object mapping token ids to numbers");
  for (const auto& [key, bias] : value.items()) {
    const std::string path = where + "[\"" + key + "\"]";
    int64_t id = 0;
    bool digits = !key.empty() && key.size() <= 10;
    for (const char c : key) {
      if (c < '0' || c > '9') digits = false;
      else id = id * 10 + (c - '0');
    }
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      fail(where + ": key '" + key + "' is not a token id (a non-negative decimal integer)");
    }
    if (!bias.is_number()) type_error(path, "a number between -100 and 100");
    const double b = bias.get<double>();
    if (!(b >= -100.0 && b <= 100.0)) type_error(path, "a number between -100 and 100");
    out[static_cast<int32_t>(id)] = static_cast<float>(b);
  }
  return out;
}

void parse_sampling(const Json& body, const SamplingFields& fields, ChatRequest& out) {
  out.temperature = opt_float(body, "temperature", "");
  out.top_p = opt_float(body, "top_p", "");
  if (fields.min_p) out.min_p = opt_float(body, "min_p", "");
  if (fields.top_k) {
    if (const auto k = opt_integer(body, "top_k", "")) {
      if (*k < std::numeric_limits<int>::min() || *k > std::numeric_limits<int>::max()) {
        type_error("top_k", "an integer in range");
      }
      out.top_k = static_cast<int>(*k);
    }
  }
  if (fields.seed) {
    // seed ≤ 0 means "no seed" to the engine (PROTOCOL.md §4: seed > 0 is used).
    if (const Json* s = member(body, "seed")) {
      if (!s->is_number()) type_error("seed", "a number");
      if (s->is_number_unsigned()) {
        out.seed = s->get<uint64_t>();
      } else if (s->is_number_integer()) {
        out.seed = static_cast<uint64_t>(std::max<int64_t>(0, s->get<int64_t>()));
      } else {
        const double d = s->get<double>();
        if (!std::isfinite(d) || d >= 18446744073709551616.0) type_error("seed", "an integer in range");
        out.seed = d > 0 ? static_cast<uint64_t>(d) : 0;
      }
    }
  }
}

std::optional<int64_t> opt_max_tokens(const Json& body, std::string_view key) {
  const auto v = opt_integer(body, key, "");
  if (v && *v < 0) type_error(std::string(key), "a non-negative integer");
  return v;
}

std::string arguments_text(const Json& value, const std::string& where) {
  if (value.is_object()) return value.dump();
  if (!value.is_string()) type_error(where, "a JSON object text or an object");
  const std::string& s = value.get_ref<const std::string&>();
  // Valid JSON that is not an object cannot be rendered as DSML parameters
  // (chat_render.h); invalid text renders as one "arguments" parameter.
  if (Json::accept(s)) {
    const size_t first = s.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || s[first] != '{') type_error(where, "a JSON object text");
  }
  return s;
}

Json tool_call(const std::string& id, const std::string& name, const std::string& arguments) {
  Json call = Json::object();
  call["id"] = id;
  call["type"] = "function";
  call["function"] = Json::object();
  call["function"]["name"] = name;
  call["function"]["arguments"] = arguments;
  return call;
}

Json message(const std::string& role, const std::string& content) {
  Json m = Json::object();
  m["role"] = role;
  m["content"] = content;
  return m;
}

std::optional<std::string> known_role(const std::string& role) {
  if (role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool" ||
      role == "latest_reminder") {
    return role;
  }
  if (role == "function") return std::string("tool");
  return std::nullopt;
}

void parse_model(const Json& body, ChatRequest& out) {
  if (const auto model = opt_string(body, "model", "")) out.model = *model;
}

std::vector<std::string> trailing_tool_result_ids(const Json& messages) {
  std::vector<std::string> ids;
  for (size_t i = messages.size(); i-- > 0;) {
    const Json& m = messages[i];
    if (m.value("role", "") != "tool") break;
    if (const auto it = m.find("tool_call_id"); it != m.end() && it->is_string() && !it->empty()) {
      ids.push_back(it->get<std::string>());
    }
  }
  return {ids.rbegin(), ids.rend()};
}

void check_forced_tool(const ChatRequest& r) {
  if (!r.tool_required) return;
  if (!r.tools.is_array() || r.tools.empty()) fail("tool_choice requires a tool call but the request defines no tools");
  if (r.forced_tool.empty()) return;
  for (const Json& t : r.tools) {
    const Json* fn = member(t, "function");
    if (fn && fn->is_object()) {
      const Json* name = member(*fn, "name");
      if (name && name->is_string() && *name == r.forced_tool) return;
    }
  }
  fail("tool_choice names the tool '" + r.forced_tool + "', which the request does not define");
}

}  // namespace request

ChatRequest parse_request(Api api, std::string_view body) {
  switch (api) {
    case Api::ChatCompletions: return parse_chat_completions_request(body);
    case Api::Completions: return parse_completions_request(body);
    case Api::Responses: return parse_responses_request(body);
    case Api::Messages: return parse_messages_request(body);
  }
  throw RequestError("unknown API");
}

text::ThinkingMode requested_thinking_mode(const ChatRequest& request) {
  if (request.thinking) return *request.thinking;
  if (request.model == "deepseek-chat") return text::ThinkingMode::None;
  return text::ThinkingMode::High;  // deepseek-reasoner and every other name
}

const char* api_name(Api api) {
  switch (api) {
    case Api::ChatCompletions: return "chat";
    case Api::Completions: return "completions";
    case Api::Responses: return "responses";
    case Api::Messages: return "messages";
  }
  return "?";
}

}  // namespace ds4::server
