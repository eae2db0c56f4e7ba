#include "server/reply_assembler.h"

#include "runtime/generate.h"

namespace ds4::server {

namespace {

std::string strip_head(std::string s, const std::string& head) {
  return s.compare(0, head.size(), head) == 0 ? s.substr(head.size()) : s;
}

}  // namespace

ReplyAssembler::ReplyAssembler(const ChatRequest& request, bool tools_active, bool thinking, ReplyStream* stream,
                               ReplyChannel& channel, ToolMemory& tools, std::string* trace)
    : request_(request),
      thinking_(thinking),
      stream_(stream),
      channel_(channel),
      tools_(tools),
      trace_(trace),
      parser_(text::DsmlOptions{thinking, tools_active, false}) {}

std::string ReplyAssembler::new_call_id() const {
  const bool anthropic = request_.api == Api::Messages;
  std::string id;
  do {
    id = random_hex_id(anthropic ? "toolu_" : "call_", 16);
  } while (tools_.contains(id));
  return id;
}

void ReplyAssembler::deliver(const std::vector<text::DsmlEvent>& events, bool from_prefix) {
  for (const auto& ev : events) {
    using K = text::DsmlEvent::Kind;
    std::string out;
    switch (ev.kind) {
      case K::ReasoningDelta:
        if (from_prefix) prefix_reasoning_ += ev.text;
        else if (stream_) out = stream_->reasoning(reasoning_utf8_.feed(ev.text));
        break;
      case K::ContentDelta:
        if (from_prefix) prefix_content_ += ev.text;
        else if (stream_) {
          out = end_reasoning();  // first: the projection keeps the order of its calls
          out += stream_->content(content_utf8_.feed(ev.text));
        }
        break;
      case K::ToolCallBegin:
        in_block_ = true;
        while (static_cast<int>(call_ids_.size()) <= ev.index) call_ids_.push_back(new_call_id());
        if (stream_) {
          out = end_reasoning();
          // Text before the call ends here too (its held-back bytes before the tool_use block).
          if (std::string t = content_utf8_.finish(); !t.empty()) out += stream_->content(t);
          out += stream_->tool_call_begin(ev.index, call_ids_[static_cast<size_t>(ev.index)], ev.text);
        }
        break;
      case K::ToolArgumentsDelta:
        if (stream_) out = stream_->tool_call_arguments(ev.index, ev.text);
        break;
      case K::ToolCallEnd: break;
      case K::ToolBlockEnd: in_block_ = false; break;
      case K::ToolBlockAbort:
        in_block_ = false;
        call_ids_.clear();
        if (stream_) out = stream_->tool_block_abort();
        break;
      case K::Warning:
        if (trace_) *trace_ += "--- trace: " + ev.text + " ---\n";
        break;
    }
    if (!out.empty()) channel_.write(std::move(out));
  }
}

std::string ReplyAssembler::end_reasoning() {
  // The reasoning's held-back bytes (an unfinished UTF-8 sequence) go out
  // before what follows it, not after: a reasoning delta after content would
  // open a second thinking block (Anthropic) or reorder the chat stream.
  if (reasoning_ended_) return {};
  reasoning_ended_ = true;
  const std::string t = reasoning_utf8_.finish();
  return t.empty() ? std::string() : stream_->reasoning(t);
}

void ReplyAssembler::feed_prefix(std::string_view text) {
  if (!text.empty()) deliver(parser_.feed(text), true);
}

void ReplyAssembler::feed(std::string_view text) {
  if (text.empty()) return;
  generated_.append(text);
  if (stream_) channel_.write(stream_->raw(raw_utf8_.feed(text)));
  deliver(parser_.feed(text), false);
}

Reply ReplyAssembler::finish(const runtime::GenerateResult& gen, int64_t prompt_tokens, int64_t cached_tokens) {
  feed(gen.tail);
  deliver(parser_.finish(), false);
  if (stream_) {
    if (std::string t = raw_utf8_.finish(); !t.empty()) channel_.write(stream_->raw(t));
    if (std::string t = end_reasoning(); !t.empty()) channel_.write(std::move(t));
    if (std::string t = content_utf8_.finish(); !t.empty()) channel_.write(stream_->content(t));
  }
  const text::ParsedMessage& m = parser_.message();
  Reply reply;
  reply.thinking = thinking_;
  reply.thinking_closed = m.thinking_closed;
  reply.raw_text = sanitize_utf8(generated_);
  // Reasoning that never closed (a length stop while thinking): ds4 gives
  // chat and Anthropic clients the whole text as content; a Responses reply
  // keeps it as reasoning, which it shows only when a summary was asked for.
  if (thinking_ && !m.thinking_closed && request_.api != Api::Responses) {
    reply.content = sanitize_utf8(strip_head(m.reasoning, prefix_reasoning_) + m.content);
  } else {
    reply.reasoning = sanitize_utf8(strip_head(m.reasoning, prefix_reasoning_));
    reply.content = sanitize_utf8(strip_head(m.content, prefix_content_));
  }
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    while (call_ids_.size() <= i) call_ids_.push_back(new_call_id());
    reply.tool_calls.push_back(ReplyToolCall{call_ids_[i], m.tool_calls[i].name, m.tool_calls[i].arguments_json});
  }
  switch (gen.reason) {
    case runtime::StopReason::MaxTokens:
    case runtime::StopReason::ContextFull: reply.finish = FinishReason::Length; break;
    case runtime::StopReason::ToolCalls: reply.finish = FinishReason::ToolCalls; break;
    default: reply.finish = FinishReason::Stop; break;
  }
  if (!reply.tool_calls.empty() && m.tool_block_complete) reply.finish = FinishReason::ToolCalls;
  if (m.tool_block_unterminated && reply.finish != FinishReason::Length) {
    reply.finish = FinishReason::Error;
    reply.error = "unterminated tool call";
  }
  reply.usage.prompt_tokens = prompt_tokens;
  reply.usage.cached_tokens = cached_tokens;
  reply.usage.completion_tokens = static_cast<int64_t>(gen.tokens.size());
  return reply;
}

}  // namespace ds4::server
