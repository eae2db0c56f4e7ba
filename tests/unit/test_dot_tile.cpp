// Tile kernels (quant/dot_tile.h) at every ISA level this CPU runs, for every
// weight format: out[t * ldo + r] must equal the SAME level's one-row dot
// kernel for row r and activation t bit for bit (memcmp), so a token's logits
// do not depend on how many tokens are evaluated together. The one-row kernels
// themselves are tested against independent truths in test_dot_kernels.cpp.
//
// Inputs: random codes (quantised activations from quantize_row_q8_0_act /
// quantize_row_q8_K, with extreme codes -128 / 127 injected), sane random
// scales, random floats; block counts below, at and past the kernels' 16-block
// and 64-element steps and the real widths 2048 / 4096; tiles with remainder
// rows and activations; rows `row_bytes` apart at odd alignments; activations
// at their own misaligned addresses; ldo > n_rows (entries between tiles must
// stay untouched).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
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

// ---- Random inputs ----

// A sane f16 scale: normal values over a moderate range, either sign, now and
// then zero or subnormal.
uint16_t random_f16_scale(Rng& rng) {
  const int kind = std::uniform_int_distribution<int>(0, 15)(rng);
  if (kind == 0) return 0;
  if (kind == 1) return static_cast<uint16_t>(std::uniform_int_distribution<int>(1, 0x3ff)(rng));
  const float mag = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                               std::uniform_int_distribution<int>(-12, 2)(rng));
  return f32_to_f16(kind == 2 ? -mag : mag);
}

void set_u16(unsigned char* p, uint16_t v) { std::memcpy(p, &v, 2); }

float random_float(Rng& rng) {
  const float mag = std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng),
                               std::uniform_int_distribution<int>(-6, 3)(rng));
  return std::uniform_int_distribution<int>(0, 1)(rng) ? mag : -mag;
}

// One weight format: geometry, random weights, activation in its dot form.
struct Format {
  const char* name;
  int64_t block_elems;  // 1 for float formats
  size_t block_bytes;   // element bytes for float formats
  size_t align;         // alignment the block's fields need
  TileKernel TileKernels::*tile;
  // Fills one weight block (or element) from random bytes.
  void (*fix_weight)(unsigned char* block, Rng& rng);
  // Activation of n elements in the dot kernel's form; `offset` bytes past a
  // 64-byte boundary inside `storage`.
  const void* (*make_act)(int64_t n, Rng& rng, std::vector<unsigned char>& storage, size_t offset);
  float (*dot)(const DotKernels& k, int64_t n, const void* w, const void* x);
};

// Storage with `bytes` usable from `offset` past a 64-byte boundary.
unsigned char* place(std::vector<unsigned char>& storage, size_t bytes, size_t offset) {
  storage.assign(bytes + offset + 64, 0);
  const auto base = reinterpret_cast<uintptr_t>(storage.data());
  return reinterpret_cast<unsigned char*>(((base + 63) & ~uintptr_t{63}) + offset);
}

std::vector<float> random_floats(int64_t n, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = random_float(rng);
  // Now and then a stretch of zeros or one large value.
  if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) x[0] = 1000.0f;
  if (n > 40 && std::uniform_int_distribution<int>(0, 3)(rng) == 0) std::fill(x.begin() + 3, x.begin() + 40, 0.0f);
  return x;
}

// Codes of some activation blocks pinned to the extremes sign tricks break on.
void inject_extremes(int8_t* q, int count, Rng& rng) {
  const int mode = std::uniform_int_distribution<int>(0, 7)(rng);
  for (int j = 0; j < count; ++j) {
    if (mode == 0) q[j] = -128;
    if (mode == 1) q[j] = 127;
    if (mode == 2) q[j] = (j & 1) ? int8_t{127} : int8_t{-128};
    if (mode == 3 && j % 5 == 0) q[j] = -128;
  }
}

const void* make_q8_0_act(int64_t n, Rng& rng, std::vector<unsigned char>& storage, size_t offset) {
  const int64_t nb = n / kQK8_0;
  auto* x = reinterpret_cast<BlockQ8_0*>(place(storage, static_cast<size_t>(nb) * sizeof(BlockQ8_0), offset));
  const std::vector<float> f = random_floats(n, rng);
  quantize_row_q8_0_act(f.data(), x, n);
  for (int64_t i = 0; i < nb; ++i) inject_extremes(x[i].qs, kQK8_0, rng);
  return x;
}

const void* make_q8_K_act(int64_t n, Rng& rng, std::vector<unsigned char>& storage, size_t offset) {
  const int64_t nb = n / kQK_K;
  auto* x = reinterpret_cast<BlockQ8_K*>(place(storage, static_cast<size_t>(nb) * sizeof(BlockQ8_K), offset));
  const std::vector<float> f = random_floats(n, rng);
  quantize_row_q8_K(f.data(), x, n);
  for (int64_t i = 0; i < nb; ++i) {
    inject_extremes(x[i].qs, kQK_K, rng);
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += x[i].qs[16 * g + j];
      x[i].bsums[g] = static_cast<int16_t>(s);
    }
  }
  return x;
}

// Activations exactly as quantize_row_q8_K writes them (no -128 code): the
// case the avx2 IQ2_XXS decode kernel takes its sign-on-activation path for
// (make_q8_K_act's -128s send it to the general one).
const void* make_q8_K_act_as_quantized(int64_t n, Rng& rng, std::vector<unsigned char>& storage, size_t offset) {
  const int64_t nb = n / kQK_K;
  auto* x = reinterpret_cast<BlockQ8_K*>(place(storage, static_cast<size_t>(nb) * sizeof(BlockQ8_K), offset));
  const std::vector<float> f = random_floats(n, rng);
  quantize_row_q8_K(f.data(), x, n);
  return x;
}

const void* make_f32_act(int64_t n, Rng& rng, std::vector<unsigned char>& storage, size_t offset) {
  auto* x = reinterpret_cast<float*>(place(storage, static_cast<size_t>(n) * sizeof(float), offset));
  const std::vector<float> f = random_floats(n, rng);
  std::memcpy(x, f.data(), f.size() * sizeof(float));
  return x;
}

const Format kFormats[] = {
    {"q8_0", kQK8_0, sizeof(BlockQ8_0), alignof(BlockQ8_0), &TileKernels::q8_0_q8_0,
     [](unsigned char* b, Rng& rng) {
       set_u16(b + offsetof(BlockQ8_0, d), random_f16_scale(rng));
       // Now and then a block of extreme weight codes.
       const int mode = std::uniform_int_distribution<int>(0, 7)(rng);
       if (mode < 2) std::memset(b + offsetof(BlockQ8_0, qs), mode == 0 ? 0x80 : 0x7f, kQK8_0);
     },
     make_q8_0_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q8_0_q8_0(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(x));
     }},
    {"q2_K", kQK_K, sizeof(BlockQ2_K), alignof(BlockQ2_K), &TileKernels::q2_K_q8_K,
     [](unsigned char* b, Rng& rng) {
       set_u16(b + offsetof(BlockQ2_K, d), random_f16_scale(rng));
       set_u16(b + offsetof(BlockQ2_K, dmin), random_f16_scale(rng));
     },
     make_q8_K_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q2_K_q8_K(n, static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(x));
     }},
    {"q4_K", kQK_K, sizeof(BlockQ4_K), alignof(BlockQ4_K), &TileKernels::q4_K_q8_K,
     [](unsigned char* b, Rng& rng) {
       set_u16(b + offsetof(BlockQ4_K, d), random_f16_scale(rng));
       set_u16(b + offsetof(BlockQ4_K, dmin), random_f16_scale(rng));
     },
     make_q8_K_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q4_K_q8_K(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(x));
     }},
    {"iq2_xxs", kQK_K, sizeof(BlockIQ2_XXS), alignof(BlockIQ2_XXS), &TileKernels::iq2_xxs_q8_K,
     [](unsigned char* b, Rng& rng) { set_u16(b + offsetof(BlockIQ2_XXS, d), random_f16_scale(rng)); },
     make_q8_K_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq2_xxs_q8_K(n, static_cast<const BlockIQ2_XXS*>(w), static_cast<const BlockQ8_K*>(x));
     }},
    {"iq2_xxs_quantized_acts", kQK_K, sizeof(BlockIQ2_XXS), alignof(BlockIQ2_XXS), &TileKernels::iq2_xxs_q8_K,
     [](unsigned char* b, Rng& rng) { set_u16(b + offsetof(BlockIQ2_XXS, d), random_f16_scale(rng)); },
     make_q8_K_act_as_quantized,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq2_xxs_q8_K(n, static_cast<const BlockIQ2_XXS*>(w), static_cast<const BlockQ8_K*>(x));
     }},
    {"mxfp4", kQKMxfp4, sizeof(BlockMXFP4), alignof(BlockMXFP4), &TileKernels::mxfp4_q8_0,
     [](unsigned char* b, Rng& rng) {
       // E8M0 scales around 1, now and then the subnormal half scales 0 and 1.
       const int kind = std::uniform_int_distribution<int>(0, 15)(rng);
       b[offsetof(BlockMXFP4, e)] = static_cast<unsigned char>(
           kind < 2 ? kind : std::uniform_int_distribution<int>(110, 140)(rng));
     },
     make_q8_0_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.mxfp4_q8_0(n, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(x));
     }},
    {"f16", 1, 2, 2, &TileKernels::f16_f32,
     [](unsigned char* e, Rng& rng) { set_u16(e, f32_to_f16(random_float(rng))); },
     make_f32_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.f16_f32(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
     }},
    {"bf16", 1, 2, 2, &TileKernels::bf16_f32,
     [](unsigned char* e, Rng& rng) { set_u16(e, f32_to_bf16(random_float(rng))); },
     make_f32_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.bf16_f32(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
     }},
    {"f32", 1, 4, 4, &TileKernels::f32_f32,
     [](unsigned char* e, Rng& rng) {
       const float v = random_float(rng);
       std::memcpy(e, &v, 4);
     },
     make_f32_act,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.f32_f32(n, static_cast<const float*>(w), static_cast<const float*>(x));
     }},
};

// Element counts to test: block multiples for block formats; any n for floats.
std::vector<int64_t> widths(const Format& f) {
  if (f.block_elems == kQK_K) return {kQK_K, 3 * kQK_K, 2048};
  if (f.block_elems == kQK8_0) return {kQK8_0, 5 * kQK8_0, 16 * kQK8_0, 37 * kQK8_0, 4096};
  return {1, 15, 16, 17, 64, 100, 207, 4096};
}

struct Shape {
  int64_t rows;
  int64_t acts;
};

// Every rows x acts combination for small widths; a few for the large ones.
std::vector<Shape> shapes(int64_t n) {
  // Rows: remainders of the 4-row and 16-row tiles. Activations: every pass
  // width of the 12- and 6-activation passes, and a remainder after a full pass.
  const int64_t kRows[] = {1, 3, 5, 16, 17};
  const int64_t kActs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13};
  std::vector<Shape> out;
  if (n >= 2048) return {{1, 1}, {16, 8}, {17, 13}, {5, 3}, {40, 20}};
  for (int64_t r : kRows)
    for (int64_t a : kActs) out.push_back({r, a});
  out.push_back({33, 9});
  return out;
}

// One tile of one format at one level against that level's dot kernel.
void check_tile(const Format& f, const DotKernels& dots, const TileKernels& tiles, int64_t n, Shape s, Rng& rng) {
  const int64_t blocks = n / f.block_elems;
  const size_t natural = static_cast<size_t>(blocks) * f.block_bytes;
  // Rows a few aligned units apart beyond their size, so successive rows sit
  // at different offsets from a cache line; the first row itself misaligned.
  const size_t row_bytes = natural + f.align * std::uniform_int_distribution<size_t>(0, 5)(rng);
  std::vector<unsigned char> wstore;
  unsigned char* w = place(wstore, row_bytes * static_cast<size_t>(s.rows), f.align * 3);
  for (int64_t r = 0; r < s.rows; ++r) {
    unsigned char* row = w + static_cast<size_t>(r) * row_bytes;
    for (size_t i = 0; i < natural; ++i) row[i] = static_cast<unsigned char>(rng());
    for (int64_t b = 0; b < blocks; ++b) f.fix_weight(row + static_cast<size_t>(b) * f.block_bytes, rng);
  }
  std::vector<std::vector<unsigned char>> astore(static_cast<size_t>(s.acts));
  std::vector<const void*> acts(static_cast<size_t>(s.acts));
  for (int64_t t = 0; t < s.acts; ++t) {
    // Multiples of 4: the alignment BlockQ8_K and float need (BlockQ8_0: 2).
    const size_t offset = 4 * std::uniform_int_distribution<size_t>(0, 7)(rng);
    acts[static_cast<size_t>(t)] = f.make_act(n, rng, astore[static_cast<size_t>(t)], offset);
  }

  const int64_t ldo = s.rows + 3;
  const float sentinel = std::bit_cast<float>(0x7fc0dead);
  std::vector<float> out(static_cast<size_t>(ldo * s.acts), sentinel);
  (tiles.*f.tile)(n, w, row_bytes, s.rows, acts.data(), s.acts, out.data(), ldo);

  for (int64_t t = 0; t < s.acts; ++t) {
    for (int64_t r = 0; r < ldo; ++r) {
      const float got = out[static_cast<size_t>(t * ldo + r)];
      const void* row = w + static_cast<size_t>(r) * row_bytes;
      const float want = r < s.rows ? f.dot(dots, n, row, acts[static_cast<size_t>(t)]) : sentinel;
      if (std::memcmp(&got, &want, sizeof(float)) != 0) {
        std::ostringstream msg;
        msg << f.name << " at " << dots.isa << ": n=" << n << " rows=" << s.rows << " acts=" << s.acts
            << " row_bytes=" << row_bytes << ": out[" << t << "*ldo+" << r << "] = " << got << " (0x" << std::hex
            << std::bit_cast<uint32_t>(got) << "), " << (r < s.rows ? "dot kernel " : "untouched ") << want
            << " (0x" << std::bit_cast<uint32_t>(want) << ")";
        FAIL() << msg.str();
      }
    }
  }
}

class DotTile : public ::testing::TestWithParam<const Format*> {};

TEST_P(DotTile, MatchesSameLevelDotKernelBitForBit) {
  const Format& f = *GetParam();
  for (const DotKernels* dots : dot_kernels_available()) {
    const TileKernels& tiles = tile_kernels_for(dots->isa);
    ASSERT_STREQ(tiles.isa, dots->isa);
    Rng rng(0x7117e5ull ^ std::hash<std::string>{}(std::string(f.name) + dots->isa));
    for (int64_t n : widths(f)) {
      for (Shape s : shapes(n)) {
        SCOPED_TRACE(std::string(f.name) + " " + dots->isa + " n=" + std::to_string(n) + " rows=" +
                     std::to_string(s.rows) + " acts=" + std::to_string(s.acts));
        check_tile(f, *dots, tiles, n, s, rng);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, DotTile, ::testing::ValuesIn([] {
                           std::vector<const Format*> v;
                           for (const Format& f : kFormats) v.push_back(&f);
                           return v;
                         }()),
                         [](const ::testing::TestParamInfo<const Format*>& info) {
                           return std::string(info.param->name);
                         });

// The level tile_kernels() picks is the level dot_kernels() picks.
TEST(DotTileDispatch, MatchesDotKernelsLevel) { EXPECT_STREQ(tile_kernels().isa, dot_kernels().isa); }

// Many activations (several passes) against more rows than one 64-row block
// (the avx512 integer kernels then keep every prepared pass for the later
// blocks): the case prefill runs, at the SIMD levels (the scalar level's
// fallback loop is the one avx2 uses for the types it has no tile for).
TEST(DotTileLarge, ManyRowsManyActivations) {
  for (const DotKernels* dots : dot_kernels_available()) {
    if (std::string(dots->isa) == "scalar") continue;
    for (const Format& f : kFormats) {
      SCOPED_TRACE(std::string(f.name) + " " + dots->isa);
      Rng rng(99);
      check_tile(f, *dots, tile_kernels_for(dots->isa), 2048, {83, 30}, rng);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace ds4::quant
