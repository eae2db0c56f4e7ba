// One reply as it is generated: the generated text goes through the DSML
// stream parser into reasoning, content and tool-call events (streamed to
// the client when it asked for a stream, as valid UTF-8 however the text was
// split), and at the end into the Reply the API formatters take. Each
// running request has its own, so several can be generated side by side
// (batched decode, issue 23).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"
#include "server/chat_request.h"
#include "server/reply.h"
#include "server/reply_channel.h"
#include "server/tool_memory.h"
#include "text/dsml_parser.h"

namespace ds4::runtime {
struct GenerateResult;
}

namespace ds4::server {

class ReplyAssembler {
 public:
  // stream (may be null: non-streaming) and channel receive the events;
  // tools gives fresh call ids (never one it remembers); trace (may be null)
  // collects the parser's warnings. All must outlive this object.
  ReplyAssembler(const ChatRequest& request, bool tools_active, bool thinking, ReplyStream* stream,
                 ReplyChannel& channel, ToolMemory& tools, std::string* trace);

  // The client's response prefix: parsed (a tool call it opens belongs to
  // the reply) but not sent back.
  void feed_prefix(std::string_view text);
  // Generated text, in order.
  void feed(std::string_view text);
  // Whether the text so far ends inside a tool block (no checkpoint there).
  bool in_tool_block() const { return in_block_; }

  // After generation: the held-back tail, the parser's and sanitizers' last
  // events, and the reply (finish reason from the stop reason and the parsed
  // message, usage from the counts).
  Reply finish(const runtime::GenerateResult& gen, int64_t prompt_tokens, int64_t cached_tokens);
  // Valid after finish().
  const text::ParsedMessage& message() const { return parser_.message(); }
  const std::string& generated_text() const { return generated_; }

 private:
  void deliver(const std::vector<text::DsmlEvent>& events, bool from_prefix);
  // The stream bytes that end the reasoning (its held-back UTF-8 tail), once.
  std::string end_reasoning();
  std::string new_call_id() const;

  const ChatRequest& request_;
  bool thinking_;
  ReplyStream* stream_;
  ReplyChannel& channel_;
  ToolMemory& tools_;
  std::string* trace_;
  text::DsmlStreamParser parser_;
  std::vector<std::string> call_ids_;
  bool in_block_ = false;
  std::string generated_;
  std::string prefix_reasoning_, prefix_content_;
  Utf8StreamSanitizer reasoning_utf8_, content_utf8_, raw_utf8_;
  bool reasoning_ended_ = false;
};

}  // namespace ds4::server
