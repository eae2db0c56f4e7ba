// One client request, whatever API it came through (OpenAI chat completions,
// legacy completions, Responses, Anthropic Messages), reduced to what the
// engine needs: OpenAI-form messages and tools for text::render_chat, the
// thinking control, sampling, limits, stop sequences and streaming options
// (PROTOCOL.md §5.3–5.4). The per-API parsers live in request_*.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/chat_render.h"

namespace ds4::server {

enum class Api { ChatCompletions, Completions, Responses, Messages };

// Short name for logs and metrics: chat, completions, responses, messages.
const char* api_name(Api api);

// A request the server refuses: HTTP status and the fields of the API's error
// body (PROTOCOL.md §5.9). `param`/`code` are empty when not applicable;
// `extra` holds additional members of the error object (n_prompt_tokens…).
class RequestError : public std::runtime_error {
 public:
  explicit RequestError(const std::string& message, int status = 400, std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), type(std::move(type)) {}
  int status;
  std::string type;
  std::string param;
  std::string code;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// How a tool the model calls by `prompt name` goes back to the client
// (Responses: namespaced functions, custom tools and tool_search).
struct ToolWireName {
  enum class Kind { Function, Custom, ToolSearch };
  std::string name;       // name on the wire
  std::string space;      // Responses namespace, "" when none
  Kind kind = Kind::Function;
};

struct ChatRequest {
  Api api = Api::ChatCompletions;
  std::string model = "deepseek-v4-flash";  // echoed in replies; any name accepted

  // OpenAI-form messages (role, content, reasoning_content, tool_calls,
  // tool_call_id) ready for text::render_chat; /v1/completions becomes the
  // default system message + one user message.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // OpenAI tools array [{type:"function",function:{name,description,parameters}}],
  // or null when the request has none or tool_choice disables them.
  nlohmann::ordered_json tools = nullptr;
  // tool_choice asks for a tool call (OpenAI "required" / a named function,
  // Anthropic {type:"any"} / {type:"tool"}, Responses "required" / a named
  // function): generation is constrained to one DSML call of `forced_tool`
  // (a prompt name; "" = any of the tools).
  bool tool_required = false;
  std::string forced_tool;

  // Explicit thinking control (thinking / think / reasoning_effort /
  // output_config.effort / reasoning.effort); nullopt = not sent.
  std::optional<text::ThinkingMode> thinking;
  bool reasoning_summary = false;  // Responses: reasoning.summary opted in

  // Sampling as sent (nullopt = server default, PROTOCOL.md §4).
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_tokens;
  std::vector<std::string> stop;
  // OpenAI logit_bias: token id → bias added to its logit (-100…100).
  std::map<int32_t, float> logit_bias;

  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage

  // A response prefix the reply must start with (DeepSeek's chat prefix
  // completion: a last assistant message with "prefix": true; Anthropic: a
  // trailing assistant message). Not part of `messages`; nullopt when none.
  std::optional<std::string> response_prefix;

  // Ids of the tool results at the end of the request (Responses call_id,
  // Anthropic tool_use_id, OpenAI tool_call_id), in order.
  std::vector<std::string> trailing_tool_result_ids;
  // Responses: prompt tool name → how it is named on the wire.
  std::map<std::string, ToolWireName> tool_wire_names;
};

// Parsers: the request body (JSON text) → ChatRequest. RequestError (400) for
// invalid JSON, nesting deeper than 256, wrong types, missing required fields
// and the unsupported fields PROTOCOL.md §5.3 lists.
ChatRequest parse_chat_completions_request(std::string_view body);
ChatRequest parse_completions_request(std::string_view body);
ChatRequest parse_responses_request(std::string_view body);
ChatRequest parse_messages_request(std::string_view body);
ChatRequest parse_request(Api api, std::string_view body);

// Thinking mode before the context gate: the explicit control, else the model
// alias (deepseek-chat → None, deepseek-reasoner → High), else High.
text::ThinkingMode requested_thinking_mode(const ChatRequest& request);

}  // namespace ds4::server
