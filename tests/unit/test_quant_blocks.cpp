// Known-answer dequantization: blocks built by hand from the byte layouts
// and formulas of SYSTEMS.md §1.2-1.3, with expected values worked out here.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/quant.h"

namespace ds4::quant {
namespace {

constexpr uint16_t kF16One = 0x3c00;      // 1.0
constexpr uint16_t kF16Half = 0x3800;     // 0.5
constexpr uint16_t kF16Quarter = 0x3400;  // 0.25
constexpr uint16_t kF16Inf = 0x7c00;

template <class Block>
std::vector<float> dequant(GgmlType t, const std::vector<Block>& blocks, int elems_per_block) {
  std::vector<float> out(blocks.size() * static_cast<size_t>(elems_per_block));
  dequantize_row(t, blocks.data(), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

TEST(QuantBlocks, LayoutMatchesSpecTable) {
  EXPECT_EQ(sizeof(BlockQ8_0), 34u);
  EXPECT_EQ(sizeof(BlockQ8_K), 292u);
  EXPECT_EQ(sizeof(BlockQ2_K), 84u);
  EXPECT_EQ(sizeof(BlockQ4_K), 144u);
  EXPECT_EQ(sizeof(BlockIQ2_XXS), 66u);
  EXPECT_EQ(sizeof(BlockMXFP4), 17u);
  EXPECT_EQ(offsetof(BlockQ2_K, dmin), 82u);
  EXPECT_EQ(offsetof(BlockQ4_K, dmin), 2u);
  // The shared type table agrees with the structs.
  EXPECT_EQ(ggml_type_traits(GgmlType::Q2_K).block_bytes, sizeof(BlockQ2_K));
  EXPECT_EQ(ggml_type_traits(GgmlType::Q4_K).block_bytes, sizeof(BlockQ4_K));
  EXPECT_EQ(ggml_type_traits(GgmlType::IQ2_XXS).block_bytes, sizeof(BlockIQ2_XXS));
  EXPECT_EQ(ggml_type_traits(GgmlType::MXFP4).block_bytes, sizeof(BlockMXFP4));
  EXPECT_EQ(ggml_type_traits(GgmlType::Q8_0).block_bytes, sizeof(BlockQ8_0));
  EXPECT_EQ(ggml_type_traits(GgmlType::Q8_K).block_bytes, sizeof(BlockQ8_K));
}

TEST(QuantBlocks, Q8_0) {
  std::vector<BlockQ8_0> b(2);
  b[0].d = kF16Half;
  for (int j = 0; j < 32; ++j) b[0].qs[j] = static_cast<int8_t>(j * 8 - 128);  // -128, -120, ..., 120
  b[1].d = kF16Inf;
  for (int j = 0; j < 32; ++j) b[1].qs[j] = static_cast<int8_t>(j - 1);  // -1, 0, 1, ...
  const auto y = dequant(GgmlType::Q8_0, b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], -60.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 60.0f);
  // inf scale: negative code -> -inf, zero code -> NaN, positive -> inf.
  EXPECT_EQ(y[32], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[33]));
  EXPECT_EQ(y[34], std::numeric_limits<float>::infinity());
}

TEST(QuantBlocks, Q8_K) {
  std::vector<BlockQ8_K> b(1);
  b[0].d = 0.25f;
  for (int j = 0; j < 256; ++j) b[0].qs[j] = static_cast<int8_t>(j - 128);
  const auto y = dequant(GgmlType::Q8_K, b, 256);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[128], 0.0f);
  EXPECT_EQ(y[255], 31.75f);
}

// Q2_K: 16 groups of 16 outputs, group s uses scales[s]; output k of half h,
// plane p (bit shift 2p), part r (qs bytes 0..15 or 16..31 of the half).
TEST(QuantBlocks, Q2_K) {
  std::vector<BlockQ2_K> b(1);
  BlockQ2_K& q = b[0];
  q.d = kF16One;
  q.dmin = kF16Half;
  for (int s = 0; s < 16; ++s) q.scales[s] = static_cast<uint8_t>(((15 - s) << 4) | s);  // scale s, min 15-s
  int code[256];
  for (int k = 0; k < 256; ++k) code[k] = (k * 7 + k / 5) & 3;
  std::memset(q.qs, 0, sizeof(q.qs));
  for (int k = 0; k < 256; ++k) {
    const int h = k / 128, p = (k % 128) / 32, r = (k % 32) / 16, l = k % 16;
    q.qs[32 * h + 16 * r + l] = static_cast<uint8_t>(q.qs[32 * h + 16 * r + l] | (code[k] << (2 * p)));
  }
  const auto y = dequant(GgmlType::Q2_K, b, 256);
  for (int k = 0; k < 256; ++k) {
    const int s = k / 16;
    EXPECT_EQ(y[k], 1.0f * s * code[k] - 0.5f * (15 - s)) << "k=" << k;
  }
  // Worked by hand: k=0: code 0, scale 0, min 15 -> -7.5.
  // k=37 (group 2): code (259+7)&3 = 2 -> 2*2 - 0.5*13 = -2.5.
  // k=255 (group 15): code (1785+51)&3 = 0 -> 0 - 0 = 0.
  EXPECT_EQ(y[0], -7.5f);
  EXPECT_EQ(y[37], -2.5f);
  EXPECT_EQ(y[255], 0.0f);
}

// Q4_K: six-bit scales/mins packed as in SYSTEMS.md §1.3, codes in nibbles.
TEST(QuantBlocks, Q4_K) {
  std::vector<BlockQ4_K> b(1);
  BlockQ4_K& q = b[0];
  q.d = kF16Half;
  q.dmin = kF16Quarter;
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = 10 + 7 * j;  // 10 .. 59
    mn[j] = 63 - 5 * j;  // 63 .. 28
  }
  for (int j = 0; j < 4; ++j) {
    q.scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q.scales[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    q.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  int code[256];
  for (int k = 0; k < 256; ++k) code[k] = (k * 5 + k / 3) & 15;
  std::memset(q.qs, 0, sizeof(q.qs));
  for (int k = 0; k < 256; ++k) {
    const int sub = k / 32, chunk = sub / 2, l = k % 32;
    q.qs[32 * chunk + l] = static_cast<uint8_t>(q.qs[32 * chunk + l] | (code[k] << (sub % 2 ? 4 : 0)));
  }
  const auto y = dequant(GgmlType::Q4_K, b, 256);
  for (int k = 0; k < 256; ++k) {
    const int j = k / 32;
    EXPECT_EQ(y[k], 0.5f * sc[j] * code[k] - 0.25f * mn[j]) << "k=" << k;
  }
  // By hand: k=0: 0.5*10*0 - 0.25*63 = -15.75; k=200 (sub 6: sc 52, m 33):
  // code (1000+66)&15 = 10 -> 0.5*52*10 - 0.25*33 = 251.75.
  EXPECT_EQ(y[0], -15.75f);
  EXPECT_EQ(y[200], 251.75f);
}

TEST(QuantBlocks, Iq2xxsTablesMatchGgml) {
  // Entries of ggml's iq2xxs_grid (ggml-common.h).
  EXPECT_EQ(kIq2xxsGrid[2], 0x0808080808081919ull);
  EXPECT_EQ(kIq2xxsGrid[3], 0x0808080808082b08ull);
  EXPECT_EQ(kIq2xxsGrid[17], 0x080808082b080808ull);
  EXPECT_EQ(kIq2xxsGrid[64], 0x08082b0819081908ull);
  EXPECT_EQ(kIq2xxsGrid[128], 0x082b2b0808082b08ull);
  EXPECT_EQ(kIq2xxsGrid[200], 0x192b081908080808ull);
  EXPECT_EQ(kIq2xxsGrid[254], 0x2b2b2b0819190808ull);
  // Start of ggml's ksigns_iq2xs.
  const uint8_t signs_head[16] = {0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(kIq2xsSigns[i], signs_head[i]);
  for (int k = 0; k < 256; ++k) {
    for (int j = 0; j < 8; ++j) {
      const uint8_t v = iq2xxs_grid_byte(k, j);
      EXPECT_TRUE(v == 8 || v == 25 || v == 43) << k;
    }
  }
  for (int i = 0; i < 128; ++i) EXPECT_EQ(std::popcount(static_cast<unsigned>(kIq2xsSigns[i])) % 2, 0);
}

TEST(QuantBlocks, Iq2xxs) {
  std::vector<BlockIQ2_XXS> b(1);
  BlockIQ2_XXS& q = b[0];
  q.d = kF16One;
  // Sub-block 0: grid points 0, 1, 100, 255; sign indices 0, 1, 3, 127; ls 5.
  const uint32_t w0 = 0u | (1u << 8) | (100u << 16) | (255u << 24);
  const uint32_t w1 = 0u | (1u << 7) | (3u << 14) | (127u << 21) | (5u << 28);
  // Sub-blocks 1..7: grid 0, signs 0, ls 0.
  uint32_t words[16] = {w0, w1};
  std::memcpy(q.qs, words, sizeof(words));
  const auto y = dequant(GgmlType::IQ2_XXS, b, 256);
  // db = 1 * (0.5 + 5) * 0.25 = 1.375; bytes 8/25/43 -> 11 / 34.375 / 59.125.
  const float a = 11.0f, m = 34.375f, t = 59.125f;
  const float expect0[32] = {
      a,  a,  a, a,  a,  a,  a,  a,    // grid 0, no signs
      -t, a,  a, a,  a,  a,  a,  -a,   // grid 1 = 2b,08.., signs 129: elements 0 and 7
      -a, -m, a, a,  a,  t,  m,  a,    // grid 100 = 08,19,08,08,08,2b,19,08, signs 3
      -a, -m, -a, -a, -m, -t, -t, -t,  // grid 255 = 08,19,08,08,19,2b,2b,2b, signs 255
  };
  for (int k = 0; k < 32; ++k) EXPECT_EQ(y[k], expect0[k]) << "k=" << k;
  // db = 0.125 in the other sub-blocks: every output 8 * 0.125 = 1.
  for (int k = 32; k < 256; ++k) EXPECT_EQ(y[k], 1.0f) << "k=" << k;
}

TEST(QuantBlocks, Mxfp4) {
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<BlockMXFP4> b(4);
  for (int j = 0; j < 16; ++j) b[0].qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  b[0].e = 127;  // scale 1
  b[1] = b[0];
  b[1].e = 0;  // scale 2^-127 (ggml: a subnormal)
  b[2] = b[0];
  b[2].e = 255;  // ggml: 2^128, not NaN
  b[3] = b[0];
  b[3].e = 130;  // scale 8
  const auto y = dequant(GgmlType::MXFP4, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], e2m1[j]) << j;                  // low nibble: element j
    EXPECT_EQ(y[j + 16], e2m1[15 - j]) << j;        // high nibble: element j+16
    EXPECT_EQ(y[96 + j], 8 * e2m1[j]) << j;
  }
  EXPECT_EQ(y[32 + 1], std::ldexp(1.0f, -128));  // 0.5 * 2^-127
  EXPECT_EQ(y[32 + 7], 6 * std::ldexp(1.0f, -127));
  EXPECT_EQ(y[64 + 1], std::ldexp(1.0f, 127));   // 0.5 * 2^128
  EXPECT_EQ(y[64 + 2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[64 + 9], -std::ldexp(1.0f, 127));
}

TEST(QuantBlocks, PlainTypes) {
  const uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};  // 1, -2, 2^-24, 65504
  float y[4];
  dequantize_row(GgmlType::F16, h, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(y[3], 65504.0f);
  const uint16_t bf[2] = {0x3f80, 0xc0a0};  // 1, -5
  dequantize_row(GgmlType::BF16, bf, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -5.0f);
  const float f[2] = {1.5f, -0.25f};
  dequantize_row(GgmlType::F32, f, y, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -0.25f);

  uint16_t out[2];
  quantize_row(GgmlType::F16, f, out, 2);
  EXPECT_EQ(out[0], 0x3e00);
  EXPECT_EQ(out[1], 0xb400);
  quantize_row(GgmlType::BF16, f, out, 2);
  EXPECT_EQ(out[0], 0x3fc0);
  EXPECT_EQ(out[1], 0xbe80);
}

TEST(QuantBlocks, RejectsBadInput) {
  float y[64] = {};
  uint8_t buf[512] = {};
  EXPECT_THROW(dequantize_row(GgmlType::TQ1_0, buf, y, 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_0, buf, y, 33), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q2_K, buf, y, 128), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q8_K, y, buf, 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q5_K, y, buf, 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::MXFP4, y, buf, 16), Error);
  EXPECT_FALSE(quantize_supported(GgmlType::Q8_K));
  EXPECT_TRUE(quantize_supported(GgmlType::IQ2_XXS));
  EXPECT_TRUE(quantize_supported(GgmlType::MXFP4));
  try {
    dequantize_row(GgmlType::Q4_K, buf, y, 100);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds4::quant
