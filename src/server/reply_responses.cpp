// OpenAI Responses replies (Codex): the typed event stream with a sequence
// number on every event (PROTOCOL.md §5.7) and the response object (§5.5).
// Reasoning is shown only when the request opted in with reasoning.summary;
// tool calls go out whole at the end, named as the client named them.
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "server/reply.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

namespace {

// Status of the message and call items: cut short by length or an error, or done.
const char* item_status(FinishReason finish) {
  return finish == FinishReason::Length || finish == FinishReason::Error ? "incomplete" : "completed";
}

const char* response_status(FinishReason finish) {
  if (finish == FinishReason::Length) return "incomplete";
  if (finish == FinishReason::Error) return "failed";
  return "completed";
}

const char* terminal_event(FinishReason finish) {
  if (finish == FinishReason::Length) return "response.incomplete";
  if (finish == FinishReason::Error) return "response.failed";
  return "response.completed";
}

using WireNames = std::map<std::string, ToolWireName>;

ToolWireName wire_name(const WireNames& names, const std::string& prompt_name) {
  const auto found = names.find(prompt_name);
  if (found != names.end()) return found->second;
  return ToolWireName{prompt_name, "", ToolWireName::Kind::Function};
}

// A custom (freeform) tool takes one string: the prompt renders it as a
// function with an `input` string parameter, so that string is the input;
// anything else goes back as the arguments text.
std::string custom_input(const std::string& arguments_json) {
  const Json args = arguments_object(arguments_json);
  const auto input = args.find("input");
  if (args.size() == 1 && input != args.end() && input->is_string()) return input->get<std::string>();
  return arguments_json;
}

// One tool call as an output item. `with_arguments` false gives the
// in_progress shape of output_item.added (empty arguments/input).
Json call_item(const WireNames& names, const ReplyToolCall& call, const std::string& item_id, const char* status,
               bool with_arguments) {
  const ToolWireName wire = wire_name(names, call.name);
  if (wire.kind == ToolWireName::Kind::ToolSearch) {
    return Json{{"id", item_id},
                {"type", "tool_search_call"},
                {"status", status},
                {"call_id", call.id},
                {"execution", "client"},
                {"arguments", with_arguments ? arguments_object(call.arguments_json) : Json::object()}};
  }
  const bool custom = wire.kind == ToolWireName::Kind::Custom;
  Json item{{"id", item_id}, {"type", custom ? "custom_tool_call" : "function_call"}, {"status", status}};
  item["name"] = wire.name;
  if (!wire.space.empty()) item["namespace"] = wire.space;
  item["call_id"] = call.id;
  if (custom) {
    item["input"] = with_arguments ? custom_input(call.arguments_json) : std::string();
  } else {
    item["arguments"] = with_arguments ? arguments_object_text(call.arguments_json) : std::string();
  }
  return item;
}

Json reasoning_item(const std::string& id, const char* status, const std::string& text) {
  Json summary = Json::array();
  if (!text.empty()) summary.push_back(Json{{"type", "summary_text"}, {"text", text}});
  return Json{{"id", id}, {"type", "reasoning"}, {"status", status}, {"summary", std::move(summary)}};
}

Json output_text_part(const std::string& text) {
  return Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
}

Json message_item(const std::string& id, const char* status, const std::string& text) {
  Json content = Json::array();
  content.push_back(output_text_part(text));
  return Json{
      {"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

// The response object; `output` and `usage` only in the terminal form.
Json response_object(const std::string& model, const ReplyIds& ids, const char* status) {
  return Json{
      {"id", ids.id}, {"object", "response"}, {"created_at", ids.created}, {"status", status}, {"model", model}};
}

void add_terminal_fields(Json& response, FinishReason finish) {
  if (finish == FinishReason::Error) {
    response["error"] = Json{{"code", "server_error"}, {"message", "generation failed"}};
  } else if (finish == FinishReason::Length) {
    response["incomplete_details"] = Json{{"reason", "max_tokens"}};
  }
}

class ResponsesStream final : public ReplyStream {
 public:
  ResponsesStream(const ChatRequest& request, const ReplyIds& ids)
      : model_(request.model),
        reasoning_summary_(request.reasoning_summary),
        wire_names_(request.tool_wire_names),
        ids_(ids),
        reasoning_id_(random_hex_id("rs_")),
        message_id_(random_hex_id("msg_")) {}

  std::string begin() override {
    Json response = response_object(model_, ids_, "in_progress");
    response["output"] = Json::array();
    return event("response.created", Json{{"response", std::move(response)}});
  }

  std::string reasoning(std::string_view delta) override {
    if (delta.empty() || !reasoning_summary_) return {};
    std::string out;
    if (reasoning_index_ < 0) {
      reasoning_index_ = next_output_index_++;
      out += event(
          "response.output_item.added",
          Json{
              {"output_index", reasoning_index_},
              {"item",
               {{"id", reasoning_id_}, {"type", "reasoning"}, {"status", "in_progress"}, {"summary", Json::array()}}}});
      out += event("response.reasoning_summary_part.added", Json{{"item_id", reasoning_id_},
                                                                 {"output_index", reasoning_index_},
                                                                 {"summary_index", 0},
                                                                 {"part", {{"type", "summary_text"}, {"text", ""}}}});
    }
    reasoning_text_ += delta;
    out += event(
        "response.reasoning_summary_text.delta",
        Json{{"item_id", reasoning_id_}, {"output_index", reasoning_index_}, {"summary_index", 0}, {"delta", delta}});
    return out;
  }

  std::string content(std::string_view delta) override {
    if (delta.empty()) return {};
    std::string out;
    if (message_index_ < 0) {
      message_index_ = next_output_index_++;
      out += event("response.output_item.added", Json{{"output_index", message_index_},
                                                      {"item",
                                                       {{"id", message_id_},
                                                        {"type", "message"},
                                                        {"status", "in_progress"},
                                                        {"role", "assistant"},
                                                        {"content", Json::array()}}}});
      out += event("response.content_part.added", Json{{"item_id", message_id_},
                                                       {"output_index", message_index_},
                                                       {"content_index", 0},
                                                       {"part", output_text_part("")}});
    }
    message_text_ += delta;
    out +=
        event("response.output_text.delta",
              Json{{"item_id", message_id_}, {"output_index", message_index_}, {"content_index", 0}, {"delta", delta}});
    return out;
  }

  // Calls go out whole at the end (Codex reads them from output_item.done).
  std::string tool_call_begin(int, const std::string&, const std::string&) override { return {}; }
  std::string tool_call_arguments(int, std::string_view) override { return {}; }
  // The malformed block's text follows through content() as output_text.
  std::string tool_block_abort() override { return {}; }
  std::string raw(std::string_view) override { return {}; }

  std::string finish(const Reply& reply) override {
    std::string out;
    const char* status = item_status(reply.finish);
    // Terminal output in output_index order.
    std::vector<std::pair<int, Json>> output;

    if (reasoning_index_ >= 0) {
      // Reasoning cut before `</think>` is partial whatever ended the turn.
      const char* reasoning_status = reply.thinking_closed ? "completed" : "incomplete";
      out += event("response.reasoning_summary_text.done", Json{{"item_id", reasoning_id_},
                                                                {"output_index", reasoning_index_},
                                                                {"summary_index", 0},
                                                                {"text", reasoning_text_}});
      out += event("response.reasoning_summary_part.done",
                   Json{{"item_id", reasoning_id_},
                        {"output_index", reasoning_index_},
                        {"summary_index", 0},
                        {"part", {{"type", "summary_text"}, {"text", reasoning_text_}}}});
      Json item = reasoning_item(reasoning_id_, reasoning_status, reasoning_text_);
      out += event("response.output_item.done", Json{{"output_index", reasoning_index_}, {"item", item}});
      output.emplace_back(reasoning_index_, std::move(item));
    }

    if (message_index_ >= 0) {
      out += event("response.output_text.done", Json{{"item_id", message_id_},
                                                     {"output_index", message_index_},
                                                     {"content_index", 0},
                                                     {"text", message_text_}});
      out += event("response.content_part.done", Json{{"item_id", message_id_},
                                                      {"output_index", message_index_},
                                                      {"content_index", 0},
                                                      {"part", output_text_part(message_text_)}});
      Json item = message_item(message_id_, status, message_text_);
      out += event("response.output_item.done", Json{{"output_index", message_index_}, {"item", item}});
      output.emplace_back(message_index_, std::move(item));
    }

    for (const ReplyToolCall& call : reply.tool_calls) {
      const int index = next_output_index_++;
      const std::string item_id = random_hex_id("fc_");
      out +=
          event("response.output_item.added",
                Json{{"output_index", index}, {"item", call_item(wire_names_, call, item_id, "in_progress", false)}});
      Json item = call_item(wire_names_, call, item_id, status, true);
      if (item["type"] == "function_call") {
        const std::string arguments = item["arguments"].get<std::string>();
        out += event("response.function_call_arguments.delta",
                     Json{{"item_id", item_id}, {"output_index", index}, {"delta", arguments}});
        Json done{{"item_id", item_id}, {"output_index", index}, {"name", item["name"]}};
        if (item.contains("namespace")) done["namespace"] = item["namespace"];
        done["arguments"] = arguments;
        out += event("response.function_call_arguments.done", std::move(done));
      } else if (item["type"] == "custom_tool_call") {
        const std::string input = item["input"].get<std::string>();
        out += event("response.custom_tool_call_input.delta",
                     Json{{"item_id", item_id}, {"output_index", index}, {"delta", input}});
        out += event("response.custom_tool_call_input.done",
                     Json{{"item_id", item_id}, {"output_index", index}, {"input", input}});
      }
      out += event("response.output_item.done", Json{{"output_index", index}, {"item", item}});
      output.emplace_back(index, std::move(item));
    }

    std::sort(output.begin(), output.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    Json response = response_object(model_, ids_, response_status(reply.finish));
    add_terminal_fields(response, reply.finish);
    Json items = Json::array();
    for (auto& [index, item] : output) items.push_back(std::move(item));
    response["output"] = std::move(items);
    response["usage"] = responses_usage(reply.usage);
    out += event(terminal_event(reply.finish), Json{{"response", std::move(response)}});
    return out;
  }

  std::string error(std::string_view message) override { return sse_error_event(Api::Responses, message); }

 private:
  // `data:` line only; "type" first and "sequence_number" second (Codex).
  std::string event(const char* type, Json fields) {
    Json body{{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [key, value] : fields.items()) body[key] = std::move(value);
    return sse_data(body);
  }

  std::string model_;
  bool reasoning_summary_;
  WireNames wire_names_;
  ReplyIds ids_;
  std::string reasoning_id_, message_id_;
  std::string reasoning_text_, message_text_;  // what the deltas carried
  int reasoning_index_ = -1, message_index_ = -1;
  int next_output_index_ = 0;
  int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<ReplyStream> make_responses_stream(const ChatRequest& request, const ReplyIds& ids) {
  return std::make_unique<ResponsesStream>(request, ids);
}

Json responses_body(const ChatRequest& request, const ReplyIds& ids, const Reply& reply) {
  const char* status = item_status(reply.finish);
  Json output = Json::array();
  if (request.reasoning_summary && !reply.reasoning.empty()) {
    const char* reasoning_status = reply.thinking && !reply.thinking_closed ? "incomplete" : status;
    output.push_back(reasoning_item(random_hex_id("rs_"), reasoning_status, reply.reasoning));
  }
  if (!reply.content.empty()) output.push_back(message_item(random_hex_id("msg_"), status, reply.content));
  for (const ReplyToolCall& call : reply.tool_calls) {
    output.push_back(call_item(request.tool_wire_names, call, random_hex_id("fc_"), status, true));
  }
  Json response = response_object(request.model, ids, response_status(reply.finish));
  add_terminal_fields(response, reply.finish);
  response["output"] = std::move(output);
  response["usage"] = responses_usage(reply.usage);
  return response;
}

}  // namespace ds4::server
