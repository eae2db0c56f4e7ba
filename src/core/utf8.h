// UTF-8 encoding of one code point, shared by the tokenizer's byte map, the
// synthetic tokenizer and the test corpora; and UTF-8 sanitizing for text
// sent to clients.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ds4 {

// Appends the UTF-8 bytes of `cp` (no validation: surrogates are encoded
// as-is, which the tokenizer relies on to mirror llama.cpp).
void append_utf8(std::string& out, uint32_t cp);

// Text made valid UTF-8 for clients: every maximal ill-formed subsequence
// (Unicode's "maximal subpart" rule: overlongs, surrogates, code points past
// U+10FFFF, stray continuation bytes, a truncated sequence) becomes one
// U+FFFD; valid text is unchanged.
std::string sanitize_utf8(std::string_view bytes);

// The same, over text that arrives in pieces: feed() returns the sanitized
// text of everything that can no longer change (an incomplete sequence at
// the end is held back), finish() the rest. Concatenated outputs equal
// sanitize_utf8 of the concatenated input, however it was split.
class Utf8StreamSanitizer {
 public:
  std::string feed(std::string_view bytes);
  std::string finish();

 private:
  std::string held_;
};

}  // namespace ds4
