#include "backend/cpu/ops_qat.h"

#include <array>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace ds4::cpu {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr std::array<float, 8> kE2m1Values = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// The power-of-two block scale both round trips use, in ds4's float steps
// (amax / max, log2f, ceilf, ldexpf) so that blocks whose amax sits at a
// power-of-two boundary pick the same scale.
float pow2_block_scale(float amax, float max_code_value) {
  return std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax / max_code_value))));
}

float block_amax(std::span<const float> x) {
  float amax = 0.0f;
  for (float v : x) amax = std::fabs(v) > amax ? std::fabs(v) : amax;
  return amax;
}

}  // namespace

float e4m3_value(int code) {
  const int e = code >> 3;
  const int m = code & 7;
  if (e == 0) return static_cast<float>(m) * 0x1p-9f;
  return (1.0f + static_cast<float>(m) * 0.125f) * std::ldexp(1.0f, e - 7);
}

float e4m3_round(float v) {
  const float a = std::fmin(std::fabs(v), kE4m3Max);
  float r;
  if (a < 0x1p-6f) {
    // Subnormal codes: the multiples of 2^-9, ties to the even multiple (the
    // even code); a * 512 is exact.
    r = std::nearbyint(a * 512.0f) * 0x1p-9f;
  } else {
    // Normal codes: the float's mantissa rounded to its top 3 bits, ties to
    // even (the even code). A carry out of the mantissa moves to the next
    // binade, which is the next code; a <= 448 never rounds past 448.
    uint32_t bits = std::bit_cast<uint32_t>(a);
    bits += 0x7ffffu + ((bits >> 20) & 1u);
    r = std::bit_cast<float>(bits & 0xfff00000u);
  }
  return v < 0.0f ? -r : r;
}

float e2m1_round(float v) {
  const float sign = v < 0.0f ? -1.0f : 1.0f;
  const float a = std::fmin(std::fabs(v), kE2m1Max);
  int best = 0;
  float best_diff = std::fabs(a - kE2m1Values[0]);
  for (int i = 1; i < static_cast<int>(kE2m1Values.size()); ++i) {
    const float diff = std::fabs(a - kE2m1Values[i]);
    if (diff < best_diff || (diff == best_diff && (i & 1) == 0 && (best & 1) != 0)) {
      best = i;
      best_diff = diff;
    }
  }
  return sign * kE2m1Values[best];
}

void fp8_e4m3_round_trip(std::span<float> x) {
  assert(x.size() % kFp8BlockSize == 0);
  for (std::size_t off = 0; off < x.size(); off += kFp8BlockSize) {
    std::span<float> block = x.subspan(off, kFp8BlockSize);
    const float amax = std::fmax(block_amax(block), 1.0e-4f);
    const float s = pow2_block_scale(amax, kE4m3Max);
    for (float& v : block) {
      const float q = std::fmin(std::fmax(v / s, -kE4m3Max), kE4m3Max);
      v = e4m3_round(q) * s;
    }
  }
}

void fp4_e2m1_round_trip(std::span<float> x) {
  assert(x.size() % kFp4BlockSize == 0);
  // 6 * 2^-126: the smallest amax whose scale 2^-126 is still a normal float.
  constexpr float kAmaxFloor = 6.0f * 0x1p-126f;
  for (std::size_t off = 0; off < x.size(); off += kFp4BlockSize) {
    std::span<float> block = x.subspan(off, kFp4BlockSize);
    const float amax = std::fmax(block_amax(block), kAmaxFloor);
    const float s = pow2_block_scale(amax, kE2m1Max);
    for (float& v : block) {
      const float q = std::fmin(std::fmax(v / s, -kE2m1Max), kE2m1Max);
      v = e2m1_round(q) * s;
    }
  }
}

void hadamard128(std::span<float, kHadamardSize> x) {
  for (int stride = 1; stride < kHadamardSize; stride *= 2) {
    for (int base = 0; base < kHadamardSize; base += 2 * stride) {
      for (int i = base; i < base + stride; ++i) {
        const float a = x[i];
        const float b = x[i + stride];
        x[i] = a + b;
        x[i + stride] = a - b;
      }
    }
  }
  for (float& v : x) v *= 0.08838834764831845f;  // 1/sqrt(128), rounded to float
}

void indexer_qat(std::span<float, kHadamardSize> x) {
  hadamard128(x);
  fp4_e2m1_round_trip(x);
}

}  // namespace ds4::cpu
