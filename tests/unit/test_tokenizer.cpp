// ds4::text::Tokenizer and StreamingDetokenizer on small vocabularies: the
// synthetic one (bytes + V4 specials + learned merges) and hand-made merge
// tables whose results are derived by hand from PROTOCOL.md §1.4's rule
// (lowest rank first, leftmost on ties).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "model/synthetic_tokenizer.h"
#include "support/error_of.h"
#include "support/temp_dir.h"
#include "text/byte_level.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace ds4::text {
namespace {

using model::TokenizerData;
using model::TokenType;
using Ids = std::vector<TokenId>;

// Bytes and specials only, plus the given tokens and merges.
TokenizerData hand_made(const std::vector<std::pair<std::string, TokenType>>& extra,
                        const std::vector<std::string>& merges) {
  TokenizerData d = model::make_synthetic_tokenizer(model::min_synthetic_vocab());
  for (const auto& [text, type] : extra) {
    d.tokens.push_back(text);
    d.token_types.push_back(static_cast<int32_t>(type));
  }
  d.merges = merges;
  return d;
}

TokenId id_of(const Tokenizer& t, std::string_view text) {
  const auto id = t.find(text);
  EXPECT_TRUE(id.has_value()) << "no token '" << text << "'";
  return id.value_or(-1);
}

const Tokenizer& synthetic() {
  static const Tokenizer t = Tokenizer::from_data(model::make_synthetic_tokenizer(2048));
  return t;
}

TEST(Tokenizer, MergesLowestRankFirst) {
  const Tokenizer t = Tokenizer::from_data(hand_made(
      {{"ab", TokenType::Normal}, {"ba", TokenType::Normal}, {"bc", TokenType::Normal}, {"abc", TokenType::Normal}},
      {"b a", "a b", "b c", "a bc"}));
  const TokenId a = id_of(t, "a"), b = id_of(t, "b"), c = id_of(t, "c");
  // "abab": b·a (rank 0) merges first, in the middle; then nothing applies.
  EXPECT_EQ(t.encode("abab", false), (Ids{a, id_of(t, "ba"), b}));
  // "abc": a·b (rank 1) before b·c (rank 2); then "ab"+"c" has no merge.
  EXPECT_EQ(t.encode("abc", false), (Ids{id_of(t, "ab"), c}));
  EXPECT_EQ(t.encode("bc", false), (Ids{id_of(t, "bc")}));
}

TEST(Tokenizer, TiesGoLeftmostAndLongPiecesAgree) {
  const Tokenizer t = Tokenizer::from_data(
      hand_made({{"aa", TokenType::Normal}, {"ba", TokenType::Normal}}, {"a a", "b a"}));
  const TokenId a = id_of(t, "a"), aa = id_of(t, "aa"), b = id_of(t, "b"), ba = id_of(t, "ba");
  EXPECT_EQ(t.encode("aaa", false), (Ids{aa, a}));
  // Pieces longer than 64 bytes take the priority-queue path: same rule.
  for (size_t n : {7u, 64u, 65u, 201u}) {
    Ids want(n / 2, aa);
    if (n % 2) want.push_back(a);
    EXPECT_EQ(t.encode(std::string(n, 'a'), false), want) << n << " a's";
  }
  for (size_t n : {10u, 40u}) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += "ab";
    Ids want{a};
    want.insert(want.end(), n - 1, ba);
    want.push_back(b);
    EXPECT_EQ(t.encode(s, false), want) << n << " x ab";
  }
}

TEST(Tokenizer, BytesWithoutMergesAreByteTokens) {
  const Tokenizer& t = synthetic();
  for (int b : {0, 1, 9, 32, 127, 128, 200, 255}) {
    const std::string one(1, static_cast<char>(b));
    const std::string want = b >= 0x80 ? repair_utf8(one) : one;  // a lone high byte is U+FFFD
    Ids ids = t.encode(one, false);
    EXPECT_EQ(t.decode(ids), want) << "byte " << b;
  }
  EXPECT_EQ(t.encode("\x01", false), (Ids{id_of(t, byte_symbol(1))}));
  EXPECT_EQ(t.encode("\n", false), (Ids{id_of(t, "Ċ")}));
  EXPECT_TRUE(t.encode("", true).empty());
}

TEST(Tokenizer, RoundTripsValidUtf8) {
  const Tokenizer& t = synthetic();
  for (std::string_view s : {"The weather today is cold in the morning.", "  int main() {\n\treturn 0;\n}\n",
                             "Perché così? 你好，世界！ こんにちは 안녕하세요 مرحبا नमस्ते",
                             "👩‍💻 🇮🇹 1️⃣ e\u0301 \u00A0\u3000 1234567890 ١٢٣", "\r\n\r\n   \t x"}) {
    EXPECT_EQ(t.decode(t.encode(s, false)), s);
    EXPECT_EQ(t.decode(t.encode(s, true)), s);
  }
  // Learned merges make common words shorter than their bytes.
  EXPECT_LT(t.encode(" the", false).size(), 4u);
}

TEST(Tokenizer, SpecialTokensInText) {
  const Tokenizer& t = synthetic();
  const std::string chat = "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>x</think>｜DSML｜<｜end▁of▁sentence｜>";
  const Ids ids = t.encode(chat, true);
  const Ids hi = t.encode("hi", false), x = t.encode("x", false);
  Ids want{t.bos(), t.user()};
  want.insert(want.end(), hi.begin(), hi.end());
  want.push_back(t.assistant());
  want.push_back(t.think());
  want.insert(want.end(), x.begin(), x.end());
  want.push_back(t.end_think());
  want.push_back(t.dsml());
  want.push_back(t.eos());
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), chat);
  // `<｜DSML｜tool_calls>` is "<", the DSML token, then BPE (PROTOCOL.md §1.5).
  const Ids tc = t.encode("<｜DSML｜tool_calls>", true);
  ASSERT_GE(tc.size(), 3u);
  EXPECT_EQ(t.token_bytes(tc[0]), "<");
  EXPECT_EQ(tc[1], t.dsml());
  // parse_special = false: the same text is all BPE, nothing special.
  const Ids plain = t.encode(chat, false);
  for (TokenId id : plain) EXPECT_FALSE(t.is_special(id)) << id;
  EXPECT_EQ(t.decode(plain), chat);
  EXPECT_TRUE(t.is_special(t.think()));
  EXPECT_TRUE(t.is_special(t.bos()));
  EXPECT_FALSE(t.is_special(id_of(t, "a")));
}

// llama.cpp's llama_tokenize with parse_special = false still partitions
// USER_DEFINED tokens (only CONTROL and UNKNOWN ones are skipped): what
// llama-imatrix feeds. Control literals stay text.
TEST(Tokenizer, UserDefinedLiteralsOnlyAsLlamaPlainText) {
  const Tokenizer& t = synthetic();
  const std::string text = "<｜User｜>a<think>b</think>｜DSML｜<｜begin▁of▁sentence｜>";
  const Ids ids = t.encode(text, Tokenizer::SpecialTokens::UserDefined);
  Ids want = t.encode("<｜User｜>a", false);
  want.push_back(t.think());
  for (const TokenId id : t.encode("b", false)) want.push_back(id);
  want.push_back(t.end_think());
  want.push_back(t.dsml());
  for (const TokenId id : t.encode("<｜begin▁of▁sentence｜>", false)) want.push_back(id);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t.user()), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t.bos()), 0);
  EXPECT_EQ(t.encode(text, Tokenizer::SpecialTokens::None), t.encode(text, false));
  EXPECT_EQ(t.encode(text, Tokenizer::SpecialTokens::All), t.encode(text, true));
}

TEST(Tokenizer, LongerSpecialTokensClaimTheirTextFirst) {
  // "<thi" is a prefix of "<think>"; "think>xy" overlaps "<think>" and is longer.
  const Tokenizer t = Tokenizer::from_data(
      hand_made({{"<thi", TokenType::UserDefined}, {"think>xy", TokenType::Control}}, {}));
  const TokenId think = t.think(), prefix = id_of(t, "<thi"), overlap = id_of(t, "think>xy");
  EXPECT_EQ(t.encode("<think>", true), (Ids{think}));
  EXPECT_EQ(t.encode("<thi", true), (Ids{prefix}));
  // llama.cpp's rule: the longer token takes its occurrence even though the
  // shorter one starts earlier (DeepSeek's specials never overlap like this).
  EXPECT_EQ(t.encode("<think>xy", true), (Ids{id_of(t, "<"), overlap}));
  EXPECT_EQ(t.encode("<think><think>", true), (Ids{think, think}));
}

TEST(Tokenizer, TokenBytesAndLookup) {
  const Tokenizer& t = synthetic();
  EXPECT_EQ(t.vocab_size(), 2048u);
  EXPECT_EQ(t.token_bytes(id_of(t, "Ġ")), " ");
  EXPECT_EQ(t.token_bytes(t.bos()), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(t.token_bytes(t.think()), "<think>");
  EXPECT_EQ(t.token_bytes(t.dsml()), "｜DSML｜");
  EXPECT_EQ(t.find("no such token"), std::nullopt);
  EXPECT_NE(test::error_of([&] { t.token_bytes(-1); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(test::error_of([&] { t.token_bytes(2048); }).find("outside the vocabulary"), std::string::npos);
}

TEST(Tokenizer, FromGgufReadsTheSameTable) {
  test::TempDir dir;
  const TokenizerData d = model::make_synthetic_tokenizer(1024);
  gguf::Writer w;
  d.write(w);
  const std::string path = dir.file("tok.gguf");
  w.write(path);
  const gguf::File f = gguf::File::open(path);
  const Tokenizer from_file = Tokenizer::from_gguf(f);
  const Tokenizer from_data = Tokenizer::from_data(d);
  const std::string s = "Numbers 1, 2, 3 and the model.\n";
  EXPECT_EQ(from_file.encode(s, true), from_data.encode(s, true));
  EXPECT_EQ(from_file.vocab_size(), 1024u);
}

TEST(Tokenizer, BadMetadataIsNamed) {
  auto error = [](TokenizerData d) { return test::error_of([&] { Tokenizer::from_data(d); }); };
  const TokenizerData good = model::make_synthetic_tokenizer(512);
  {
    TokenizerData d = good;
    *std::find(d.tokens.begin(), d.tokens.end(), "｜DSML｜") = "DSML";
    EXPECT_NE(error(d).find("special token '｜DSML｜' missing"), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    *std::find(d.tokens.begin(), d.tokens.end(), "<｜User｜>") = "User";
    EXPECT_NE(error(d).find("'<｜User｜>' missing"), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    d.model = "llama";
    EXPECT_NE(error(d).find("model 'llama' is not supported"), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    d.pre = "default";
    EXPECT_NE(error(d).find("pre-tokenizer 'default' is not supported"), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    d.token_types.pop_back();
    EXPECT_NE(error(d).find("token types for"), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    d.merges.push_back("nospace");
    EXPECT_NE(error(d).find("is not \"LEFT RIGHT\""), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    d.merges.push_back("Ġ Ċ");  // both parts exist, "ĠĊ" does not
    EXPECT_NE(error(d).find("missing from the token table"), std::string::npos) << error(d);
  }
  {
    TokenizerData d = good;
    *std::find(d.tokens.begin(), d.tokens.end(), "Ġ") = "[space]";
    EXPECT_NE(error(d).find("byte token for byte 32"), std::string::npos) << error(d);
  }
  EXPECT_TRUE(error(good).empty());
}

// Every piece push() returns is whole UTF-8; together with flush() they give the text.
TEST(StreamingDetokenizer, NeverSplitsACharacter) {
  const Tokenizer& t = synthetic();
  const std::string text = "héllo 世界 👩‍💻😀 ok\n日本語";
  const Ids ids = t.encode(text, false);
  ASSERT_GT(ids.size(), 10u);
  StreamingDetokenizer d(t);
  std::string out;
  size_t empty_pushes = 0;
  for (TokenId id : ids) {
    const std::string piece = d.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << "split character after token " << id;
    if (piece.empty()) ++empty_pushes;
    out += piece;
  }
  out += d.flush();
  EXPECT_EQ(out, text);
  EXPECT_GT(empty_pushes, 0u);  // the CJK and emoji bytes came one token at a time
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamingDetokenizer, HoldsAnIncompleteTailAndPassesInvalidBytes) {
  const Tokenizer& t = synthetic();
  const TokenId e4 = id_of(t, byte_symbol(0xE4)), b8 = id_of(t, byte_symbol(0xB8)), ad = id_of(t, byte_symbol(0xAD));
  StreamingDetokenizer d(t);
  EXPECT_EQ(d.push(id_of(t, "a")), "a");
  EXPECT_EQ(d.push(e4), "");
  EXPECT_EQ(d.push(b8), "");
  EXPECT_EQ(d.push(ad), "中");
  EXPECT_EQ(d.push(e4), "");
  EXPECT_EQ(d.flush(), "\xE4");  // an unfinished character comes out at the end
  // A byte that can never start or continue a character is not held.
  EXPECT_EQ(d.push(id_of(t, byte_symbol(0xFF))), "\xFF");
  EXPECT_EQ(d.push(id_of(t, byte_symbol(0xC0))), "\xC0");
  // Control tokens come out as their text.
  EXPECT_EQ(d.push(t.eos()), "<｜end▁of▁sentence｜>");
}

}  // namespace
}  // namespace ds4::text
