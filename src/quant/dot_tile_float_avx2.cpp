// Tile kernels (dot_tile.h) for the float formats (F16, BF16, F32 weights, f32
// activations) at the avx2 level.
//
// Each (row, activation) pair sees exactly the FMA sequence of kDotAvx2's
// one-row kernel (dot_avx2.cpp's dot_float): four 8-lane accumulators fed the
// 32-element chunks, acc0 the 8-element remainder, acc1 the zero-padded tail,
// then the same final reduction. The four accumulators are independent FMA
// chains, so a tile computes them in four passes (one accumulator per pair at
// a time, over column blocks that stay in L1), which frees the registers for
// 2 rows x 6 activations: each weight
// vector is loaded (and widened) once for 6 activations and each activation
// vector once for 2 rows. A single activation (decode) runs the one-row
// kernel, which keeps more chains in flight.
#include "core/x86_kernel_prelude.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "quant/dot_tile.h"
#include "quant/dot_x86_common.h"

namespace ds4::quant {

extern const DotKernels kDotAvx2;

namespace tile_avx2 {
namespace {

// Weight loaders: dot_avx2.cpp's (same widening, same lane order).
struct F32Weights {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};
struct F16Weights {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
};
struct BF16Weights {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
};

constexpr int kFloatRows = 2;
// 12 independent FMA chains: enough to cover the FMA latency (4-5 cycles) on
// two pipes; 8 left half the FMA throughput unused on AMD Zen 4.
constexpr int kFloatActs = 6;

// dot_avx2.cpp's final reduction of one 8-lane sum.
inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Elements per column block: the four passes over a block find its weights
// and activations in L1 (2 rows and 6 activations of 512 elements: 16 KB at
// most) instead of streaming every row from L2 four times.
constexpr int64_t kColumnBlock = 512;

// dot_float's accumulator kAcc (0..3) for 2 rows x T activations over the
// 32-element chunks starting in [begin, end): their FMAs at offset 8 * kAcc,
// in dot_float's order, continuing the sums in acc.
template <typename Weights, int T, int kAcc>
inline void float_acc_pass(int64_t begin, int64_t end, const typename Weights::T* const* w, const float* const* x,
                           __m256 (&acc)[kFloatRows][T]) {
  __m256 a[kFloatRows][T];
#pragma GCC unroll 2
  for (int r = 0; r < kFloatRows; ++r) {
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) a[r][t] = acc[r][t];
  }
  for (int64_t i = begin + 8 * kAcc; i < end; i += 32) {
    __m256 wv[kFloatRows];
#pragma GCC unroll 2
    for (int r = 0; r < kFloatRows; ++r) wv[r] = Weights::load(w[r] + i);
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      // One load per activation vector for both rows (the compiler would
      // fold it into each FMA: twice the loads, and loads bound this loop).
      const __m256 xv = in_register(_mm256_loadu_ps(x[t] + i));
#pragma GCC unroll 2
      for (int r = 0; r < kFloatRows; ++r) a[r][t] = _mm256_fmadd_ps(wv[r], xv, a[r][t]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < kFloatRows; ++r) {
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) acc[r][t] = a[r][t];
  }
}

template <typename Weights, int T>
void float_quad(int64_t n, const typename Weights::T* const* w, const float* const* x, int rows, float* out,
                int64_t ldo) {
  __m256 part[4][kFloatRows][T];
  for (auto& p : part)
    for (auto& pr : p)
      for (__m256& v : pr) v = _mm256_setzero_ps();
  const int64_t chunked = n / 32 * 32;
  for (int64_t c0 = 0; c0 < chunked; c0 += kColumnBlock) {
    const int64_t c1 = std::min(chunked, c0 + kColumnBlock);
    float_acc_pass<Weights, T, 0>(c0, c1, w, x, part[0]);
    float_acc_pass<Weights, T, 1>(c0, c1, w, x, part[1]);
    float_acc_pass<Weights, T, 2>(c0, c1, w, x, part[2]);
    float_acc_pass<Weights, T, 3>(c0, c1, w, x, part[3]);
  }
  // acc0's 8-element remainder, then acc1's zero-padded tail.
  int64_t i = chunked;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 2
    for (int r = 0; r < kFloatRows; ++r) {
      const __m256 wv = Weights::load(w[r] + i);
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) part[0][r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[t] + i), part[0][r][t]);
    }
  }
  if (i < n) {
    const size_t count = static_cast<size_t>(n - i);
    for (int r = 0; r < kFloatRows; ++r) {
      typename Weights::T wt[8] = {};
      std::memcpy(wt, w[r] + i, count * sizeof(wt[0]));
      const __m256 wv = Weights::load(wt);
      for (int t = 0; t < T; ++t) {
        float xt[8] = {};
        std::memcpy(xt, x[t] + i, count * sizeof(float));
        part[1][r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xt), part[1][r][t]);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int t = 0; t < T; ++t) {
      out[t * ldo + r] = hsum_ps(
          _mm256_add_ps(_mm256_add_ps(part[0][r][t], part[1][r][t]), _mm256_add_ps(part[2][r][t], part[3][r][t])));
    }
  }
}

template <typename Weights>
void float_tile(float (*dot)(int64_t, const typename Weights::T*, const float*), int64_t n, const uint8_t* w,
                uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts, float* out,
                int64_t ldo) {
  using W = typename Weights::T;
  // Activation passes outer: a pass's activations stay in cache while the
  // call's rows stream past them.
  for (int64_t t0 = 0; t0 < n_acts; t0 += kFloatActs) {
    const int pass_acts = static_cast<int>(std::min<int64_t>(kFloatActs, n_acts - t0));
    if (pass_acts == 1) {
      const auto* x = static_cast<const float*>(acts[t0]);
      for (int64_t r = 0; r < n_rows; ++r) {
        out[t0 * ldo + r] = dot(n, reinterpret_cast<const W*>(w + static_cast<uint64_t>(r) * row_bytes), x);
      }
      continue;
    }
    const float* x[kFloatActs];
    for (int t = 0; t < kFloatActs; ++t) x[t] = static_cast<const float*>(acts[t0 + std::min(t, pass_acts - 1)]);
    for (int64_t r0 = 0; r0 < n_rows; r0 += kFloatRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kFloatRows, n_rows - r0));
      const W* wr[kFloatRows];
      for (int r = 0; r < kFloatRows; ++r) {
        // A row past the end repeats the last one; its results are dropped.
        wr[r] = reinterpret_cast<const W*>(w + static_cast<uint64_t>(r0 + std::min(r, rows - 1)) * row_bytes);
      }
      float* o = out + t0 * ldo + r0;
      switch (pass_acts) {
        case 2: float_quad<Weights, 2>(n, wr, x, rows, o, ldo); break;
        case 3: float_quad<Weights, 3>(n, wr, x, rows, o, ldo); break;
        case 4: float_quad<Weights, 4>(n, wr, x, rows, o, ldo); break;
        case 5: float_quad<Weights, 5>(n, wr, x, rows, o, ldo); break;
        default: float_quad<Weights, kFloatActs>(n, wr, x, rows, o, ldo); break;
      }
    }
  }
}

}  // namespace

void f16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
             float* out, int64_t ldo) {
  float_tile<F16Weights>(kDotAvx2.f16_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void bf16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
              int64_t n_acts, float* out, int64_t ldo) {
  float_tile<BF16Weights>(kDotAvx2.bf16_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void f32_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
             float* out, int64_t ldo) {
  float_tile<F32Weights>(kDotAvx2.f32_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

}  // namespace tile_avx2
}  // namespace ds4::quant
