// Tile kernels of the K-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), IQ2_XXS, IQ2_XS, IQ3_XXS, IQ4_XS, IQ1_M and IQ2_S
// formats (dot_tile.h)
// against their contract: every out[t * ldo + r] equals, bit for bit, the same level's one-row dot kernel for (row r,
// activation t), which for these integer formats is also the scalar reference. Covers every level this CPU runs,
// remainders of rows and activations, more than one 16-activation group,
// ldo > n_rows, pointers off vector alignment, extreme activation codes
// (-128 and 127) and entries of `out` the tile must leave alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/dot_tile.h"
#include "quant/quant.h"

namespace ds4::quant {
namespace {

using Rng = std::mt19937_64;

// Bytes starting `offset` past a 64-byte boundary.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset) : bytes_(bytes + 128) {
    const auto base = reinterpret_cast<uintptr_t>(bytes_.data());
    ptr_ = reinterpret_cast<uint8_t*>(((base + 63) & ~uintptr_t{63}) + offset);
  }
  uint8_t* data() { return ptr_; }

 private:
  std::vector<uint8_t> bytes_;
  uint8_t* ptr_;
};

uint16_t random_scale(Rng& rng) {
  const float mag = std::uniform_real_distribution<float>(1e-3f, 0.1f)(rng);
  return f32_to_f16(rng() & 1 ? mag : -mag);
}

// Random block bytes; f16 scales replaced by moderate values.
template <typename Block>
void fill_block(Block& b, Rng& rng) {
  auto* bytes = reinterpret_cast<uint8_t*>(&b);
  for (size_t k = 0; k < sizeof(Block); ++k) bytes[k] = static_cast<uint8_t>(rng());
  if constexpr (requires { b.dmin; }) b.dmin = random_scale(rng);
  b.d = random_scale(rng);
}

// One activation row: quantize_row_q8_K of random floats, then some blocks
// pinned to the extreme codes (-128 never comes out of quantization; the
// kernels must still be exact for it).
void fill_activation(BlockQ8_K* x, int64_t n, Rng& rng, int pattern) {
  std::vector<float> f(static_cast<size_t>(n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : f) v = normal(rng);
  quantize_row_q8_K(f.data(), x, n);
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    if (pattern == 0 || (i + pattern) % 3 != 0) continue;
    for (int j = 0; j < kQK_K; ++j) {
      x[i].qs[j] = pattern == 1 ? int8_t{-128} : pattern == 2 ? int8_t{127} : static_cast<int8_t>(j & 1 ? -128 : 127);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += x[i].qs[16 * g + j];
      x[i].bsums[g] = static_cast<int16_t>(s);
    }
  }
}

struct TypeCase {
  const char* name;
  size_t block_bytes;
  TileKernel TileKernels::*tile;
  float (*dot)(const DotKernels& k, int64_t n, const uint8_t* w, const BlockQ8_K* x);
  void (*fill)(uint8_t* block, Rng& rng);
};

template <typename Block, float (*DotKernels::*kKernel)(int64_t, const Block*, const BlockQ8_K*)>
float call_dot(const DotKernels& k, int64_t n, const uint8_t* w, const BlockQ8_K* x) {
  return (k.*kKernel)(n, reinterpret_cast<const Block*>(w), x);
}

template <typename Block>
void fill_bytes(uint8_t* block, Rng& rng) {
  fill_block(*reinterpret_cast<Block*>(block), rng);
}

// IQ1_M has no d field: its f16 scale is the top nibbles of the four scale words.
void fill_iq1_m(uint8_t* block, Rng& rng) {
  auto& b = *reinterpret_cast<BlockIQ1_M*>(block);
  for (size_t k = 0; k < sizeof(BlockIQ1_M); ++k) block[k] = static_cast<uint8_t>(rng());
  const uint16_t d = random_scale(rng);
  for (int k = 0; k < 4; ++k) {
    b.scales[2 * k + 1] = static_cast<uint8_t>((b.scales[2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 15) << 4));
  }
}

const TypeCase kTypes[] = {
    {"q2_K", sizeof(BlockQ2_K), &TileKernels::q2_K_q8_K, call_dot<BlockQ2_K, &DotKernels::q2_K_q8_K>,
     fill_bytes<BlockQ2_K>},
    {"q4_K", sizeof(BlockQ4_K), &TileKernels::q4_K_q8_K, call_dot<BlockQ4_K, &DotKernels::q4_K_q8_K>,
     fill_bytes<BlockQ4_K>},
    {"iq2_xxs", sizeof(BlockIQ2_XXS), &TileKernels::iq2_xxs_q8_K, call_dot<BlockIQ2_XXS, &DotKernels::iq2_xxs_q8_K>,
     fill_bytes<BlockIQ2_XXS>},
    {"q6_K", sizeof(BlockQ6_K), &TileKernels::q6_K_q8_K, call_dot<BlockQ6_K, &DotKernels::q6_K_q8_K>,
     fill_bytes<BlockQ6_K>},
    {"q5_K", sizeof(BlockQ5_K), &TileKernels::q5_K_q8_K, call_dot<BlockQ5_K, &DotKernels::q5_K_q8_K>,
     fill_bytes<BlockQ5_K>},
    {"q3_K", sizeof(BlockQ3_K), &TileKernels::q3_K_q8_K, call_dot<BlockQ3_K, &DotKernels::q3_K_q8_K>,
     fill_bytes<BlockQ3_K>},
    {"iq4_xs", sizeof(BlockIQ4_XS), &TileKernels::iq4_xs_q8_K, call_dot<BlockIQ4_XS, &DotKernels::iq4_xs_q8_K>,
     fill_bytes<BlockIQ4_XS>},
    {"iq3_xxs", sizeof(BlockIQ3_XXS), &TileKernels::iq3_xxs_q8_K, call_dot<BlockIQ3_XXS, &DotKernels::iq3_xxs_q8_K>,
     fill_bytes<BlockIQ3_XXS>},
    {"iq2_xs", sizeof(BlockIQ2_XS), &TileKernels::iq2_xs_q8_K, call_dot<BlockIQ2_XS, &DotKernels::iq2_xs_q8_K>,
     fill_bytes<BlockIQ2_XS>},
    {"iq1_m", sizeof(BlockIQ1_M), &TileKernels::iq1_m_q8_K, call_dot<BlockIQ1_M, &DotKernels::iq1_m_q8_K>, fill_iq1_m},
    {"iq2_s", sizeof(BlockIQ2_S), &TileKernels::iq2_s_q8_K, call_dot<BlockIQ2_S, &DotKernels::iq2_s_q8_K>,
     fill_bytes<BlockIQ2_S>},
};

struct Shape {
  std::vector<int64_t> row_counts;
  std::vector<int64_t> act_counts;
};

// Row counts {1, 3, 4, 5, 16, 17} and activation counts up to 40 (more than
// two 16-lane groups, short last groups of 2, 8 and 10); the large shape
// crosses the kernels' passes of 64 rows and 64 activations.
const Shape kSmallShape{{1, 3, 4, 5, 16, 17}, {1, 2, 3, 4, 5, 8, 10, 12, 13, 18, 40}};
const Shape kLargeShape{{70}, {6, 70}};

void check_type(const TypeCase& type, int64_t n, uint64_t seed, const Shape& shape = kSmallShape) {
  int64_t max_rows = 0;  // + 1: tiles start at row 1
  int64_t max_acts = 0;
  for (int64_t r : shape.row_counts) max_rows = std::max(max_rows, r + 1);
  for (int64_t a : shape.act_counts) max_acts = std::max(max_acts, a);
  Rng rng(seed);
  const int64_t nb = n / kQK_K;
  // Rows 2 bytes apart beyond their blocks (row_bytes need not equal the row size).
  const uint64_t row_bytes = static_cast<uint64_t>(nb) * type.block_bytes + 2;
  Buffer weights(row_bytes * max_rows, 2);
  for (int64_t r = 0; r < max_rows; ++r) {
    for (int64_t i = 0; i < nb; ++i) type.fill(weights.data() + r * row_bytes + i * type.block_bytes, rng);
  }
  std::vector<Buffer> act_buffers;
  std::vector<const void*> acts;
  for (int64_t t = 0; t < max_acts; ++t) {
    act_buffers.emplace_back(static_cast<size_t>(nb) * sizeof(BlockQ8_K), 4 * static_cast<size_t>(t % 16));
    fill_activation(reinterpret_cast<BlockQ8_K*>(act_buffers.back().data()), n, rng, static_cast<int>(t % 4));
    acts.push_back(act_buffers.back().data());
  }
  auto row = [&](int64_t r) { return weights.data() + r * row_bytes; };
  auto act = [&](int64_t t) { return static_cast<const BlockQ8_K*>(acts[static_cast<size_t>(t)]); };

  std::vector<float> scalar(max_rows * max_acts);
  for (int64_t t = 0; t < max_acts; ++t) {
    for (int64_t r = 0; r < max_rows; ++r) scalar[t * max_rows + r] = type.dot(dot_kernels_scalar(), n, row(r), act(t));
  }

  const std::vector<int64_t>& row_counts = shape.row_counts;
  const std::vector<int64_t>& act_counts = shape.act_counts;
  constexpr float kSentinel = -12345.0f;
  for (const DotKernels* level : dot_kernels_available()) {
    SCOPED_TRACE(std::string(type.name) + " n=" + std::to_string(n) + " level " + level->isa);
    std::vector<float> one_row(max_rows * max_acts);
    for (int64_t t = 0; t < max_acts; ++t) {
      for (int64_t r = 0; r < max_rows; ++r) one_row[t * max_rows + r] = type.dot(*level, n, row(r), act(t));
    }
    ASSERT_EQ(0, std::memcmp(one_row.data(), scalar.data(), scalar.size() * sizeof(float)))
        << "one-row kernel differs from scalar";
    const TileKernel tile = tile_kernels_for(level->isa).*(type.tile);
    for (int64_t n_rows : row_counts) {
      for (int64_t n_acts : act_counts) {
        // Rows start at row 1, so the tile's first row is not the buffer's.
        const int64_t r0 = 1;
        const int64_t ldo = n_rows + 3;
        std::vector<float> out(static_cast<size_t>(ldo * n_acts), kSentinel);
        tile(n, row(r0), row_bytes, n_rows, acts.data(), n_acts, out.data(), ldo);
        for (int64_t t = 0; t < n_acts; ++t) {
          for (int64_t r = 0; r < ldo; ++r) {
            const float got = out[t * ldo + r];
            if (r >= n_rows) {
              ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(kSentinel))
                  << "wrote past n_rows: rows " << n_rows << " acts " << n_acts << " t " << t << " r " << r;
              continue;
            }
            const float want = one_row[t * max_rows + r0 + r];
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
                << "rows " << n_rows << " acts " << n_acts << " t " << t << " r " << r << ": got " << got
                << ", one-row kernel " << want << ", scalar " << scalar[t * max_rows + r0 + r];
          }
        }
      }
    }
  }
}

class DotTileKquant : public ::testing::TestWithParam<int> {};

TEST_P(DotTileKquant, Q2KEqualsOneRowAndScalar) { check_type(kTypes[0], GetParam(), 11 + GetParam()); }
TEST_P(DotTileKquant, Q4KEqualsOneRowAndScalar) { check_type(kTypes[1], GetParam(), 23 + GetParam()); }
TEST_P(DotTileKquant, Iq2XxsEqualsOneRowAndScalar) { check_type(kTypes[2], GetParam(), 37 + GetParam()); }
TEST_P(DotTileKquant, Q6KEqualsOneRowAndScalar) { check_type(kTypes[3], GetParam(), 41 + GetParam()); }
TEST_P(DotTileKquant, Q5KEqualsOneRowAndScalar) { check_type(kTypes[4], GetParam(), 43 + GetParam()); }
TEST_P(DotTileKquant, Q3KEqualsOneRowAndScalar) { check_type(kTypes[5], GetParam(), 47 + GetParam()); }
TEST_P(DotTileKquant, Iq4XsEqualsOneRowAndScalar) { check_type(kTypes[6], GetParam(), 53 + GetParam()); }
TEST_P(DotTileKquant, Iq3XxsEqualsOneRowAndScalar) { check_type(kTypes[7], GetParam(), 59 + GetParam()); }
TEST_P(DotTileKquant, Iq2XsEqualsOneRowAndScalar) { check_type(kTypes[8], GetParam(), 61 + GetParam()); }
TEST_P(DotTileKquant, Iq1MEqualsOneRowAndScalar) { check_type(kTypes[9], GetParam(), 71 + GetParam()); }
TEST_P(DotTileKquant, Iq2SEqualsOneRowAndScalar) { check_type(kTypes[10], GetParam(), 81 + GetParam()); }

INSTANTIATE_TEST_SUITE_P(Widths, DotTileKquant, ::testing::Values(256, 2048, 4096));

TEST(DotTileKquantLarge, MoreThanOnePassOfRowsAndActivations) {
  check_type(kTypes[0], 512, 101, kLargeShape);
  check_type(kTypes[1], 512, 102, kLargeShape);
  check_type(kTypes[2], 512, 103, kLargeShape);
  check_type(kTypes[3], 512, 104, kLargeShape);
  check_type(kTypes[4], 512, 105, kLargeShape);
  check_type(kTypes[5], 512, 106, kLargeShape);
  check_type(kTypes[6], 512, 107, kLargeShape);
  check_type(kTypes[7], 512, 108, kLargeShape);
  check_type(kTypes[8], 512, 109, kLargeShape);
  check_type(kTypes[9], 512, 110, kLargeShape);
  check_type(kTypes[10], 512, 111, kLargeShape);
}

}  // namespace
}  // namespace ds4::quant
