// IEEE binary16 and bfloat16 conversions, bit-exact with ggml's scalar
// fallbacks: round-to-nearest-even, subnormals kept, overflow to infinity.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace ds4 {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal: value = mant * 2^-24, exact in f32.
      const float v = static_cast<float>(mant) * 0x1p-24f;
      bits = sign | std::bit_cast<uint32_t>(v);
    }
  } else if (exp == 31) {
    // Inf or NaN; a signalling NaN comes back quiet, as F16C and ggml do.
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x47800000u) {
    // >= 65536 rounds to inf; values in [65520, 65536) also round to inf below.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: round abs * 2^24 to an integer, ties to even.
    const float v = std::bit_cast<float>(abs) * 0x1p24f;
    // v < 1024; adding 2^23 makes the FPU round to an integer with ties-to-even.
    const float r = (v + 0x1p23f) - 0x1p23f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even.
  uint32_t m = abs + 0xc8000000u;  // exponent - 112
  const uint32_t lsb = (m >> 13) & 1u;
  m += 0x0fffu + lsb;
  return static_cast<uint16_t>(sign | (m >> 13));  // carry into exponent gives inf correctly
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// ggml_compute_fp32_to_bf16: NaN -> quiet NaN keeping sign, else round to nearest even.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

inline float f16_round(float f) { return f16_to_f32(f32_to_f16(f)); }

}  // namespace ds4
