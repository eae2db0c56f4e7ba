// Anthropic Messages requests → ChatRequest (PROTOCOL.md §5.3, §5.4, §2.5 E):
// content blocks become OpenAI-form messages (tool_use → tool_calls, each
// tool_result → a role "tool" message), the system prompt the first system
// message, a trailing assistant message the response prefix ("prefill").
#include <string>
#include <vector>

#include "server/chat_request.h"
#include "server/request_common.h"

namespace ds4::server {

using request::Json;
using request::find;

namespace {

// The block's type; a typeless object counts as a text block.
std::string block_type(const Json& block, const std::string& where) {
  return request::opt_string(block, "type", where).value_or("text");
}

// tool_result content: a string, or blocks whose text is concatenated without
// separator (images and other blocks ignored).
std::string tool_result_text(const Json* value, const std::string& where) {
  if (!value || value->is_null()) return {};
  if (value->is_string()) return value->get<std::string>();
  if (!value->is_array()) request::type_error(where, "a string, an array of content blocks or null");
  std::string out;
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& block = (*value)[i];
    const std::string path = request::index_path(where, i);
    if (block.is_string()) {
      out += block.get_ref<const std::string&>();
    } else if (block.is_object()) {
      if (block_type(block, path) == "text") out += request::opt_string(block, "text", path).value_or("");
    } else {
      request::type_error(path, "a string or a content block");
    }
  }
  return out;
}

// An assistant message's blocks: text, thinking and tool_use.
struct AssistantParts {
  std::string text;
  std::optional<std::string> reasoning;
  Json tool_calls = Json::array();
};

AssistantParts assistant_parts(const Json* content, const std::string& where) {
  AssistantParts parts;
  if (!content || content->is_null()) return parts;
  if (content->is_string()) {
    parts.text = content->get<std::string>();
    return parts;
  }
  if (!content->is_array()) request::type_error(where, "a string, an array of content blocks or null");
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& block = (*content)[i];
    const std::string path = request::index_path(where, i);
    if (block.is_string()) {
      parts.text += block.get_ref<const std::string&>();
      continue;
    }
    if (!block.is_object()) request::type_error(path, "a string or a content block");
    const std::string type = block_type(block, path);
    if (type == "text") {
      parts.text += request::opt_string(block, "text", path).value_or("");
    } else if (type == "thinking") {
      parts.reasoning = parts.reasoning.value_or("") + request::opt_string(block, "thinking", path).value_or("");
    } else if (type == "tool_use") {
      const std::string id = request::opt_string(block, "id", path).value_or("");
      const auto name = request::opt_string(block, "name", path);
      if (!name) continue;  // a call without a name cannot be rendered
      std::string arguments = "{}";
      if (const Json* input = request::member(block, "input")) {
        if (!input->is_object()) request::type_error(path + ".input", "an object");
        arguments = input->dump();
      }
      parts.tool_calls.push_back(request::tool_call(id, *name, arguments));
    }
    // redacted_thinking, images, server tool blocks…: nothing to render.
  }
  return parts;
}

// A user-side message: text blocks and tool results in block order, each run
// of text one message of `role`, each tool_result one role "tool" message.
// Returns the tool_use_ids of its results.
std::vector<std::string> append_user_side(const Json* content, const std::string& role, const std::string& where,
                                          Json& out) {
  std::vector<std::string> result_ids;
  if (!content || content->is_null() || content->is_string()) {
    out.push_back(request::message(role, content && content->is_string() ? content->get<std::string>() : ""));
    return result_ids;
  }
  if (!content->is_array()) request::type_error(where, "a string, an array of content blocks or null");
  std::string text;
  bool have_text = false;
  bool emitted = false;
  const auto flush_text = [&] {
    if (!have_text) return;
    out.push_back(request::message(role, text));
    text.clear();
    have_text = false;
    emitted = true;
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& block = (*content)[i];
    const std::string path = request::index_path(where, i);
    if (block.is_string()) {
      text += block.get_ref<const std::string&>();
      have_text = true;
      continue;
    }
    if (!block.is_object()) request::type_error(path, "a string or a content block");
    const std::string type = block_type(block, path);
    if (type == "text") {
      text += request::opt_string(block, "text", path).value_or("");
      have_text = true;
    } else if (type == "tool_result") {
      flush_text();
      const std::string id = request::opt_string(block, "tool_use_id", path).value_or("");
      Json result = request::message("tool", tool_result_text(find(block, "content"), path + ".content"));
      result["tool_call_id"] = id;
      out.push_back(std::move(result));
      if (!id.empty()) result_ids.push_back(id);
      emitted = true;
    }
    // images, documents, thinking in a user turn…: ignored (PROTOCOL.md §2.5 E).
  }
  flush_text();
  if (!emitted) out.push_back(request::message(role, ""));
  return result_ids;
}

// `system`: a string or an array of strings / {text} blocks; parts starting
// with "x-anthropic-" (per-request billing headers) are dropped so the prompt
// prefix stays stable; the rest joined with "\n".
std::string system_text(const Json& value) {
  std::vector<std::string> parts;
  if (value.is_string()) {
    parts.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      const Json& part = value[i];
      const std::string path = request::index_path("system", i);
      if (part.is_string()) parts.push_back(part.get<std::string>());
      else if (part.is_object()) parts.push_back(request::opt_string(part, "text", path).value_or(""));
      else request::type_error(path, "a string or a text block");
    }
  } else {
    request::type_error("system", "a string or an array of text blocks");
  }
  std::string out;
  for (const std::string& part : parts) {
    if (part.empty() || part.starts_with("x-anthropic-")) continue;
    if (!out.empty()) out += '\n';
    out += part;
  }
  return out;
}

// Anthropic tools {name, description, input_schema} → OpenAI function tools.
Json anthropic_tools(const Json& body) {
  const Json* tools = request::opt_array(body, "tools", "");
  if (!tools || tools->empty()) return nullptr;
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& tool = (*tools)[i];
    const std::string path = request::index_path("tools", i);
    if (!tool.is_object()) request::type_error(path, "an object");
    const auto name = request::opt_string(tool, "name", path);
    if (!name) request::type_error(path + ".name", "a string");
    Json fn = Json::object();
    fn["name"] = *name;
    if (const auto description = request::opt_string(tool, "description", path)) fn["description"] = *description;
    if (const Json* schema = request::opt_object(tool, "input_schema", path)) fn["parameters"] = *schema;
    Json wrapped = Json::object();
    wrapped["type"] = "function";
    wrapped["function"] = std::move(fn);
    out.push_back(std::move(wrapped));
  }
  return out;
}

// tool_choice: {type: auto | none | any | tool (+ name)}.
void parse_tool_choice(const Json& body, ChatRequest& r) {
  const Json* choice = request::member(body, "tool_choice");
  if (!choice || choice->is_null()) return;
  if (!choice->is_object()) request::type_error("tool_choice", "an object");
  const std::string type = request::opt_string(*choice, "type", "tool_choice.type").value_or("auto");
  if (type == "none") {
    r.tools = nullptr;
  } else if (type == "any") {
    r.tool_required = true;
  } else if (type == "tool") {
    const auto name = request::opt_string(*choice, "name", "tool_choice.name");
    if (!name) request::type_error("tool_choice.name", "a string");
    r.tool_required = true;
    r.forced_tool = *name;
  } else if (type != "auto") {
    request::fail("tool_choice.type: expected auto, none, any or tool, not \"" + type + "\"");
  }
  request::check_forced_tool(r);
}

}  // namespace

ChatRequest parse_messages_request(std::string_view body_text) {
  return request::guarded([&] {
    const Json body = request::parse_body(body_text);
    ChatRequest r;
    r.api = Api::Messages;
    request::parse_model(body, r);
    const Json* messages = request::member(body, "messages");
    if (!messages) request::fail("missing messages");
    if (!messages->is_array()) request::type_error("messages", "an array of messages");
    // Both real APIs refuse an empty conversation with a 400; so do we.
    if (messages->empty()) request::fail("messages: at least one message is required");

    if (const Json* system = request::member(body, "system")) {
      const std::string text = system_text(*system);
      if (!text.empty()) r.messages.push_back(request::message("system", text));
    }
    std::vector<std::string> last_result_ids;
    for (size_t i = 0; i < messages->size(); ++i) {
      const Json& m = (*messages)[i];
      const std::string where = request::index_path("messages", i);
      if (!m.is_object()) request::type_error(where, "an object");
      const std::string role = request::opt_string(m, "role", where).value_or("user");
      const Json* content = find(m, "content");
      const std::string content_where = where + ".content";
      if (role == "assistant") {
        AssistantParts parts = assistant_parts(content, content_where);
        if (i + 1 == messages->size() && parts.tool_calls.empty()) {
          r.response_prefix = parts.text;  // prefill: the reply continues it
          continue;
        }
        Json msg = request::message("assistant", parts.text);
        if (parts.reasoning) msg["reasoning_content"] = *parts.reasoning;
        if (!parts.tool_calls.empty()) msg["tool_calls"] = std::move(parts.tool_calls);
        r.messages.push_back(std::move(msg));
        last_result_ids.clear();
        continue;
      }
      const auto known = request::known_role(role);
      Json ignored = Json::array();
      std::vector<std::string> ids = append_user_side(content, known.value_or(role), content_where,
                                                      known ? r.messages : ignored);
      last_result_ids = known ? std::move(ids) : std::vector<std::string>{};
    }
    r.trailing_tool_result_ids = std::move(last_result_ids);

    r.tools = anthropic_tools(body);
    parse_tool_choice(body, r);
    r.max_tokens = request::opt_max_tokens(body, "max_tokens");
    request::parse_sampling(body, {.min_p = false, .top_k = true, .seed = false}, r);
    r.stream = request::opt_bool(body, "stream", "").value_or(false);
    if (const Json* stop = find(body, "stop_sequences")) r.stop = request::parse_stop(*stop, "stop_sequences");

    request::ThinkingControl control;
    if (const Json* t = find(body, "thinking")) control.enabled = request::parse_thinking_flag(*t, "thinking");
    if (const Json* config = request::opt_object(body, "output_config", "")) {
      if (const Json* e = find(*config, "effort")) control.effort = request::parse_effort(*e, "output_config.effort");
    }
    if (const Json* e = find(body, "reasoning_effort"); e && !e->is_null()) {
      control.effort = request::parse_effort(*e, "reasoning_effort");
    }
    r.thinking = control.resolve();
    return r;
  });
}

}  // namespace ds4::server
