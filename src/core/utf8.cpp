#include "core/utf8.h"

namespace ds4 {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// The next sequence at `at`: its length and whether it is a valid character.
// 0 when it is a valid start that the input ends inside (more may come).
struct Sequence {
  size_t length;
  bool valid;
};

Sequence next_sequence(std::string_view s, size_t at) {
  const auto b0 = static_cast<unsigned char>(s[at]);
  if (b0 < 0x80) return {1, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {1, false};  // stray continuation byte, C0/C1, F5..FF
  }
  for (size_t i = 1; i < need; ++i) {
    if (at + i >= s.size()) return {0, false};
    const auto b = static_cast<unsigned char>(s[at + i]);
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {i, false};  // the maximal subpart so far
  }
  return {need, true};
}

// Sanitizes s into out; returns the bytes consumed (all of s at the end of
// input, else up to an incomplete final sequence).
size_t sanitize_into(std::string& out, std::string_view s, bool eof) {
  size_t at = 0;
  while (at < s.size()) {
    const Sequence q = next_sequence(s, at);
    if (q.length == 0) {
      if (!eof) return at;
      out += kReplacement;
      return s.size();
    }
    if (q.valid) out.append(s.substr(at, q.length));
    else out += kReplacement;
    at += q.length;
  }
  return at;
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  sanitize_into(out, bytes, true);
  return out;
}

std::string Utf8StreamSanitizer::feed(std::string_view bytes) {
  held_.append(bytes);
  std::string out;
  const size_t used = sanitize_into(out, held_, false);
  held_.erase(0, used);
  return out;
}

std::string Utf8StreamSanitizer::finish() {
  std::string out;
  sanitize_into(out, held_, true);
  held_.clear();
  return out;
}

}  // namespace ds4
