// UTF-8 encoding of one code point, shared by the tokenizer's byte map, the
// synthetic tokenizer and the test corpora.
#pragma once

#include <cstdint>
#include <string>

namespace ds4 {

// Appends the UTF-8 bytes of `cp` (no validation: surrogates are encoded
// as-is, which the tokenizer relies on to mirror llama.cpp).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace ds4
