// Dispatch of the reply formatters by API, the error bodies (PROTOCOL.md §5.9)
// and the wire helpers every formatter shares: usage objects (§5.6), SSE
// framing, random item ids.
#include "server/reply.h"

#include <algorithm>
#include <random>

namespace ds4::server {

using Json = nlohmann::ordered_json;

std::unique_ptr<ReplyStream> make_reply_stream(const ChatRequest& request, const ReplyIds& ids) {
  switch (request.api) {
    case Api::ChatCompletions:
      return make_chat_completions_stream(request, ids);
    case Api::Completions:
      return make_completions_stream(request, ids);
    case Api::Responses:
      return make_responses_stream(request, ids);
    case Api::Messages:
      return make_messages_stream(request, ids);
  }
  return make_chat_completions_stream(request, ids);
}

Json reply_body(const ChatRequest& request, const ReplyIds& ids, const Reply& reply) {
  switch (request.api) {
    case Api::ChatCompletions:
      return chat_completions_body(request, ids, reply);
    case Api::Completions:
      return completions_body(request, ids, reply);
    case Api::Responses:
      return responses_body(request, ids, reply);
    case Api::Messages:
      return messages_body(request, ids, reply);
  }
  return chat_completions_body(request, ids, reply);
}

Json error_body(Api api, const RequestError& error) {
  Json inner = Json::object();
  // Anthropic keeps the OpenAI shape for every error except context length,
  // which gets its native {"type":"error","error":{…}} envelope.
  const bool anthropic_native = api == Api::Messages && error.code == "context_length_exceeded";
  if (anthropic_native) {
    inner["type"] = error.type;
    inner["message"] = error.what();
  } else {
    inner["message"] = error.what();
    inner["type"] = error.type;
    if (!error.param.empty()) inner["param"] = error.param;
    if (!error.code.empty()) inner["code"] = error.code;
  }
  if (error.extra.is_object()) {
    for (const auto& [key, value] : error.extra.items()) inner[key] = value;
  }
  Json body = Json::object();
  if (anthropic_native) body["type"] = "error";
  body["error"] = std::move(inner);
  return body;
}

namespace {

// cached clamped to [0, prompt]; written = the rest of the prompt.
struct PromptSplit {
  int64_t prompt, cached, written;
};

PromptSplit split_prompt(const Usage& usage) {
  const int64_t prompt = std::max<int64_t>(usage.prompt_tokens, 0);
  const int64_t cached = std::clamp<int64_t>(usage.cached_tokens, 0, prompt);
  return {prompt, cached, prompt - cached};
}

}  // namespace

Json openai_usage(const Usage& usage) {
  const PromptSplit p = split_prompt(usage);
  return Json{{"prompt_tokens", p.prompt},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", p.prompt + usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", p.cached}, {"cache_write_tokens", p.written}}}};
}

Json anthropic_usage(const Usage& usage) {
  const PromptSplit p = split_prompt(usage);
  return Json{{"input_tokens", p.prompt - p.cached - p.written},
              {"output_tokens", usage.completion_tokens},
              {"cache_read_input_tokens", p.cached},
              {"cache_creation_input_tokens", p.written}};
}

Json responses_usage(const Usage& usage) {
  const PromptSplit p = split_prompt(usage);
  return Json{{"input_tokens", p.prompt},
              {"input_tokens_details", {{"cached_tokens", p.cached}, {"cache_write_tokens", p.written}}},
              {"output_tokens", usage.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", p.prompt + usage.completion_tokens}};
}

const char* finish_reason_name(FinishReason finish) {
  switch (finish) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::ToolCalls:
      return "tool_calls";
    case FinishReason::Error:
      return "error";
  }
  return "stop";
}

std::string json_text(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse_data(const Json& value) { return "data: " + json_text(value) + "\n\n"; }

std::string sse_event(std::string_view name, const Json& value) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += json_text(value);
  out += "\n\n";
  return out;
}

std::string sse_error_event(Api api, std::string_view message) {
  const std::string text = message.empty() ? "internal server error" : std::string(message);
  if (api == Api::Messages) {
    return sse_event("error", Json{{"type", "error"}, {"error", {{"type", "api_error"}, {"message", text}}}});
  }
  return sse_event("error", Json{{"error", {{"message", text}, {"type", "server_error"}}}});
}

std::string random_hex_id(std::string_view prefix, size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local std::random_device device;
  std::string out(prefix);
  out.reserve(prefix.size() + 2 * bytes);
  unsigned int word = 0;
  for (size_t i = 0; i < bytes; ++i) {
    if (i % 4 == 0) word = device();  // 32 random bits per draw
    const unsigned int byte = (word >> (8 * (i % 4))) & 0xffu;
    out += kHex[byte >> 4];
    out += kHex[byte & 15u];
  }
  return out;
}

Json arguments_object(const std::string& arguments_json) {
  Json parsed = Json::parse(arguments_json, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) return Json::object();
  return parsed;
}

std::string arguments_object_text(const std::string& arguments_json) {
  Json parsed = Json::parse(arguments_json, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) return "{}";
  return arguments_json;
}

}  // namespace ds4::server
