// OpenAI chat completions and legacy completions replies: the SSE chunk
// sequences (PROTOCOL.md §5.7) and the non-streaming bodies (§5.5).
#include <algorithm>

#include "server/reply.h"

namespace ds4::server {

using Json = nlohmann::ordered_json;

namespace {

// The end of an OpenAI stream: the usage chunk (stream_options.include_usage)
// and [DONE].
std::string stream_end(const char* object, const ReplyIds& ids, const std::string& model, bool include_usage,
                       const Usage& usage) {
  std::string out;
  if (include_usage) {
    out = sse_data(Json{{"id", ids.id},
                        {"object", object},
                        {"created", ids.created},
                        {"model", model},
                        {"choices", Json::array()},
                        {"usage", openai_usage(usage)}});
  }
  return out + "data: [DONE]\n\n";
}

Json full_tool_call(const ReplyToolCall& call) {
  return Json{{"id", call.id},
              {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", arguments_object_text(call.arguments_json)}}}};
}

class ChatCompletionsStream final : public ReplyStream {
 public:
  ChatCompletionsStream(const ChatRequest& request, const ReplyIds& ids)
      : model_(request.model), include_usage_(request.include_usage), ids_(ids) {}

  std::string begin() override { return chunk(Json{{"role", "assistant"}}); }

  std::string reasoning(std::string_view delta) override {
    if (delta.empty()) return {};
    return chunk(Json{{"reasoning_content", delta}});
  }

  std::string content(std::string_view delta) override {
    if (delta.empty()) return {};
    return chunk(Json{{"content", delta}});
  }

  std::string tool_call_begin(int index, const std::string& id, const std::string& name) override {
    live_calls_ = std::max(live_calls_, index + 1);
    Json call{{"index", index}, {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", ""}}}};
    return chunk(Json{{"tool_calls", Json::array({std::move(call)})}});
  }

  std::string tool_call_arguments(int index, std::string_view fragment) override {
    if (fragment.empty()) return {};
    Json call{{"index", index}, {"function", {{"arguments", fragment}}}};
    return chunk(Json{{"tool_calls", Json::array({std::move(call)})}});
  }

  // Deltas already sent cannot be taken back; the block's text follows as content.
  std::string tool_block_abort() override { return {}; }

  std::string raw(std::string_view) override { return {}; }

  std::string finish(const Reply& reply) override {
    std::string out;
    // Calls the live projection never announced go out whole, in one delta.
    const int total = static_cast<int>(reply.tool_calls.size());
    if (total > live_calls_) {
      Json calls = Json::array();
      for (int i = live_calls_; i < total; ++i) {
        const ReplyToolCall& call = reply.tool_calls[i];
        calls.push_back(
            Json{{"index", i},
                 {"id", call.id},
                 {"type", "function"},
                 {"function", {{"name", call.name}, {"arguments", arguments_object_text(call.arguments_json)}}}});
      }
      out += chunk(Json{{"tool_calls", std::move(calls)}});
      live_calls_ = total;
    }
    out += chunk(Json::object(), finish_reason_name(reply.finish));
    return out + stream_end("chat.completion.chunk", ids_, model_, include_usage_, reply.usage);
  }

  std::string error(std::string_view message) override { return sse_error_event(Api::ChatCompletions, message); }

 private:
  std::string chunk(Json delta, const char* finish_reason = nullptr) const {
    Json choice{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", nullptr}};
    if (finish_reason) choice["finish_reason"] = finish_reason;
    return sse_data(Json{{"id", ids_.id},
                         {"object", "chat.completion.chunk"},
                         {"created", ids_.created},
                         {"model", model_},
                         {"choices", Json::array({std::move(choice)})}});
  }

  std::string model_;
  bool include_usage_;
  ReplyIds ids_;
  int live_calls_ = 0;  // tool calls whose header went out live
};

class CompletionsStream final : public ReplyStream {
 public:
  CompletionsStream(const ChatRequest& request, const ReplyIds& ids)
      : model_(request.model), include_usage_(request.include_usage), ids_(ids) {}

  std::string begin() override { return {}; }
  std::string reasoning(std::string_view) override { return {}; }
  std::string content(std::string_view) override { return {}; }
  std::string tool_call_begin(int, const std::string&, const std::string&) override { return {}; }
  std::string tool_call_arguments(int, std::string_view) override { return {}; }
  std::string tool_block_abort() override { return {}; }

  // Completions stream the raw generated text, reasoning included.
  std::string raw(std::string_view delta) override {
    if (delta.empty()) return {};
    return chunk(delta, nullptr);
  }

  std::string finish(const Reply& reply) override {
    std::string out = chunk("", finish_reason_name(reply.finish));
    return out + stream_end("text_completion", ids_, model_, include_usage_, reply.usage);
  }

  std::string error(std::string_view message) override { return sse_error_event(Api::Completions, message); }

 private:
  std::string chunk(std::string_view text, const char* finish_reason) const {
    Json choice{{"text", text}, {"index", 0}, {"finish_reason", nullptr}};
    if (finish_reason) choice["finish_reason"] = finish_reason;
    return sse_data(Json{{"id", ids_.id},
                         {"object", "text_completion"},
                         {"created", ids_.created},
                         {"model", model_},
                         {"choices", Json::array({std::move(choice)})}});
  }

  std::string model_;
  bool include_usage_;
  ReplyIds ids_;
};

}  // namespace

std::unique_ptr<ReplyStream> make_chat_completions_stream(const ChatRequest& request, const ReplyIds& ids) {
  return std::make_unique<ChatCompletionsStream>(request, ids);
}

std::unique_ptr<ReplyStream> make_completions_stream(const ChatRequest& request, const ReplyIds& ids) {
  return std::make_unique<CompletionsStream>(request, ids);
}

Json chat_completions_body(const ChatRequest& request, const ReplyIds& ids, const Reply& reply) {
  Json message{{"role", "assistant"}, {"content", reply.content}};
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  if (!reply.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ReplyToolCall& call : reply.tool_calls) calls.push_back(full_tool_call(call));
    message["tool_calls"] = std::move(calls);
  }
  Json choice{{"index", 0}, {"message", std::move(message)}, {"finish_reason", finish_reason_name(reply.finish)}};
  return Json{{"id", ids.id},
              {"object", "chat.completion"},
              {"created", ids.created},
              {"model", request.model},
              {"choices", Json::array({std::move(choice)})},
              {"usage", openai_usage(reply.usage)}};
}

Json completions_body(const ChatRequest& request, const ReplyIds& ids, const Reply& reply) {
  Json choice{{"text", reply.raw_text}, {"index", 0}, {"finish_reason", finish_reason_name(reply.finish)}};
  return Json{{"id", ids.id},
              {"object", "text_completion"},
              {"created", ids.created},
              {"model", request.model},
              {"choices", Json::array({std::move(choice)})},
              {"usage", openai_usage(reply.usage)}};
}

}  // namespace ds4::server
