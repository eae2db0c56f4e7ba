// MXFP4 helpers shared by the dequantizer and the dot kernels.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace ds4::quant {

// E2M1 values doubled so they are integers (ggml's kvalues_mxfp4); codes
// 8..15 are the negatives of 0..7 (code 8 is -0, stored as 0).
inline constexpr std::array<int8_t, 16> kMxfp4DoubledValues = {0, 1, 2, 3, 4, 6, 8, 12,
                                                               0, -1, -2, -3, -4, -6, -8, -12};

// Half of the E8M0 scale 2^(e-127), i.e. 2^(e-128), built from bits as
// ggml_e8m0_to_fp32_half does: e < 2 gives the subnormals 2^-128 / 2^-127,
// e = 255 gives 2^127 (E8M0's NaN code is not special-cased).
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return std::bit_cast<float>(bits);
}

}  // namespace ds4::quant
