// Tile kernels (dot_tile.h) at the avx2 level for the integer formats: a few
// activations (decode's one) go one by one to the 8-row matrix-vector kernels
// (dot_rows_avx2.h), more to the tiles with one lane per weight row
// (dot_tile_lanes_avx2.h), whose per-block re-layout of 8 rows only pays for
// itself over several activations. Both are bit-identical to kDotAvx2's
// one-row kernels.
#include "core/x86_kernel_prelude.h"

#include <cstdint>

#include "quant/dot.h"
#include "quant/dot_rows_avx2.h"
#include "quant/dot_tile.h"
#include "quant/dot_tile_lanes_avx2.h"

namespace ds4::quant {

extern const DotKernels kDotAvx2;

namespace tile_avx2 {
namespace {

// Fewest activations for which the lane tile beats the matrix-vector kernel
// run once per activation (ds4-bench-kernels tile/*/64x4096xN at the avx2
// level, AMD Zen 4): Q8_0 ~4-6, the others 3-4.
constexpr int64_t kMinLanesQ8_0 = 6;
constexpr int64_t kMinLanes = 4;
// IQ3_XXS: its lanes tile beats the 8-row kernel from 3 activations (Zen 5,
// 64x4096: 43.5 us at 2 against 2 x 20.5, since the rows kernel forms its
// signs in registers). IQ2_XS's tile is nearly flat in the
// activations (84 us at 2, 120 at 12) where its rows take 36 us each: from 3.
constexpr int64_t kMinLanesIq3Xxs = 3;
constexpr int64_t kMinLanesIq2Xs = 3;
// IQ1_M / IQ2_S (Zen 5, 64x4096): at 2 activations the lanes tile and twice
// the rows kernel are even (39 / 37 us, 34 / 36), from 3 the tile wins.
constexpr int64_t kMinLanesIq1M = 3;
constexpr int64_t kMinLanesIq2S = 2;
// IQ4_XS: the tile costs ~14 us + 3 per activation at 64x4096 (Zen 5), the
// rows kernel ~8.6 per activation.
constexpr int64_t kMinLanesIq4Xs = 3;
// Q6_K (Zen 5, 64x4096): the lanes tile 20 us at 2 activations, 24 at 4,
// the rows kernel 8.3 per activation.
constexpr int64_t kMinLanesQ6K = 3;

// The activations one by one through `rows` below kMin of them, else `lanes`.
template <typename Act, void (*rows)(int64_t, const uint8_t*, uint64_t, int64_t, const Act*, float*),
          TileFunction* lanes, int64_t kMin>
void route(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
           float* out, int64_t ldo) {
  if (n_acts >= kMin) {
    lanes(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
    return;
  }
  for (int64_t t = 0; t < n_acts; ++t) rows(n, w, row_bytes, n_rows, static_cast<const Act*>(acts[t]), out + t * ldo);
}

}  // namespace

void q8_0_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_0, avx2_detail::q8_0_rows, q8_0_lanes, kMinLanesQ8_0>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void mxfp4_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_0, avx2_detail::mxfp4_rows, mxfp4_lanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void q2_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::q2_K_rows, q2_K_lanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void q4_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::q4_K_rows, q4_K_lanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void iq2_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::iq2_xxs_rows, iq2_xxs_lanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out,
                                                                         ldo);
}

void iq2_xs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::iq2_xs_rows, iq2_xs_lanes, kMinLanesIq2Xs>(n, w, row_bytes, n_rows, acts, n_acts, out,
                                                                           ldo);
}

void iq3_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::iq3_xxs_rows, iq3_xxs_lanes, kMinLanesIq3Xxs>(n, w, row_bytes, n_rows, acts, n_acts,
                                                                              out, ldo);
}

void iq2_s_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::iq2_s_rows, iq2_s_lanes, kMinLanesIq2S>(n, w, row_bytes, n_rows, acts, n_acts, out,
                                                                        ldo);
}

void iq1_m_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::iq1_m_rows, iq1_m_lanes, kMinLanesIq1M>(n, w, row_bytes, n_rows, acts, n_acts, out,
                                                                        ldo);
}

void q6_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::q6_K_rows, q6_K_lanes, kMinLanesQ6K>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void q5_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::q5_K_rows, q5_K_lanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void iq4_xs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::iq4_xs_rows, iq4_xs_lanes, kMinLanesIq4Xs>(n, w, row_bytes, n_rows, acts, n_acts, out,
                                                                           ldo);
}

void q3_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  route<BlockQ8_K, avx2_detail::q3_K_rows, q3_K_lanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

}  // namespace tile_avx2
}  // namespace ds4::quant
