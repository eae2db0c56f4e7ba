// Helpers the per-API request parsers share (request_openai.cpp,
// request_anthropic.cpp, request_responses.cpp): the body parse with its
// nesting limit, typed field getters whose RequestError names the field, and
// the fields several APIs accept the same way (thinking controls, stop,
// sampling, logit_bias, tool call arguments). Internal to src/server.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_request.h"

namespace ds4::server::request {

using Json = nlohmann::ordered_json;

// Deepest container nesting a request body may have (the top object counts).
inline constexpr int kMaxJsonNesting = 256;

// The body as a JSON object. RequestError "invalid JSON request" for bad JSON
// or nesting deeper than kMaxJsonNesting; "request body: expected a JSON
// object" for another top-level value.
Json parse_body(std::string_view body);

[[noreturn]] void fail(const std::string& message);
// A forced tool call must name a tool of the request: 400 otherwise.
void check_forced_tool(const ChatRequest& r);
// "<where>: expected <what>".
[[noreturn]] void type_error(const std::string& where, std::string_view what);

// Field paths for messages: "" + "a" → "a", "a" + "b" → "a.b", "a" + 3 → "a[3]".
std::string field_path(const std::string& parent, std::string_view key);
std::string index_path(const std::string& parent, size_t index);

// The member `key` of `obj`, or nullptr when it is absent or null (a null
// field means "not sent" everywhere in the APIs).
const Json* member(const Json& obj, std::string_view key);
// The value at `key` of an object, null values included; nullptr when absent.
const Json* find(const Json& obj, std::string_view key);

// Typed getters for `obj[key]` (nullopt when absent or null); `where` is the
// path of `obj` ("" at the top level). Numbers must be finite; integers may be
// written as integral floats (4.0).
std::optional<std::string> opt_string(const Json& obj, std::string_view key, const std::string& where);
std::optional<bool> opt_bool(const Json& obj, std::string_view key, const std::string& where);
std::optional<double> opt_number(const Json& obj, std::string_view key, const std::string& where);
std::optional<float> opt_float(const Json& obj, std::string_view key, const std::string& where);
std::optional<int64_t> opt_integer(const Json& obj, std::string_view key, const std::string& where);
// An object or array member, type-checked (nullptr when absent or null).
const Json* opt_object(const Json& obj, std::string_view key, const std::string& where);
const Json* opt_array(const Json& obj, std::string_view key, const std::string& where);

// Effort names (PROTOCOL.md §5.4): max → Max; xhigh|high|medium|low|minimal →
// High; none → None; null → nullopt; anything else → RequestError.
std::optional<text::ThinkingMode> parse_effort(const Json& value, const std::string& where);

// The explicit thinking controls of one request, merged into one mode:
// disabled wins; otherwise the effort; otherwise enabled → High.
struct ThinkingControl {
  std::optional<bool> enabled;
  std::optional<text::ThinkingMode> effort;
  std::optional<text::ThinkingMode> resolve() const;
};
// `thinking`: a boolean or {"type":"enabled"|"adaptive"|"disabled"}; null = unset.
std::optional<bool> parse_thinking_flag(const Json& value, const std::string& where);

// `stop` / `stop_sequences`: a string or an array of strings (empty ones dropped).
std::vector<std::string> parse_stop(const Json& value, const std::string& where);

// OpenAI logit_bias: {"<token id>": bias in [-100, 100]}.
std::map<int32_t, float> parse_logit_bias(const Json& value, const std::string& where);

// Which of the common sampling fields an API accepts.
struct SamplingFields {
  bool min_p = false;
  bool top_k = false;
  bool seed = false;
};
// temperature, top_p and the optional ones above, from the top-level body.
void parse_sampling(const Json& body, const SamplingFields& fields, ChatRequest& out);

// `max_tokens` style field: a non-negative integer.
std::optional<int64_t> opt_max_tokens(const Json& body, std::string_view key);

// Tool call arguments for a message: a string is kept as sent (valid JSON must
// be an object; other text is the official one-parameter fallback), an object
// becomes its compact JSON text with its key order.
std::string arguments_text(const Json& value, const std::string& where);

// {"id","type":"function","function":{"name","arguments"}}.
Json tool_call(const std::string& id, const std::string& name, const std::string& arguments);

// {"role", "content"} with string content.
Json message(const std::string& role, const std::string& content);

// The role as render_chat knows it ("function" → "tool"), or nullopt for
// roles it does not render (those messages are dropped, PROTOCOL.md §2.2).
std::optional<std::string> known_role(const std::string& role);

// The request's model, when it sends one.
void parse_model(const Json& body, ChatRequest& out);

// Tool result ids of the trailing run of role "tool" messages, in order
// (messages without an id are skipped).
std::vector<std::string> trailing_tool_result_ids(const Json& messages);

// Runs a parser; a nlohmann exception that escapes it (none should) becomes a
// RequestError instead of a server error.
template <class Parse>
ChatRequest guarded(Parse&& parse) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    throw RequestError(std::string("invalid JSON request: ") + e.what());
  }
}

}  // namespace ds4::server::request
