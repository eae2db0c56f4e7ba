// Anthropic Messages replies: the named-event SSE sequence (PROTOCOL.md §5.7)
// and the non-streaming message body (§5.5).
#include <algorithm>

#include "server/reply.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

namespace {

const char* stop_reason(FinishReason finish) {
  switch (finish) {
    case FinishReason::ToolCalls:
      return "tool_use";
    case FinishReason::Length:
      return "max_tokens";
    case FinishReason::Stop:
    case FinishReason::Error:
      break;
  }
  return "end_turn";
}

class MessagesStream final : public ReplyStream {
 public:
  MessagesStream(const ChatRequest& request, const ReplyIds& ids) : model_(request.model), ids_(ids) {}

  std::string begin() override {
    Usage prompt = ids_.prompt_usage;
    prompt.completion_tokens = 0;
    Json message{{"id", ids_.id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", model_},
                 {"content", Json::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", anthropic_usage(prompt)}};
    return sse_event("message_start", Json{{"type", "message_start"}, {"message", std::move(message)}});
  }

  std::string reasoning(std::string_view delta) override {
    if (delta.empty()) return {};
    std::string out;
    if (open_ != Block::Thinking) {
      out += close_block();
      out += open_block(Block::Thinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    }
    out += block_delta(Json{{"type", "thinking_delta"}, {"thinking", delta}});
    return out;
  }

  std::string content(std::string_view delta) override {
    if (delta.empty()) return {};
    std::string out;
    if (open_ != Block::Text) {
      out += close_block();
      out += open_block(Block::Text, Json{{"type", "text"}, {"text", ""}});
      text_blocks_++;
    }
    out += block_delta(Json{{"type", "text_delta"}, {"text", delta}});
    return out;
  }

  std::string tool_call_begin(int index, const std::string& id, const std::string& name) override {
    live_calls_ = std::max(live_calls_, index + 1);
    tool_index_ = index;
    std::string out = close_block();
    out += open_block(Block::Tool, Json{{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", Json::object()}});
    tool_blocks_++;
    return out;
  }

  std::string tool_call_arguments(int index, std::string_view fragment) override {
    if (fragment.empty() || open_ != Block::Tool || index != tool_index_) return {};
    return block_delta(Json{{"type", "input_json_delta"}, {"partial_json", fragment}});
  }

  // The announced block ends here; the malformed block's text follows as a new text block.
  std::string tool_block_abort() override { return close_block(); }

  std::string raw(std::string_view) override { return {}; }

  std::string finish(const Reply& reply) override {
    std::string out = close_block();
    // Calls the live projection never announced: whole tool_use blocks.
    for (size_t i = static_cast<size_t>(live_calls_); i < reply.tool_calls.size(); ++i) {
      const ReplyToolCall& call = reply.tool_calls[i];
      out += open_block(Block::Tool,
                        Json{{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", Json::object()}});
      out +=
          block_delta(Json{{"type", "input_json_delta"}, {"partial_json", arguments_object_text(call.arguments_json)}});
      out += close_block();
      tool_blocks_++;
    }
    live_calls_ = std::max(live_calls_, static_cast<int>(reply.tool_calls.size()));
    // Like the body: a reply without text or tool_use carries one empty text block.
    if (text_blocks_ == 0 && tool_blocks_ == 0) {
      out += open_block(Block::Text, Json{{"type", "text"}, {"text", ""}});
      out += close_block();
    }
    Json delta{{"stop_reason", stop_reason(reply.finish)}, {"stop_sequence", nullptr}};
    out += sse_event("message_delta", Json{{"type", "message_delta"},
                                           {"delta", std::move(delta)},
                                           {"usage", {{"output_tokens", reply.usage.completion_tokens}}}});
    out += sse_event("message_stop", Json{{"type", "message_stop"}});
    return out;
  }

  std::string error(std::string_view message) override { return sse_error_event(Api::Messages, message); }

 private:
  enum class Block { None, Thinking, Text, Tool };

  std::string open_block(Block kind, Json content_block) {
    open_ = kind;
    return sse_event(
        "content_block_start",
        Json{{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(content_block)}});
  }

  std::string block_delta(Json delta) const {
    return sse_event("content_block_delta",
                     Json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
  }

  // Ends the open block; a thinking block first gets its signature (the message id).
  std::string close_block() {
    if (open_ == Block::None) return {};
    std::string out;
    if (open_ == Block::Thinking) out += block_delta(Json{{"type", "signature_delta"}, {"signature", ids_.id}});
    out += sse_event("content_block_stop", Json{{"type", "content_block_stop"}, {"index", index_}});
    open_ = Block::None;
    index_++;
    return out;
  }

  std::string model_;
  ReplyIds ids_;
  Block open_ = Block::None;
  int index_ = 0;        // index of the open block, or of the next one
  int text_blocks_ = 0;  // text blocks opened by content()
  int tool_blocks_ = 0;
  int live_calls_ = 0;   // tool calls whose block went out live
  int tool_index_ = -1;  // call index of the open tool_use block
};

}  // namespace

std::unique_ptr<ReplyStream> make_messages_stream(const ChatRequest& request, const ReplyIds& ids) {
  return std::make_unique<MessagesStream>(request, ids);
}

Json messages_body(const ChatRequest& request, const ReplyIds& ids, const Reply& reply) {
  Json content = Json::array();
  if (!reply.reasoning.empty()) {
    content.push_back(Json{{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ids.id}});
  }
  if (!reply.content.empty()) content.push_back(Json{{"type", "text"}, {"text", reply.content}});
  for (const ReplyToolCall& call : reply.tool_calls) {
    content.push_back(Json{
        {"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", arguments_object(call.arguments_json)}});
  }
  // Nothing non-empty, or thinking alone: one empty text block.
  if (reply.content.empty() && reply.tool_calls.empty()) content.push_back(Json{{"type", "text"}, {"text", ""}});
  return Json{{"id", ids.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", request.model},
              {"content", std::move(content)},
              {"stop_reason", stop_reason(reply.finish)},
              {"stop_sequence", nullptr},
              {"usage", anthropic_usage(reply.usage)}};
}

}  // namespace ds4::server
