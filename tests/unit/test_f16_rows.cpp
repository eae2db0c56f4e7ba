// quant/f16_rows.h: the row conversions (F16C where the dot level allows)
// against core/fp16.h's scalar ones, bit for bit: every f16 bit pattern one
// way; the other way f32 inputs around every f16 rounding boundary (ties,
// subnormal results, overflow to infinity), signed zeros, infinities and NaNs
// with payloads, in rows whose lengths leave tails.
#include "quant/f16_rows.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "quant/dot.h"

namespace ds4::quant {
namespace {

std::vector<float> awkward_floats() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    // Each f16 value, the f32 halfway to its successor (a tie), and just
    // either side of that.
    const uint32_t f = std::bit_cast<uint32_t>(f16_to_f32(static_cast<uint16_t>(h)));
    v.push_back(std::bit_cast<float>(f));
    v.push_back(std::bit_cast<float>(f + 0x1000u));
    v.push_back(std::bit_cast<float>(f + 0x0fffu));
    v.push_back(std::bit_cast<float>(f + 0x1001u));
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  v.push_back(0.0f);
  v.push_back(-0.0f);
  v.push_back(65520.0f);  // rounds to infinity
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(std::bit_cast<float>(0x7fa00001u));  // signalling NaN with a payload
  v.push_back(std::bit_cast<float>(0xffc12345u));
  v.push_back(1e-30f);
  v.push_back(3.0f);  // an odd count: the rows end in a tail
  return v;
}

TEST(F16Rows, ToHalfEqualsScalarBitForBit) {
  const std::vector<float> x = awkward_floats();
  std::vector<uint16_t> want(x.size()), got(x.size()), fast(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = f32_to_f16(x[i]);
  f32_to_f16_row(x.data(), got.data(), x.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 2));
  if (dot_level_available("avx2")) {
    f32_to_f16_row_f16c(x.data(), fast.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(want[i], fast[i]) << "input bits " << std::hex << std::bit_cast<uint32_t>(x[i]);
  }
}

TEST(F16Rows, ToFloatEqualsScalarBitForBit) {
  std::vector<uint16_t> h(0x10000 + 5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> want(h.size()), got(h.size()), fast(h.size());
  for (size_t i = 0; i < h.size(); ++i) want[i] = f16_to_f32(h[i]);
  f16_to_f32_row(h.data(), got.data(), h.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
  if (dot_level_available("avx2")) {
    f16_to_f32_row_f16c(h.data(), fast.data(), h.size());
    for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(fast[i]));
  }
}

}  // namespace
}  // namespace ds4::quant
