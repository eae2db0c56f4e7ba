// The DeepSeek V3 pre-tokenizer (PROTOCOL.md §1.3) and the GPT-2 byte alphabet
// (§1.4), against pieces derived by hand from the three split regexes.
#include <gtest/gtest.h>

#include "support/error_of.h"
#include "text/byte_level.h"
#include "text/pre_tokenizer.h"

namespace ds4::text {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view text) { return PreTokenizer::for_type("joyai-llm").split(text); }

TEST(PreTokenizer, DigitsGroupInRunsOfAtMostThree) {
  EXPECT_EQ(split("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(split("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("x1y"), (Pieces{"x", "1", "y"}));
  // \p{N} covers other scripts' digits and other numbers.
  EXPECT_EQ(split("١٢٣٤"), (Pieces{"١٢٣", "٤"}));
  EXPECT_EQ(split("１２３４５"), (Pieces{"１２３", "４５"}));
  EXPECT_EQ(split("²³"), (Pieces{"²³"}));
}

TEST(PreTokenizer, AsciiPunctuationGluesToFollowingLetters) {
  EXPECT_EQ(split("a.append(x)"), (Pieces{"a", ".append", "(x", ")"}));
  // "._" is a punctuation run: "_" is not an ASCII letter.
  EXPECT_EQ(split("obj._name"), (Pieces{"obj", "._", "name"}));
  EXPECT_EQ(split("a->b"), (Pieces{"a", "->", "b"}));
  EXPECT_EQ(split("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(split("_name"), (Pieces{"_name"}));
}

TEST(PreTokenizer, PunctuationRunsKeepTrailingNewlines) {
  EXPECT_EQ(split(">;\n"), (Pieces{">;\n"}));
  EXPECT_EQ(split("x);\r\n\r\ny"), (Pieces{"x", ");\r\n\r\n", "y"}));
  EXPECT_EQ(split("a ++ b"), (Pieces{"a", " ++", " b"}));
}

TEST(PreTokenizer, WhitespaceRuns) {
  // The last space of a run goes to the word after it.
  EXPECT_EQ(split("    int"), (Pieces{"   ", " int"}));
  // A run that ends in newlines is cut after the last newline.
  EXPECT_EQ(split("a  \n\n  b"), (Pieces{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(split("x\t\t"), (Pieces{"x", "\t\t"}));
  EXPECT_EQ(split("a \r\n"), (Pieces{"a", " \r\n"}));
  // Unicode spaces count as spaces (NBSP, ideographic space).
  EXPECT_EQ(split("x\u00A0y"), (Pieces{"x", "\u00A0y"}));
  EXPECT_EQ(split("x\u3000\u3000y"), (Pieces{"x", "\u3000", "\u3000y"}));
}

TEST(PreTokenizer, CjkAndKanaRunsAreIsolated) {
  EXPECT_EQ(split("你好世界abc"), (Pieces{"你好世界", "abc"}));
  EXPECT_EQ(split("毕老师！1"), (Pieces{"毕老师", "！", "1"}));
  EXPECT_EQ(split("カタカナとひらがな"), (Pieces{"カタカナとひらがな"}));
  // Hangul is not in the CJK regex: it is a letter run of the third regex.
  EXPECT_EQ(split("안녕 세계"), (Pieces{"안녕", " 세계"}));
}

TEST(PreTokenizer, MarksJoinLetters) {
  EXPECT_EQ(split("cafe\u0301 ok"), (Pieces{"cafe\u0301", " ok"}));
  EXPECT_EQ(split("नमस्ते"), (Pieces{"नमस्ते"}));
}

TEST(PreTokenizer, KnowsUnicode15) {
  // U+1FA75 LIGHT BLUE HEART (emoji, 15.0) is a symbol: it joins the space before it.
  EXPECT_EQ(split(" \U0001FA75x"), (Pieces{" \U0001FA75", "x"}));
  // U+0CF3 KANNADA SIGN (15.0) is a mark; U+1E4F0 NAG MUNDARI DIGIT ZERO (15.0) a digit.
  EXPECT_EQ(split("a\u0CF3 b"), (Pieces{"a\u0CF3", " b"}));
  EXPECT_EQ(split("a\U0001E4F0\U0001E4F1\U0001E4F2\U0001E4F3"),
            (Pieces{"a", "\U0001E4F0\U0001E4F1\U0001E4F2", "\U0001E4F3"}));
}

TEST(PreTokenizer, MalformedUtf8IsReadAsLlamaCppReadsIt) {
  // One U+FFFD per byte that does not start a well-formed sequence; U+FFFD is a
  // symbol, so a run of them is one punctuation/symbol piece.
  EXPECT_EQ(split("a\xFF" "b"), (Pieces{"a", "\xEF\xBF\xBD", "b"}));
  EXPECT_EQ(split("a\xE4\xB8"), (Pieces{"a", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  // Overlong forms decode to their code point and are re-encoded shortest.
  EXPECT_EQ(split("\xC1\x81" "b"), (Pieces{"Ab"}));
  // Surrogates pass through unchanged, as a non-letter.
  EXPECT_EQ(split("a\xED\xA0\x80"), (Pieces{"a", "\xED\xA0\x80"}));
  EXPECT_EQ(repair_utf8("\x80x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(repair_utf8("ok ✓"), "ok ✓");
  EXPECT_TRUE(is_valid_utf8("ok ✓ 😀"));
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));
}

TEST(PreTokenizer, PiecesCoverTheText) {
  const std::string text = "Hello, 世界! 12345 \t\n  x.append(y) 👩‍💻 «quote» ١٢٣";
  std::string joined;
  for (const std::string& p : split(text)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, UnknownTypeIsAnError) {
  EXPECT_NE(test::error_of([] { PreTokenizer::for_type("gpt2"); }).find("'gpt2' is not supported"),
            std::string::npos);
  EXPECT_EQ(PreTokenizer::for_type("deepseek-v3").type(), "deepseek-v3");
}

TEST(ByteLevel, Gpt2Alphabet) {
  EXPECT_EQ(byte_symbol(' '), "Ġ");
  EXPECT_EQ(byte_symbol('\n'), "Ċ");
  EXPECT_EQ(byte_symbol(0), "\u0100");
  EXPECT_EQ(byte_to_code_point(127), 0x121u);
  EXPECT_EQ(byte_to_code_point(128), 0x122u);
  EXPECT_EQ(byte_to_code_point(160), 0x142u);
  EXPECT_EQ(byte_to_code_point(173), 0x143u);
  EXPECT_EQ(byte_symbol('A'), "A");
  EXPECT_EQ(byte_symbol(0xA1), "¡");
  EXPECT_EQ(byte_symbol(0xFF), "ÿ");
  EXPECT_EQ(code_point_to_byte(0x120), std::optional<uint8_t>(' '));
  EXPECT_EQ(code_point_to_byte(0x144), std::nullopt);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(symbols_to_bytes(bytes_to_symbols(all)), all);
  EXPECT_EQ(bytes_to_symbols("a b\n"), "aĠbĊ");
  // Code points outside the alphabet are dropped.
  EXPECT_EQ(symbols_to_bytes("a中Ġ"), "a ");
}

}  // namespace
}  // namespace ds4::text
