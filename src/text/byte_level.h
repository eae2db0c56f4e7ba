// GPT-2's byte-level alphabet (bytes_to_unicode): every byte is written as one
// printable code point so that BPE tokens are ordinary strings. Bytes 33..126,
// 161..172 and 174..255 keep their own code point; the other 68 bytes map, in
// ascending order, to U+0100, U+0101, ... (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace ds4::text {

// Code point that stands for byte b.
uint32_t byte_to_code_point(uint8_t b);
// That code point as UTF-8 (1 or 2 bytes).
std::string_view byte_symbol(uint8_t b);
// The byte a code point stands for, or nullopt when it is not in the alphabet.
std::optional<uint8_t> code_point_to_byte(uint32_t cp);

// Every byte of `bytes` replaced by its symbol.
std::string bytes_to_symbols(std::string_view bytes);
// The inverse: each UTF-8 code point of `symbols` back to its byte. Code points
// outside the alphabet (and malformed UTF-8) are dropped.
std::string symbols_to_bytes(std::string_view symbols);

// UTF-8 encoding of one code point (cp <= 0x10FFFF; surrogates as-is).
using ds4::append_utf8;

}  // namespace ds4::text
