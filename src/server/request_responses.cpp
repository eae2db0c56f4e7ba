// OpenAI Responses requests → ChatRequest (PROTOCOL.md §5.3, §5.4, §2.4):
// input items become OpenAI-form messages (calls merged into the assistant
// message before them, reasoning attached to the next assistant turn, outputs
// role "tool"), Responses tools become function tools with the wire name each
// prompt name maps back to.
#include <string>
#include <vector>

#include "server/chat_request.h"
#include "server/request_common.h"

namespace ds4::server {

using request::Json;
using request::find;

namespace {

bool is_text_block_type(const std::string& type) {
  return type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" ||
         type == "reasoning_text";
}

// The texts of a Responses content value: a string, null, or an array of
// strings / text blocks. Anything else is refused rather than silently lost.
std::vector<std::string> text_pieces(const Json* value, const std::string& where) {
  std::vector<std::string> pieces;
  if (!value || value->is_null()) return pieces;
  if (value->is_string()) {
    pieces.push_back(value->get<std::string>());
    return pieces;
  }
  if (!value->is_array()) request::type_error(where, "a string, an array of text content blocks or null");
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& block = (*value)[i];
    const std::string path = request::index_path(where, i);
    if (block.is_string()) {
      pieces.push_back(block.get<std::string>());
      continue;
    }
    if (!block.is_object()) request::type_error(path, "a string or a text content block");
    const auto type = request::opt_string(block, "type", path);
    if (!type) request::type_error(path + ".type", "a string");
    if (!is_text_block_type(*type)) {
      request::fail(path + ": unsupported content type '" + *type + "' (only text content is supported)");
    }
    const Json* text = find(block, "text");
    if (!text) request::type_error(path + ".text", "a string");
    if (!text->is_null() && !text->is_string()) request::type_error(path + ".text", "a string");
    pieces.push_back(text->is_string() ? text->get<std::string>() : std::string());
  }
  return pieces;
}

std::string content_text(const Json* value, const std::string& where) {
  std::string out;
  for (const std::string& piece : text_pieces(value, where)) out += piece;
  return out;
}

bool is_hosted_call(const std::string& type) {
  return type == "local_shell_call" || type == "web_search_call" || type == "tool_search_call" ||
         type == "image_generation_call";
}

bool is_output_item(const std::string& type) {
  return type == "function_call_output" || type == "custom_tool_call_output" || type == "local_shell_call_output" ||
         type == "web_search_call_output" || type == "tool_search_output" || type == "tool_search_call_output" ||
         type == "image_generation_call_output";
}

Json empty_object_schema() {
  Json schema = Json::object();
  schema["type"] = "object";
  schema["properties"] = Json::object();
  return schema;
}

Json function_tool(Json fn) {
  Json tool = Json::object();
  tool["type"] = "function";
  tool["function"] = std::move(fn);
  return tool;
}

std::string required_name(const Json& obj, const std::string& where) {
  const auto name = request::opt_string(obj, "name", where);
  if (!name) request::type_error(where + ".name", "a string");
  return *name;
}

// Responses tools → OpenAI function tools appended to `out`, with their wire
// names. Hosted tools the model cannot call through DSML (web_search,
// file_search, …) are skipped.
void append_tools(const Json& tools, const std::string& where, Json& out,
                  std::map<std::string, ToolWireName>& wire_names) {
  if (!tools.is_array()) request::type_error(where, "an array of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string path = request::index_path(where, i);
    if (!tool.is_object()) request::type_error(path, "an object");
    const std::string type = request::opt_string(tool, "type", path).value_or("function");
    if (type == "function") {
      if (const Json* fn = request::opt_object(tool, "function", path)) {  // chat completions form
        const std::string name = required_name(*fn, path + ".function");
        out.push_back(tool);
        wire_names[name] = {name, "", ToolWireName::Kind::Function};
        continue;
      }
      const std::string name = required_name(tool, path);
      Json fn = Json::object();
      fn["name"] = name;
      if (const auto d = request::opt_string(tool, "description", path)) fn["description"] = *d;
      if (const Json* p = request::opt_object(tool, "parameters", path)) fn["parameters"] = *p;
      out.push_back(function_tool(std::move(fn)));
      wire_names[name] = {name, "", ToolWireName::Kind::Function};
    } else if (type == "namespace") {
      // Each inner function is offered under the prompt name namespace+name
      // (joined without separator, as ds4 does) and answered with both parts.
      const std::string space = required_name(tool, path);
      const Json* inner = request::opt_array(tool, "tools", path);
      if (!inner) continue;
      for (size_t j = 0; j < inner->size(); ++j) {
        const Json& t = (*inner)[j];
        const std::string inner_path = request::index_path(path + ".tools", j);
        if (!t.is_object()) request::type_error(inner_path, "an object");
        if (request::opt_string(t, "type", inner_path).value_or("function") != "function") continue;
        const std::string name = required_name(t, inner_path);
        Json fn = Json::object();
        fn["name"] = space + name;
        fn["description"] = request::opt_string(t, "description", inner_path).value_or("");
        const Json* params = request::opt_object(t, "parameters", inner_path);
        if (!params) params = request::opt_object(t, "input_schema", inner_path);
        fn["parameters"] = params ? *params : empty_object_schema();
        out.push_back(function_tool(std::move(fn)));
        wire_names[space + name] = {name, space, ToolWireName::Kind::Function};
      }
    } else if (type == "custom") {
      // Free-form tools: one string parameter "input" carries the text; the
      // format (grammar) stays in the schema for the model to follow.
      const std::string name = required_name(tool, path);
      Json fn = Json::object();
      fn["name"] = name;
      if (const auto d = request::opt_string(tool, "description", path)) fn["description"] = *d;
      Json params = Json::object();
      params["type"] = "object";
      params["properties"] = Json::object();
      params["properties"]["input"] = Json::object();
      params["properties"]["input"]["type"] = "string";
      params["required"] = Json::array({"input"});
      fn["parameters"] = std::move(params);
      if (const Json* format = request::member(tool, "format")) fn["format"] = *format;
      out.push_back(function_tool(std::move(fn)));
      wire_names[name] = {name, "", ToolWireName::Kind::Custom};
    } else if (type == "tool_search") {
      Json fn = Json::object();
      fn["name"] = "tool_search";
      fn["description"] = request::opt_string(tool, "description", path).value_or("Search available tools.");
      const Json* params = request::opt_object(tool, "parameters", path);
      fn["parameters"] = params ? *params : empty_object_schema();
      out.push_back(function_tool(std::move(fn)));
      wire_names["tool_search"] = {"tool_search", "", ToolWireName::Kind::ToolSearch};
    }
  }
}

// Arguments of a replayed call: a JSON object text or an object.
std::string call_arguments(const Json& item, const std::string& type, const std::string& where) {
  if (type == "custom_tool_call") {
    // The free text becomes the "input" parameter of the custom tool's schema.
    Json args = Json::object();
    args["input"] = request::opt_string(item, "input", where).value_or("");
    return args.dump();
  }
  // Hosted calls describe what ran in `action`; function calls send `arguments`.
  for (const char* key : {"action", "arguments", "input"}) {
    if (std::string_view(key) == "action" && !is_hosted_call(type)) continue;
    if (const Json* v = request::member(item, key)) {
      return request::arguments_text(*v, request::field_path(where, key));
    }
  }
  return "{}";
}

std::string hosted_call_name(const std::string& type) {
  if (type == "tool_search_call") return "tool_search";
  if (type == "local_shell_call") return "local_shell";
  return type;
}

// The text of a tool output item: output (string or text blocks; other JSON as
// compact text), else result, else the tools list of a tool_search_output.
std::string output_text(const Json& item, const std::string& where) {
  for (const char* key : {"output", "result", "tools"}) {
    const Json* v = request::member(item, key);
    if (!v) continue;
    if (v->is_string() || (v->is_array() && std::string_view(key) == "output")) {
      return content_text(v, request::field_path(where, key));
    }
    return v->dump();
  }
  return {};
}

class InputBuilder {
 public:
  InputBuilder(ChatRequest& r, Json& tools) : r_(r), tools_(tools) {}

  void add(const Json& item, const std::string& where) {
    if (!item.is_object()) request::type_error(where, "an object");
    const std::string type = request::opt_string(item, "type", where).value_or("message");
    if (const auto status = request::opt_string(item, "status", where); status && !status->empty() &&
                                                                         *status != "completed") {
      request::fail(where + ".status: only completed items can be replayed (got '" + *status + "')");
    }
    const std::string role = request::opt_string(item, "role", where).value_or("user");
    const bool bookkeeping = type == "compaction" || type == "context_compaction";
    const bool consumes_reasoning = (type == "message" && role == "assistant") || type == "function_call" ||
                                    type == "custom_tool_call" || is_hosted_call(type);
    if (!bookkeeping && !consumes_reasoning && type != "reasoning") flush_reasoning();
    if (!bookkeeping && !is_output_item(type)) trailing_ids_.clear();

    if (type == "message") {
      const auto known = request::known_role(role);
      if (!known) request::fail(where + ".role: unsupported role '" + role + "'");
      Json msg = request::message(*known, content_text(find(item, "content"), where + ".content"));
      if (*known == "assistant" && reasoning_) {
        msg["reasoning_content"] = *reasoning_;
        reasoning_.reset();
      }
      r_.messages.push_back(std::move(msg));
    } else if (type == "function_call" || type == "custom_tool_call" || is_hosted_call(type)) {
      std::string name;
      if (is_hosted_call(type)) {
        name = hosted_call_name(type);
      } else {
        name = request::opt_string(item, "name", where).value_or("");
        const std::string space = request::opt_string(item, "namespace", where).value_or("");
        if (type == "function_call" && !space.empty() && !name.empty()) name = space + name;
      }
      add_call(request::tool_call(call_id(item, where), name, call_arguments(item, type, where)));
    } else if (is_output_item(type)) {
      if (type == "tool_search_output") {
        if (const Json* tools = request::member(item, "tools")) {
          append_tools(*tools, where + ".tools", tools_, r_.tool_wire_names);
        }
      }
      const std::string id = call_id(item, where);
      Json msg = request::message("tool", output_text(item, where));
      msg["tool_call_id"] = id;
      r_.messages.push_back(std::move(msg));
      if (!id.empty()) trailing_ids_.push_back(id);
    } else if (type == "reasoning") {
      std::vector<std::string> pieces = text_pieces(request::opt_array(item, "summary", where), where + ".summary");
      for (auto& piece : text_pieces(request::opt_array(item, "content", where), where + ".content")) {
        pieces.push_back(std::move(piece));
      }
      for (const std::string& piece : pieces) {
        if (piece.empty()) continue;
        reasoning_ = reasoning_ ? *reasoning_ + "\n" + piece : piece;
      }
    } else if (!bookkeeping) {
      request::fail(where + ".type: unsupported item type '" + type + "'");
    }
  }

  // Reasoning left at the end still belongs to the transcript: an empty
  // assistant turn carries it.
  void finish() {
    flush_reasoning();
    r_.trailing_tool_result_ids = trailing_ids_;
  }

 private:
  static std::string call_id(const Json& item, const std::string& where) {
    if (const auto id = request::opt_string(item, "call_id", where)) return *id;
    return request::opt_string(item, "id", where).value_or("");
  }

  // Reasoning pending before an item that is not an assistant turn keeps its
  // place as an empty assistant message.
  void flush_reasoning() {
    if (!reasoning_) return;
    Json msg = request::message("assistant", "");
    msg["reasoning_content"] = *reasoning_;
    reasoning_.reset();
    r_.messages.push_back(std::move(msg));
  }

  // A call joins the assistant message right before it (Responses splits one
  // turn into message and call items); otherwise it opens an assistant turn.
  void add_call(Json call) {
    Json* last = r_.messages.empty() ? nullptr : &r_.messages.back();
    const bool joins = last && (*last)["role"] == "assistant" && !(reasoning_ && last->contains("reasoning_content"));
    if (joins) {
      if (reasoning_) (*last)["reasoning_content"] = *reasoning_;
      if (!last->contains("tool_calls")) (*last)["tool_calls"] = Json::array();
      (*last)["tool_calls"].push_back(std::move(call));
    } else {
      Json msg = request::message("assistant", "");
      if (reasoning_) msg["reasoning_content"] = *reasoning_;
      msg["tool_calls"] = Json::array({std::move(call)});
      r_.messages.push_back(std::move(msg));
    }
    reasoning_.reset();
  }

  ChatRequest& r_;
  Json& tools_;
  std::optional<std::string> reasoning_;
  std::vector<std::string> trailing_ids_;
};

}  // namespace

ChatRequest parse_responses_request(std::string_view body_text) {
  return request::guarded([&] {
    const Json body = request::parse_body(body_text);
    ChatRequest r;
    r.api = Api::Responses;
    request::parse_model(body, r);
    for (const char* key : {"previous_response_id", "conversation"}) {
      if (request::member(body, key)) request::fail(std::string(key) + " is not supported; replay full input instead");
    }
    const Json* input = request::member(body, "input");
    if (!input) request::fail("missing input");

    const auto instructions = request::opt_string(body, "instructions", "");
    if (instructions && !instructions->empty()) r.messages.push_back(request::message("system", *instructions));
    Json tools = Json::array();
    if (const Json* t = request::member(body, "tools")) append_tools(*t, "tools", tools, r.tool_wire_names);

    if (input->is_string()) {
      r.messages.push_back(request::message("user", input->get<std::string>()));
    } else if (input->is_array()) {
      InputBuilder builder(r, tools);
      for (size_t i = 0; i < input->size(); ++i) builder.add((*input)[i], request::index_path("input", i));
      builder.finish();
    } else {
      request::type_error("input", "a string or an array of items");
    }

    bool tools_off = false;
    if (const Json* choice = request::member(body, "tool_choice"); choice && !choice->is_null()) {
      if (choice->is_object()) {
        // {type:"function", name, [namespace]}: a call of that function.
        const std::string type = request::opt_string(*choice, "type", "tool_choice.type").value_or("");
        if (type != "function") request::fail("forced tool_choice of type '" + type + "' not supported");
        const auto name = request::opt_string(*choice, "name", "tool_choice.name");
        if (!name) request::type_error("tool_choice.name", "a string");
        r.tool_required = true;
        r.forced_tool = request::opt_string(*choice, "namespace", "tool_choice.namespace").value_or("") + *name;
      } else if (choice->is_string()) {
        const std::string& c = choice->get_ref<const std::string&>();
        if (c == "none") tools_off = true;
        else if (c == "required") r.tool_required = true;
        else if (c != "auto") request::fail("tool_choice=" + c + " not supported");
      } else {
        request::type_error("tool_choice", "\"none\", \"auto\", \"required\" or a function");
      }
    }
    r.tools = tools.empty() || tools_off ? Json(nullptr) : std::move(tools);
    if (tools_off) r.tool_required = false;
    request::check_forced_tool(r);

    r.max_tokens = request::opt_max_tokens(body, "max_tokens");
    if (const auto n = request::opt_max_tokens(body, "max_output_tokens")) r.max_tokens = n;
    request::parse_sampling(body, {}, r);
    r.stream = request::opt_bool(body, "stream", "").value_or(false);
    if (const Json* reasoning = request::opt_object(body, "reasoning", "")) {
      // Only a non-null effort is an explicit thinking control (PROTOCOL.md §5.4).
      if (const Json* e = find(*reasoning, "effort")) r.thinking = request::parse_effort(*e, "reasoning.effort");
      if (const auto summary = request::opt_string(*reasoning, "summary", "reasoning")) {
        r.reasoning_summary = *summary == "auto" || *summary == "concise" || *summary == "detailed";
      }
    }
    return r;
  });
}

}  // namespace ds4::server
