// What the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1) share: how 32 codes
// are stored (low nibbles of elements j and j + 16 in byte j, bit 4 of element
// j at bit j of a little-endian word) and how ggml's importance-weighted
// quantizers weight each element.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/scale_search.h"

namespace ds4::quant::legacy {

inline constexpr int kBlock = 32;

// Low nibbles of codes[0..31] into qs[0..15].
template <typename Code>
inline void pack_nibbles(const Code* codes, uint8_t* qs) {
  for (int j = 0; j < kBlock / 2; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0x0F) | ((codes[j + kBlock / 2] & 0x0F) << 4));
  }
}

// Bit 4 of codes[0..31] into the 4 bytes at qh, element j at bit j.
template <typename Code>
inline void pack_high_bits(const Code* codes, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kBlock; ++j) bits |= static_cast<uint32_t>((codes[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, sizeof bits);
}

// Codes 0..31 (or 0..15 without qh) of one block, in element order.
inline void unpack_codes(const uint8_t* qs, const uint8_t* qh, int* codes) {
  uint32_t bits = 0;
  if (qh) std::memcpy(&bits, qh, sizeof bits);
  for (int j = 0; j < kBlock / 2; ++j) {
    codes[j] = (qs[j] & 0x0F) | static_cast<int>(((bits >> j) & 1) << 4);
    codes[j + kBlock / 2] = (qs[j] >> 4) | static_cast<int>(((bits >> (j + kBlock / 2)) & 1) << 4);
  }
}

// ggml's per-row variance term of the importance-weighted quantizers:
// sigma2 = mean of x^2 over the whole row, summed in element order.
inline float row_sigma2(const float* x, int64_t n) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / static_cast<float>(n);
}

// weight[j] = importance[j] * sqrt(sigma2 + x[j]^2) for one block.
inline void block_weights(const float* x, const float* importance, float sigma2, float* weight) {
  for (int j = 0; j < kBlock; ++j) weight[j] = importance[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

// x86's truncating float -> int32 conversion (cvttss2si): NaN and values
// outside int32 give INT32_MIN. ggml's (int8_t)/(uint8_t) casts of floats
// compile to it followed by taking the low byte.
inline int32_t truncate_x86(float v) {
  return (v > -2147483904.0f && v < 2147483648.0f) ? static_cast<int32_t>(v) : INT32_MIN;
}

// ggml's (int8_t) cast of a float on x86.
inline int int8_cast_x86(float v) { return static_cast<int8_t>(truncate_x86(v)); }

// The block's value of largest magnitude, sign kept (first on ties): the
// plain Q4_0 / Q5_0 scale is it over -8 / -16.
inline float signed_absmax(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// ggml's quantize_row_q4_0_ref / q5_0_ref for one block: d = signed_absmax
// / -half, codes truncated (ggml's int8_t cast) from x / d + half + 0.5, at
// most 2 * half - 1. Returns d.
inline float fit_symmetric_plain(const float* x, int half, uint8_t* codes) {
  const float d = signed_absmax(x) / static_cast<float>(-half);
  const float id = d ? 1.0f / d : 0.0f;
  const float bias = static_cast<float>(half) + 0.5f;
  for (int j = 0; j < kBlock; ++j) {
    codes[j] = static_cast<uint8_t>(std::min(2 * half - 1, int8_cast_x86(x[j] * id + bias)));
  }
  return d;
}

// The block's minimum and maximum: the plain Q4_1 / Q5_1 offset and range.
inline void min_max(const float* x, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < kBlock; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// With importance, ggml's quantize_row_q4_1_impl / q5_1_impl for one block:
// make_qkx3_quants (our fit_scale_min: -0.9 + 0.05 k, 37 steps, least
// squares) weighted by importance * sqrt(sigma2 + x^2). Codes 0..nmax; d and
// the offset m (x = d * q + m).
inline void fit_offset_weighted(const float* xb, const float* importance, float sigma2, int nmax, uint8_t* codes,
                                float& d, float& m) {
  float weight[kBlock];
  block_weights(xb, importance, sigma2, weight);
  uint8_t scratch[kBlock];
  float neg_min = 0;
  d = fit_scale_min(kBlock, nmax, xb, weight, codes, &neg_min, scratch, -0.9f, 0.05f, 36, false);
  m = -neg_min;
}

}  // namespace ds4::quant::legacy
