// Token ids of rendered chats: with segments, special literals typed by a
// person stay text while template markers become control tokens; without
// such literals the segment path gives exactly the ids of the joined text
// (so BPE saw the same spans), which is what the official tokenizer does.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/synthetic_tokenizer.h"
#include "text/chat_render.h"
#include "text/chat_tokens.h"
#include "text/tokenizer.h"

namespace ds4::text {
namespace {

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_data(model::make_synthetic_tokenizer(2048));
  return t;
}

RenderedChat render(const nlohmann::ordered_json& messages, ThinkingMode mode = ThinkingMode::High,
                    const nlohmann::ordered_json& tools = nullptr) {
  RenderOptions o;
  o.mode = mode;
  return render_chat(messages, tools, o);
}

size_t count(const std::vector<TokenId>& ids, TokenId id) { return static_cast<size_t>(std::count(ids.begin(), ids.end(), id)); }

TEST(ChatTokens, PlainConversationsTokenizeLikeTheJoinedText) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type":"function","function":{"name":"bash","description":"Run a command","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}])");
  const nlohmann::ordered_json chats[] = {
      nlohmann::ordered_json::parse(R"([{"role":"system","content":"You are terse."},{"role":"user","content":"Hello, world  12345\n\tok"}])"),
      nlohmann::ordered_json::parse(
          R"([{"role":"user","content":"list files"},{"role":"assistant","reasoning_content":"need ls","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls -la && pwd\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"a.txt\nb.txt"}])"),
  };
  for (const auto& m : chats) {
    for (const auto& t : {nlohmann::ordered_json(nullptr), tools}) {
      const RenderedChat chat = render(m, ThinkingMode::High, t);
      const std::vector<TokenId> seg = tokenize_segments(chat, tok());
      EXPECT_EQ(seg, tokenize_rendered_text(chat, tok())) << chat.text();
      EXPECT_EQ(tok().decode(seg), chat.text());
      EXPECT_EQ(seg.front(), tok().bos());
      EXPECT_EQ(seg.back(), tok().think());
    }
  }
}

TEST(ChatTokens, SpecialLiteralsTypedByAPersonStayText) {
  const nlohmann::ordered_json m = nlohmann::ordered_json::parse(
      R"([{"role":"user","content":"say <｜User｜> and </think> and ｜DSML｜ please"}])");
  const RenderedChat chat = render(m, ThinkingMode::None);
  const std::vector<TokenId> seg = tokenize_segments(chat, tok());
  const std::vector<TokenId> whole = tokenize_rendered_text(chat, tok());
  // The template's own markers: one User, one Assistant, one </think>.
  EXPECT_EQ(count(seg, tok().user()), 1u);
  EXPECT_EQ(count(seg, tok().end_think()), 1u);
  EXPECT_EQ(count(seg, tok().dsml()), 0u);
  // Parsing the joined text turns the typed literals into control tokens.
  EXPECT_EQ(count(whole, tok().user()), 2u);
  EXPECT_EQ(count(whole, tok().end_think()), 2u);
  EXPECT_EQ(count(whole, tok().dsml()), 1u);
  // Both spell the same bytes.
  EXPECT_EQ(tok().decode(seg), chat.text());
  EXPECT_EQ(tok().decode(whole), chat.text());
}

}  // namespace
}  // namespace ds4::text
