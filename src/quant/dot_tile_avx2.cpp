// Tile kernels (dot_tile.h) at the avx2 level for the two formats that
// dominate an AVX2 prefill: IQ2_XXS (routed experts of ds4-q2) and Q8_0
// (attention, shared expert, vocab head).
//
// Rows outer, activations inner, as loop_dots; what a tile saves is per-row
// work done once for all activations instead of once per (row, activation):
//   IQ2_XXS: each row is decoded once into sign * grid bytes (-43..43) and its
//     sub-block multipliers; the grid lookups and sign unpacking were ~80 % of
//     the one-row kernel. Each activation then costs a sign, maddubs and madd
//     per 32 elements.
//   Q8_0: |w| of each block is taken once per row and up to four activations
//     go through the row together (four independent float chains), with
//     maddubs(|w|, x * sign(w)) instead of widening both sides to int16. That
//     product is exact unless x holds -128 (x * sign(w) overflows), which
//     quantize_row_q8_0 never writes; an activation that does is routed to
//     the one-row kernel.
// Integer sums equal the one-row kernels' and the float part is theirs, step
// for step, so each output is bit-identical to kDotAvx2 (dot_avx2.cpp).
#include "core/x86_kernel_prelude.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/dot_tile.h"
#include "quant/dot_tile_loop.h"
#include "quant/dot_x86_common.h"

namespace ds4::quant {

extern const DotKernels kDotAvx2;

namespace tile_avx2 {
namespace {

// Rows whose weights are fetched ahead of the one being computed.
constexpr uint64_t kPrefetchRows = 2;

inline void prefetch_row(const uint8_t* row, uint64_t row_bytes) {
  for (uint64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(row + off), _MM_HINT_T0);
}

// The f16 scale of each of 8 consecutive Q8_0 blocks, as f32. Inserted word
// by word: eight narrow stores read back as one vector would stall on store
// forwarding.
inline __m256 scales8(const BlockQ8_0* b) {
  __m128i v = _mm_cvtsi32_si128(b[0].d);
  v = _mm_insert_epi16(v, b[1].d, 1);
  v = _mm_insert_epi16(v, b[2].d, 2);
  v = _mm_insert_epi16(v, b[3].d, 3);
  v = _mm_insert_epi16(v, b[4].d, 4);
  v = _mm_insert_epi16(v, b[5].d, 5);
  v = _mm_insert_epi16(v, b[6].d, 6);
  v = _mm_insert_epi16(v, b[7].d, 7);
  return _mm256_cvtph_ps(v);
}

// ---- IQ2_XXS ----

// Fewest activations for which decoding a row once beats the one-row kernel.
constexpr int64_t kMinActsIq2Xxs = 2;

// One row decoded: per block 256 signed grid bytes, 8 multipliers, d.
struct Iq2Row {
  std::vector<int8_t> values;
  std::vector<int16_t> multipliers;
  std::vector<float> d;
  void decode(const BlockIQ2_XXS* w, int64_t nb) {
    values.resize(static_cast<size_t>(nb) * kQK_K);
    multipliers.resize(static_cast<size_t>(nb) * 8);
    d.resize(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) {
      const auto* q = reinterpret_cast<const uint8_t*>(w[i].qs);
#pragma GCC unroll 8
      for (int b = 0; b < 8; ++b) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(values.data() + kQK_K * i + 32 * b),
                            iq2_xxs_signed_grid(q + 8 * b));
        multipliers[static_cast<size_t>(8 * i + b)] = iq2_xxs_multiplier(q + 8 * b);
      }
      d[static_cast<size_t>(i)] = f16_value(w[i].d);
    }
  }
};

thread_local Iq2Row t_iq2_row;

// dot_iq2_xxs_q8_K (avx2) of the decoded row with one activation.
inline float iq2_row_dot(const Iq2Row& row, int64_t nb, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const int8_t* wv = row.values.data() + kQK_K * i;
    const int16_t* ls = row.multipliers.data() + 8 * i;
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const __m256i prod = iq2_xxs_signed_products(load256(wv + 32 * b), load256(x[i].qs + 32 * b));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(prod, _mm256_set1_epi16(ls[b])));
    }
    const float d = row.d[static_cast<size_t>(i)] * x[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

// ---- Q8_0 ----

// (row, activation) pairs per pass: four independent chains.
constexpr int kPassPairs = 4;

// True when x holds no -128 code (the fast product's precondition).
bool q8_0_fast_ok(const BlockQ8_0* x, int64_t nb) {
  const __m256i min = _mm256_set1_epi8(static_cast<char>(-128));
  __m256i any = _mm256_setzero_si256();
  for (int64_t i = 0; i < nb; ++i) any = _mm256_or_si256(any, _mm256_cmpeq_epi8(load256(x[i].qs), min));
  return _mm256_testz_si256(any, any) != 0;
}

// dot_q8_0_q8_0 (avx2) of R rows with A activations at once: the same 8
// block sums per pair, the same float steps. The R * A running sums are
// independent chains, so their in-order adds overlap (one row and one
// activation would wait on each add's latency).
template <int R, int A>
void q8_0_pass(const BlockQ8_0* const* w, int64_t nb, const BlockQ8_0* const* x, float* out, int64_t ldo) {
  const __m256i ones = _mm256_set1_epi16(1);
  float sumf[R][A] = {};
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i b[R][A][8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i wv = load256(w[r][i + k].qs);
        const __m256i aw = _mm256_abs_epi8(wv);
#pragma GCC unroll 4
        for (int a = 0; a < A; ++a) {
          const __m256i prod = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(load256(x[a][i + k].qs), wv));
          b[r][a][k] = _mm256_madd_epi16(prod, ones);
        }
      }
    }
    __m256 dx[A];
#pragma GCC unroll 4
    for (int a = 0; a < A; ++a) dx[a] = scales8(x[a] + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 dw = scales8(w[r] + i);
#pragma GCC unroll 4
      for (int a = 0; a < A; ++a) {
        const __m256 d = _mm256_mul_ps(dw, dx[a]);
        sumf[r][a] = add_lanes_in_order(sumf[r][a], _mm256_mul_ps(_mm256_cvtepi32_ps(hsum8_i32(b[r][a])), d));
      }
    }
  }
  for (; i < nb; ++i) {
    for (int r = 0; r < R; ++r) {
      const __m256i wv = load256(w[r][i].qs);
      const __m256i aw = _mm256_abs_epi8(wv);
      for (int a = 0; a < A; ++a) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(load256(x[a][i].qs), wv)), ones);
        sumf[r][a] += static_cast<float>(hsum_i32(p)) * (f16_value(w[r][i].d) * f16_value(x[a][i].d));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int a = 0; a < A; ++a) out[a * ldo + r] = sumf[r][a];
}

}  // namespace

void iq2_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts < kMinActsIq2Xxs) {
    tile_detail::loop_dots<BlockIQ2_XXS, BlockQ8_K>(kDotAvx2.iq2_xxs_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out,
                                                    ldo);
    return;
  }
  const int64_t nb = n / kQK_K;
  Iq2Row& row = t_iq2_row;
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* rw = w + static_cast<uint64_t>(r) * row_bytes;
    prefetch_row(rw + kPrefetchRows * row_bytes, row_bytes);
    row.decode(reinterpret_cast<const BlockIQ2_XXS*>(rw), nb);
    for (int64_t t = 0; t < n_acts; ++t) out[t * ldo + r] = iq2_row_dot(row, nb, static_cast<const BlockQ8_K*>(acts[t]));
  }
}

void q8_0_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo) {
  const int64_t nb = n / kQK8_0;
  // Activations the fast product is exact for go in passes of up to four;
  // any other through the one-row kernel.
  std::vector<const BlockQ8_0*> fast;
  std::vector<int64_t> fast_index, slow_index;
  for (int64_t t = 0; t < n_acts; ++t) {
    const auto* x = static_cast<const BlockQ8_0*>(acts[t]);
    if (q8_0_fast_ok(x, nb)) {
      fast.push_back(x);
      fast_index.push_back(t);
    } else {
      slow_index.push_back(t);
    }
  }
  const auto n_fast = static_cast<int64_t>(fast.size());
  auto row_at = [&](int64_t r) { return reinterpret_cast<const BlockQ8_0*>(w + static_cast<uint64_t>(r) * row_bytes); };
  // One activation (decode): four rows per pass; more: one row, up to four activations.
  const int64_t rows_per_pass = n_fast == 1 ? kPassPairs : 1;
  for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_pass) {
    const int64_t rows = n_rows - r0 < rows_per_pass ? n_rows - r0 : rows_per_pass;
    prefetch_row(w + static_cast<uint64_t>(r0 + kPrefetchRows) * row_bytes, static_cast<uint64_t>(rows) * row_bytes);
    const BlockQ8_0* rp[kPassPairs];
    for (int64_t r = 0; r < rows; ++r) rp[r] = row_at(r0 + r);
    if (n_fast == 1) {
      float res[kPassPairs];
      switch (rows) {
        case 4: q8_0_pass<4, 1>(rp, nb, fast.data(), res, 1); break;
        case 3: q8_0_pass<3, 1>(rp, nb, fast.data(), res, 1); break;
        case 2: q8_0_pass<2, 1>(rp, nb, fast.data(), res, 1); break;
        default: q8_0_pass<1, 1>(rp, nb, fast.data(), res, 1); break;
      }
      for (int64_t r = 0; r < rows; ++r) out[fast_index[0] * ldo + r0 + r] = res[r];
    } else {
      for (int64_t t0 = 0; t0 < n_fast; t0 += kPassPairs) {
        const int64_t pass = n_fast - t0 < kPassPairs ? n_fast - t0 : kPassPairs;
        float res[kPassPairs];
        switch (pass) {
          case 4: q8_0_pass<1, 4>(rp, nb, fast.data() + t0, res, 1); break;
          case 3: q8_0_pass<1, 3>(rp, nb, fast.data() + t0, res, 1); break;
          case 2: q8_0_pass<1, 2>(rp, nb, fast.data() + t0, res, 1); break;
          default: q8_0_pass<1, 1>(rp, nb, fast.data() + t0, res, 1); break;
        }
        for (int64_t a = 0; a < pass; ++a) out[fast_index[static_cast<size_t>(t0 + a)] * ldo + r0] = res[a];
      }
    }
    for (int64_t r = r0; r < r0 + rows; ++r)
      for (const int64_t t : slow_index) out[t * ldo + r] = kDotAvx2.q8_0_q8_0(n, row_at(r), static_cast<const BlockQ8_0*>(acts[t]));
  }
}

}  // namespace tile_avx2
}  // namespace ds4::quant
