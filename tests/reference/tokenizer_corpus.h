// Deterministic text for tokenizer tests and benchmarks: a seeded mix of many
// scripts and kinds of text (prose in several languages, CJK, emoji and ZWJ
// sequences, source code, digit runs, whitespace runs, CRLF, non-ASCII digits,
// punctuation and spaces, combining marks, special-token literals, random code
// points across Unicode blocks). Generated in code so nothing large is committed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::test {

struct TokenizerCorpusOptions {
  size_t min_bytes = 1 << 20;
  uint64_t seed = 1;
  // Literal special tokens (e.g. "<think>") mixed into the text.
  std::vector<std::string> specials;
  // Malformed UTF-8 (stray continuation bytes, truncated and overlong
  // sequences, surrogates, bytes 0xF8..0xFF).
  bool invalid_utf8 = false;
};

std::string tokenizer_corpus(const TokenizerCorpusOptions& options);

}  // namespace ds4::test
