#include "text/byte_level.h"

#include <array>

namespace ds4::text {
namespace {

struct Alphabet {
  std::array<uint32_t, 256> code_point{};
  std::array<char, 512> symbol_bytes{};  // two bytes per byte value
  std::array<uint8_t, 256> symbol_len{};
  std::array<int16_t, 512> byte_of{};  // code point < 512 -> byte, -1 when none
};

bool keeps_code_point(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

const Alphabet& alphabet() {
  static const Alphabet a = [] {
    Alphabet t;
    t.byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = keeps_code_point(b) ? static_cast<uint32_t>(b) : next++;
      t.code_point[b] = cp;
      t.byte_of[cp] = static_cast<int16_t>(b);
      std::string s;
      append_utf8(s, cp);
      t.symbol_len[b] = static_cast<uint8_t>(s.size());
      for (size_t i = 0; i < s.size(); ++i) t.symbol_bytes[2 * b + i] = s[i];
    }
    return t;
  }();
  return a;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return alphabet().code_point[b]; }

std::string_view byte_symbol(uint8_t b) {
  const Alphabet& a = alphabet();
  return {&a.symbol_bytes[2 * b], a.symbol_len[b]};
}

std::optional<uint8_t> code_point_to_byte(uint32_t cp) {
  if (cp >= 512) return std::nullopt;
  const int16_t b = alphabet().byte_of[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string bytes_to_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += byte_symbol(c);
  return out;
}

std::string symbols_to_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    // The alphabet lives below U+0200: one- and two-byte sequences only.
    if (c < 0x80) {
      if (auto b = code_point_to_byte(c)) out += static_cast<char>(*b);
      ++i;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      const uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      if (auto b = code_point_to_byte(cp)) out += static_cast<char>(*b);
      i += 2;
    } else {
      // Longer or malformed sequences are never alphabet symbols: skip the
      // lead byte and its continuation bytes.
      ++i;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
    }
  }
  return out;
}

}  // namespace ds4::text
