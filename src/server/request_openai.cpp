// OpenAI chat completions and legacy completions requests → ChatRequest
// (PROTOCOL.md §5.3, §5.4, §2.5 F; DeepSeek's chat prefix completion).
#include <string>

#include "server/chat_request.h"
#include "server/request_common.h"

namespace ds4::server {

using request::Json;
using request::find;

namespace {

// A chat content value as one string: text parts (strings, or the "text" of
// part objects) concatenated without separator; other parts (images…) ignored.
std::string chat_content(const Json* value, const std::string& where) {
  if (!value || value->is_null()) return {};
  if (value->is_string()) return value->get<std::string>();
  if (!value->is_array()) request::type_error(where, "a string, an array or null");
  std::string out;
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& part = (*value)[i];
    const std::string path = request::index_path(where, i);
    if (part.is_string()) {
      out += part.get_ref<const std::string&>();
    } else if (part.is_object()) {
      if (const auto text = request::opt_string(part, "text", path)) out += *text;
    } else {
      request::type_error(path, "a string or an object");
    }
  }
  return out;
}

// tool_calls of an assistant message; calls without function name or
// arguments are dropped (PROTOCOL.md §5.3).
Json chat_tool_calls(const Json* value, const std::string& where) {
  Json out = Json::array();
  if (!value || value->is_null()) return out;
  if (!value->is_array()) request::type_error(where, "an array or null");
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& call = (*value)[i];
    const std::string path = request::index_path(where, i);
    if (!call.is_object()) request::type_error(path, "an object");
    const std::string id = request::opt_string(call, "id", path).value_or("");
    const Json* fn = request::opt_object(call, "function", path);
    if (!fn) continue;
    const std::string fn_path = request::field_path(path, "function");
    const auto name = request::opt_string(*fn, "name", fn_path);
    const Json* args = request::member(*fn, "arguments");
    if (!name || !args) continue;
    out.push_back(request::tool_call(id, *name, request::arguments_text(*args, fn_path + ".arguments")));
  }
  return out;
}

// One chat message in render_chat form, or null when its role is not rendered.
Json chat_message(const Json& m, const std::string& where) {
  const std::string role = request::opt_string(m, "role", where).value_or("user");
  const auto known = request::known_role(role);
  const std::string content = chat_content(find(m, "content"), where + ".content");
  if (!known) return nullptr;
  Json out = request::message(*known, content);
  if (*known == "assistant") {
    if (const Json* r = request::member(m, "reasoning_content")) {
      out["reasoning_content"] = chat_content(r, where + ".reasoning_content");
    }
    Json calls = chat_tool_calls(find(m, "tool_calls"), where + ".tool_calls");
    if (!calls.empty()) out["tool_calls"] = std::move(calls);
  } else if (*known == "tool") {
    if (const auto id = request::opt_string(m, "tool_call_id", where)) out["tool_call_id"] = *id;
  }
  return out;
}

// OpenAI tools as sent; an entry in the direct schema form {name, …} is wrapped
// as {"type":"function","function":{…}}. null when there are none.
Json chat_tools(const Json& body) {
  const Json* tools = request::opt_array(body, "tools", "");
  if (!tools || tools->empty()) return nullptr;
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string path = request::index_path("tools", i);
    if (!tool.is_object()) request::type_error(path, "an object");
    if (const Json* fn = request::opt_object(tool, "function", path)) {
      const std::string fn_path = request::field_path(path, "function");
      if (!request::opt_string(*fn, "name", fn_path)) request::type_error(fn_path + ".name", "a string");
      out.push_back(tool);
    } else if (request::opt_string(tool, "name", path)) {
      Json wrapped = Json::object();
      wrapped["type"] = "function";
      wrapped["function"] = tool;
      out.push_back(std::move(wrapped));
    } else {
      request::type_error(path, "a tool {\"type\":\"function\",\"function\":{\"name\":…}}");
    }
  }
  return out;
}

// thinking / think / reasoning_effort (chat and completions).
std::optional<text::ThinkingMode> openai_thinking(const Json& body) {
  request::ThinkingControl control;
  if (const Json* t = find(body, "thinking")) control.enabled = request::parse_thinking_flag(*t, "thinking");
  if (const auto think = request::opt_bool(body, "think", "")) control.enabled = think;
  if (const Json* e = find(body, "reasoning_effort")) control.effort = request::parse_effort(*e, "reasoning_effort");
  return control.resolve();
}

// Fields chat and completions share.
void parse_openai_common(const Json& body, ChatRequest& r) {
  request::parse_model(body, r);
  request::parse_sampling(body, {.min_p = true, .top_k = true, .seed = true}, r);
  r.stream = request::opt_bool(body, "stream", "").value_or(false);
  if (const Json* options = request::opt_object(body, "stream_options", "")) {
    r.include_usage = request::opt_bool(*options, "include_usage", "stream_options").value_or(false);
  }
  if (const Json* stop = find(body, "stop")) r.stop = request::parse_stop(*stop, "stop");
  if (const Json* bias = find(body, "logit_bias")) r.logit_bias = request::parse_logit_bias(*bias, "logit_bias");
  r.thinking = openai_thinking(body);
}

}  // namespace

ChatRequest parse_chat_completions_request(std::string_view body_text) {
  return request::guarded([&] {
    const Json body = request::parse_body(body_text);
    ChatRequest r;
    r.api = Api::ChatCompletions;
    const Json* messages = request::member(body, "messages");
    if (!messages) request::fail("missing messages");
    if (!messages->is_array()) request::type_error("messages", "an array of messages");
    // Both real APIs refuse an empty conversation with a 400; so do we.
    if (messages->empty()) request::fail("messages: at least one message is required");
    for (size_t i = 0; i < messages->size(); ++i) {
      const Json& m = (*messages)[i];
      const std::string where = request::index_path("messages", i);
      if (!m.is_object()) request::type_error(where, "an object");
      // DeepSeek chat prefix completion: the last message, an assistant one,
      // is the start of the reply rather than history.
      if (request::opt_bool(m, "prefix", where).value_or(false)) {
        if (i + 1 != messages->size() || request::opt_string(m, "role", where).value_or("user") != "assistant") {
          request::fail(where + ".prefix: only the last message, with role assistant, can be a prefix");
        }
        r.response_prefix = chat_content(find(m, "content"), where + ".content");
        chat_tool_calls(find(m, "tool_calls"), where + ".tool_calls");  // type-checked, not used
        continue;
      }
      Json parsed = chat_message(m, where);
      if (!parsed.is_null()) r.messages.push_back(std::move(parsed));
    }
    r.tools = chat_tools(body);
    if (const Json* choice = find(body, "tool_choice"); choice && !choice->is_null()) {
      if (choice->is_string()) {
        const std::string& c = choice->get_ref<const std::string&>();
        if (c == "none") r.tools = nullptr;
        else if (c == "required") r.tool_required = true;
        else if (c != "auto") request::fail("tool_choice: expected \"none\", \"auto\", \"required\" or a function, not \"" + c + "\"");
      } else if (choice->is_object()) {
        const Json* fn = find(*choice, "function");
        const std::optional<std::string> name =
            fn && fn->is_object() ? request::opt_string(*fn, "name", "tool_choice.function.name") : std::nullopt;
        if (!name) request::type_error("tool_choice.function.name", "a string");
        r.tool_required = true;
        r.forced_tool = *name;
      } else {
        request::type_error("tool_choice", "a string or an object");
      }
      request::check_forced_tool(r);
    }
    r.max_tokens = request::opt_max_tokens(body, "max_tokens");
    if (const auto n = request::opt_max_tokens(body, "max_completion_tokens")) r.max_tokens = n;
    parse_openai_common(body, r);
    r.trailing_tool_result_ids = request::trailing_tool_result_ids(r.messages);
    return r;
  });
}

ChatRequest parse_completions_request(std::string_view body_text) {
  return request::guarded([&] {
    const Json body = request::parse_body(body_text);
    ChatRequest r;
    r.api = Api::Completions;
    const Json* prompt = request::member(body, "prompt");
    if (!prompt) request::fail("missing prompt");
    std::string text;
    if (prompt->is_string()) {
      text = prompt->get<std::string>();
    } else if (prompt->is_array()) {
      if (prompt->empty()) request::fail("missing prompt");
      if (!(*prompt)[0].is_string()) request::type_error("prompt[0]", "a string");
      text = (*prompt)[0].get<std::string>();
    } else {
      request::type_error("prompt", "a string or an array of strings");
    }
    // PROTOCOL.md §2.5 F: the prompt is the user turn of a default chat.
    r.messages.push_back(request::message("system", "You are a helpful assistant"));
    r.messages.push_back(request::message("user", text));
    r.max_tokens = request::opt_max_tokens(body, "max_tokens");
    parse_openai_common(body, r);
    return r;
  });
}

}  // namespace ds4::server
