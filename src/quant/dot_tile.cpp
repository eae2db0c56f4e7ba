#include "quant/dot_tile.h"

#include <cstring>

#include "quant/dot_tile_loop.h"

namespace ds4::quant {
namespace {

// The fallback: every (row, activation) pair through the level's dot kernel,
// rows outer so a row stays in cache while it meets every activation.
template <typename Block, typename Act, auto DotKernels::*kernel>
void loop_dots(const DotKernels& k, int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
               const void* const* acts, int64_t n_acts, float* out, int64_t ldo) {
  tile_detail::loop_dots<Block, Act>(k.*kernel, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

// One fallback table per dot level; `level` names the DotKernels it loops.
template <const DotKernels& (*level)()>
struct Fallback {
  template <typename Block, typename Act, auto DotKernels::*kKernel>
  static void dots(int64_t n, const uint8_t* w, uint64_t rb, int64_t nr, const void* const* a, int64_t na, float* o,
                   int64_t ldo) {
    loop_dots<Block, Act, kKernel>(level(), n, w, rb, nr, a, na, o, ldo);
  }
  static constexpr TileKernel q8_0 = dots<BlockQ8_0, BlockQ8_0, &DotKernels::q8_0_q8_0>;
  static constexpr TileKernel q2_K = dots<BlockQ2_K, BlockQ8_K, &DotKernels::q2_K_q8_K>;
  static constexpr TileKernel q4_K = dots<BlockQ4_K, BlockQ8_K, &DotKernels::q4_K_q8_K>;
  static constexpr TileKernel iq2_xxs = dots<BlockIQ2_XXS, BlockQ8_K, &DotKernels::iq2_xxs_q8_K>;
  static constexpr TileKernel mxfp4 = dots<BlockMXFP4, BlockQ8_0, &DotKernels::mxfp4_q8_0>;
  static constexpr TileKernel f16 = dots<uint16_t, float, &DotKernels::f16_f32>;
  static constexpr TileKernel bf16 = dots<uint16_t, float, &DotKernels::bf16_f32>;
  static constexpr TileKernel f32 = dots<float, float, &DotKernels::f32_f32>;
  static constexpr TileKernel q6_K = dots<BlockQ6_K, BlockQ8_K, &DotKernels::q6_K_q8_K>;
  static constexpr TileKernel q5_K = dots<BlockQ5_K, BlockQ8_K, &DotKernels::q5_K_q8_K>;
  static constexpr TileKernel q3_K = dots<BlockQ3_K, BlockQ8_K, &DotKernels::q3_K_q8_K>;
  static constexpr TileKernel iq4_xs = dots<BlockIQ4_XS, BlockQ8_K, &DotKernels::iq4_xs_q8_K>;
  static constexpr TileKernel iq3_xxs = dots<BlockIQ3_XXS, BlockQ8_K, &DotKernels::iq3_xxs_q8_K>;
  static constexpr TileKernel iq2_xs = dots<BlockIQ2_XS, BlockQ8_K, &DotKernels::iq2_xs_q8_K>;
  static constexpr TileKernel iq1_m = dots<BlockIQ1_M, BlockQ8_K, &DotKernels::iq1_m_q8_K>;
  static constexpr TileKernel iq2_s = dots<BlockIQ2_S, BlockQ8_K, &DotKernels::iq2_s_q8_K>;
  static TileKernels table(const char* isa) {
    return {isa,  q8_0, q2_K, q4_K,   iq2_xxs, mxfp4,  f16,   bf16, f32,
            q6_K, q5_K, q3_K, iq4_xs, iq3_xxs, iq2_xs, iq1_m, iq2_s};
  }
  // The avx2 level: its own tiles for the formats of ds4's files.
  static TileKernels avx2_table() {
    return {"avx2",
            tile_avx2::q8_0_q8_0,
            tile_avx2::q2_K_q8_K,
            tile_avx2::q4_K_q8_K,
            tile_avx2::iq2_xxs_q8_K,
            tile_avx2::mxfp4_q8_0,
            tile_avx2::f16_f32,
            tile_avx2::bf16_f32,
            tile_avx2::f32_f32,
            tile_avx2::q6_K_q8_K,
            tile_avx2::q5_K_q8_K,
            tile_avx2::q3_K_q8_K,
            tile_avx2::iq4_xs_q8_K,
            tile_avx2::iq3_xxs_q8_K,
            tile_avx2::iq2_xs_q8_K,
            tile_avx2::iq1_m_q8_K,
            tile_avx2::iq2_s_q8_K};
  }
};

const DotKernels& scalar_level() { return dot_kernels_scalar(); }
const DotKernels& avx2_level() { return dot_kernels_for("avx2"); }

const TileKernels& tiles_for_level(const DotKernels& dots) {
  static const TileKernels scalar = Fallback<scalar_level>::table("scalar");
  static const TileKernels avx2 = Fallback<avx2_level>::avx2_table();
  static const TileKernels avx512 = {
      "avx512",
      tile_avx512::q8_0_q8_0<false>,
      tile_avx512::q2_K_q8_K<false>,
      tile_avx512::q4_K_q8_K<false>,
      tile_avx512::iq2_xxs_q8_K<false>,
      tile_avx512::mxfp4_q8_0<false>,
      tile_avx512::f16_f32,
      tile_avx512::bf16_f32,
      tile_avx512::f32_f32,
      tile_avx512::q6_K_q8_K_plain,
      tile_avx512::q5_K_q8_K<false>,
      tile_avx512::q3_K_q8_K<false>,
      tile_avx512::iq4_xs_q8_K_plain,
      tile_avx512::iq3_xxs_q8_K<false, false>,
      tile_avx512::iq2_xs_q8_K<false, false>,
      tile_avx512::iq1_m_q8_K<false>,
      tile_avx512::iq2_s_q8_K<false, false>,
  };
  static const TileKernels avx512vnni = {
      "avx512vnni",
      tile_avx512::q8_0_q8_0<true>,
      tile_avx512::q2_K_q8_K<true>,
      tile_avx512::q4_K_q8_K<true>,
      tile_avx512::iq2_xxs_q8_K<true>,
      tile_avx512::mxfp4_q8_0<true>,
      tile_avx512::f16_f32,
      tile_avx512::bf16_f32,
      tile_avx512::f32_f32,
      tile_avx512::q6_K_q8_K<true>,
      tile_avx512::q5_K_q8_K<true>,
      tile_avx512::q3_K_q8_K<true>,
      tile_avx512::iq4_xs_q8_K_vnni,
      tile_avx512::iq3_xxs_q8_K<true, false>,
      tile_avx512::iq2_xs_q8_K<true, false>,
      tile_avx512::iq1_m_q8_K<true>,
      tile_avx512::iq2_s_q8_K<true, false>,
  };
  static const TileKernels avx512vbmi = {
      "avx512vbmi",
      tile_avx512::q8_0_q8_0<true>,
      tile_avx512::q2_K_q8_K<true>,
      tile_avx512::q4_K_q8_K<true>,
      tile_avx512::iq2_xxs_q8_K_vbmi,
      tile_avx512::mxfp4_q8_0<true>,
      tile_avx512::f16_f32,
      tile_avx512::bf16_f32,
      tile_avx512::f32_f32,
      tile_avx512::q6_K_q8_K<true>,
      tile_avx512::q5_K_q8_K<true>,
      tile_avx512::q3_K_q8_K<true>,
      tile_avx512::iq4_xs_q8_K_vnni,
      tile_avx512::iq3_xxs_q8_K<true, true>,
      tile_avx512::iq2_xs_q8_K<true, true>,
      tile_avx512::iq1_m_q8_K<true>,
      tile_avx512::iq2_s_q8_K<true, true>,
  };
  if (std::strcmp(dots.isa, "avx512vbmi") == 0) return avx512vbmi;
  if (std::strcmp(dots.isa, "avx512vnni") == 0) return avx512vnni;
  if (std::strcmp(dots.isa, "avx512") == 0) return avx512;
  if (std::strcmp(dots.isa, "avx2") == 0) return avx2;
  return scalar;
}

}  // namespace

const TileKernels& tile_kernels() {
  static const TileKernels& chosen = tiles_for_level(dot_kernels());
  return chosen;
}

const TileKernels& tile_kernels_for(const char* isa) { return tiles_for_level(dot_kernels_for(isa)); }

}  // namespace ds4::quant
