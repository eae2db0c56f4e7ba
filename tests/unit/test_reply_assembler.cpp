// ReplyAssembler, the reply side of one request (issue 23: one per running
// request): generated text fed in arbitrary pieces becomes the same Reply and
// the same stream bytes as fed whole; thinking splits reasoning from content
// at </think>; a complete DSML block becomes tool calls with fresh ids of
// the API's form and finish tool_calls; a block cut off at EOS is an error
// reply; a response prefix is parsed but not returned; invalid UTF-8 is
// replaced. The expected values come from PROTOCOL.md (§3 DSML, §5 replies).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/generate.h"
#include "server/reply_assembler.h"

namespace ds4::server {
namespace {

const std::string kBlock =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"bash\">\n"
    "<｜DSML｜parameter name=\"command\" string=\"true\">ls -la</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

struct Outcome {
  Reply reply;
  std::string stream_bytes;
};

// Feeds `text` in pieces of `piece` bytes (0: whole) and finishes with `reason`.
Outcome assemble(Api api, bool thinking, bool tools, bool stream, const std::string& text, size_t piece,
                 runtime::StopReason reason, const std::string& prefix = "") {
  ChatRequest req;
  req.api = api;
  req.stream = stream;
  ReplyIds ids;
  ids.id = "chatcmpl-1";
  ReplyChannel channel;
  ToolMemory memory(100, 1 << 20);
  std::unique_ptr<ReplyStream> s = stream ? make_reply_stream(req, ids) : nullptr;
  ReplyAssembler a(req, tools, thinking, s.get(), channel, memory, nullptr);
  a.feed_prefix(prefix);
  const size_t step = piece ? piece : std::max<size_t>(text.size(), 1);
  for (size_t at = 0; at < text.size(); at += step) a.feed(std::string_view(text).substr(at, step));
  runtime::GenerateResult gen;
  gen.reason = reason;
  gen.tokens.assign(7, 1);
  Outcome out{a.finish(gen, 11, 3), ""};
  channel.close();
  bool closed = false;
  for (const std::string& chunk : channel.wait(std::chrono::milliseconds(0), &closed)) out.stream_bytes += chunk;
  return out;
}

TEST(ReplyAssembler, ThinkingSplitsReasoningFromContent) {
  const std::string text = "let me think</think>The answer is 4.";
  for (size_t piece : {0u, 1u, 3u}) {
    const Outcome o = assemble(Api::ChatCompletions, true, false, false, text, piece, runtime::StopReason::Eos);
    EXPECT_EQ(o.reply.reasoning, "let me think") << piece;
    EXPECT_EQ(o.reply.content, "The answer is 4.") << piece;
    EXPECT_TRUE(o.reply.thinking_closed);
    EXPECT_EQ(o.reply.finish, FinishReason::Stop);
    EXPECT_EQ(o.reply.usage.prompt_tokens, 11);
    EXPECT_EQ(o.reply.usage.cached_tokens, 3);
    EXPECT_EQ(o.reply.usage.completion_tokens, 7);
  }
  // A length stop inside the reasoning: chat clients get it all as content.
  const Outcome cut = assemble(Api::ChatCompletions, true, false, false, "still thinking", 2,
                               runtime::StopReason::MaxTokens);
  EXPECT_EQ(cut.reply.content, "still thinking");
  EXPECT_EQ(cut.reply.finish, FinishReason::Length);
}

// Reasoning that ends in the middle of a UTF-8 sequence (a random model's
// byte tokens): its replacement goes out before the text, so a Messages
// stream holds one thinking block, closed before the text block opens
// (PROTOCOL.md §5.5: thinking, text, tool_use), and a chat stream sends no
// reasoning after content. (Found by server_sdk_messages at the avx2 level.)
TEST(ReplyAssembler, ReasoningEndsBeforeContentEvenWithAHeldBackByte) {
  const std::string text = "hmm \xe4</think>Answer.";
  for (size_t piece : {0u, 1u, 4u}) {
    const Outcome m = assemble(Api::Messages, true, false, true, text, piece, runtime::StopReason::Eos);
    const std::string& b = m.stream_bytes;
    size_t starts = 0;
    for (size_t at = b.find("\"type\":\"thinking\""); at != std::string::npos; at = b.find("\"type\":\"thinking\"", at + 1))
      ++starts;
    EXPECT_EQ(starts, 1u) << piece << ": one thinking block\n" << b;
    const size_t replacement = b.find("\\ufffd") != std::string::npos ? b.find("\\ufffd") : b.find("\xef\xbf\xbd");
    ASSERT_NE(replacement, std::string::npos) << b;
    EXPECT_LT(replacement, b.find("text_delta")) << piece << ": the held-back byte's replacement comes before the text";
    EXPECT_EQ(m.reply.reasoning, "hmm \xef\xbf\xbd");
    EXPECT_EQ(m.reply.content, "Answer.");

    const Outcome c = assemble(Api::ChatCompletions, true, false, true, text, piece, runtime::StopReason::Eos);
    EXPECT_LT(c.stream_bytes.rfind("reasoning_content"), c.stream_bytes.find("Answer."))
        << piece << ": no reasoning after the content\n" << c.stream_bytes;
  }
}

// Text that ends mid-sequence right before a tool call: its replacement
// comes before the tool_use block, not after it (thinking, text, tool_use).
TEST(ReplyAssembler, TextEndsBeforeAToolCallEvenWithAHeldBackByte) {
  const std::string text = "Sure \xe4" + kBlock;
  for (size_t piece : {0u, 1u, 5u}) {
    const Outcome m = assemble(Api::Messages, false, true, true, text, piece, runtime::StopReason::ToolCalls);
    const std::string& b = m.stream_bytes;
    const size_t tool = b.find("\"type\":\"tool_use\"");
    ASSERT_NE(tool, std::string::npos) << b;
    EXPECT_EQ(b.find("text_delta", tool), std::string::npos) << piece << ": no text after the tool_use block\n" << b;
    ASSERT_EQ(m.reply.tool_calls.size(), 1u);
  }
}

TEST(ReplyAssembler, AToolBlockBecomesToolCallsWhateverThePieces) {
  const Outcome whole = assemble(Api::ChatCompletions, false, true, true, "Sure." + kBlock, 0,
                                 runtime::StopReason::ToolCalls);
  ASSERT_EQ(whole.reply.tool_calls.size(), 1u);
  EXPECT_EQ(whole.reply.tool_calls[0].name, "bash");
  EXPECT_EQ(whole.reply.tool_calls[0].arguments_json, R"({"command":"ls -la"})");
  EXPECT_EQ(whole.reply.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(whole.reply.finish, FinishReason::ToolCalls);
  EXPECT_EQ(whole.reply.content, "Sure.");
  for (size_t piece : {1u, 5u}) {
    const Outcome o = assemble(Api::ChatCompletions, false, true, true, "Sure." + kBlock, piece,
                               runtime::StopReason::ToolCalls);
    ASSERT_EQ(o.reply.tool_calls.size(), 1u);
    EXPECT_EQ(o.reply.tool_calls[0].arguments_json, whole.reply.tool_calls[0].arguments_json);
    EXPECT_EQ(o.reply.content, whole.reply.content);
    EXPECT_NE(o.stream_bytes.find("\"name\":\"bash\""), std::string::npos) << o.stream_bytes;
  }
  const Outcome anthropic = assemble(Api::Messages, false, true, false, kBlock, 0, runtime::StopReason::ToolCalls);
  ASSERT_EQ(anthropic.reply.tool_calls.size(), 1u);
  EXPECT_EQ(anthropic.reply.tool_calls[0].id.rfind("toolu_", 0), 0u);
}

TEST(ReplyAssembler, ABlockCutOffAtEosIsAnErrorReply) {
  const std::string cut = kBlock.substr(0, kBlock.size() - 30);
  const Outcome o = assemble(Api::ChatCompletions, false, true, false, cut, 4, runtime::StopReason::Eos);
  EXPECT_EQ(o.reply.finish, FinishReason::Error);
  EXPECT_EQ(o.reply.error, "unterminated tool call");
  // At a length stop it stays a length stop.
  EXPECT_EQ(assemble(Api::ChatCompletions, false, true, false, cut, 4, runtime::StopReason::MaxTokens).reply.finish,
            FinishReason::Length);
}

TEST(ReplyAssembler, PrefixIsParsedButNotReturnedAndBadUtf8IsReplaced) {
  const Outcome o = assemble(Api::ChatCompletions, true, false, false, " more</think>ok \xff!", 1,
                             runtime::StopReason::Eos, "I think");
  EXPECT_EQ(o.reply.reasoning, " more");
  EXPECT_EQ(o.reply.content, "ok \xEF\xBF\xBD!");
}

}  // namespace
}  // namespace ds4::server
