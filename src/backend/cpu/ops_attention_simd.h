// The Default attention kernels (AttentionRowKernels, ops_attention.h) as one
// template over a simd_x86.h level S, instantiated by ops_attention_avx2.cpp
// (8 lanes) and ops_attention_avx512.cpp (16 lanes): score dots and the
// weighted row sum over f32 or f16 rows.
//
// Each kernel is one template over the row type and f16 -> f32 is exact, so
// f16 rows give the bits f32 rows holding the same values give. Dots: two
// FMA accumulators per row (even / odd lane-wide chunks, the zero-padded tail
// in the odd one), four rows at a time sharing the q loads; a row's sum does
// not depend on which rows share its group. Weighted sum: each output element
// is one running FMA over the rows in order, whatever block it falls in.
// FMAs are explicit; the project-wide -ffp-contract=off keeps the compiler
// from adding others. The loops over a group's rows / chunks are unrolled so
// that the accumulator arrays live in registers (-O2 alone keeps them on the
// stack).
//
// Include only from a file compiled with S's ISA flags; everything is in an
// anonymous namespace (see simd_x86.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/simd_x86.h"

namespace ds4::cpu {
namespace {

constexpr int kDotRows = 4;    // rows per dot group
constexpr int kSumChunks = 8;  // lane-wide output chunks held in registers by the weighted sum

inline float to_f32(float v) { return v; }
inline float to_f32(uint16_t h) { return _cvtsh_ss(h); }

template <class S, int R, class Row>
void dots_group(const float* q, const Row* const* rows, size_t dim, float scale, float* scores) {
  typename S::V even[R], odd[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) even[r] = odd[r] = S::zero();
  size_t i = 0;
  for (; i + 2 * S::kLanes <= dim; i += 2 * S::kLanes) {
    const typename S::V q0 = S::load(q + i), q1 = S::load(q + i + S::kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      even[r] = S::fmadd(q0, S::load(rows[r] + i), even[r]);
      odd[r] = S::fmadd(q1, S::load(rows[r] + i + S::kLanes), odd[r]);
    }
  }
  if (i + S::kLanes <= dim) {
    const typename S::V q0 = S::load(q + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) even[r] = S::fmadd(q0, S::load(rows[r] + i), even[r]);
    i += S::kLanes;
  }
  if (i < dim) {
    // Zero-padded copies: no load past the row (and nothing for a sanitizer to flag).
    float q_tail[S::kLanes] = {};
    for (size_t k = i; k < dim; ++k) q_tail[k - i] = q[k];
    const typename S::V qt = S::load(q_tail);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      Row row_tail[S::kLanes] = {};
      for (size_t k = i; k < dim; ++k) row_tail[k - i] = rows[r][k];
      odd[r] = S::fmadd(qt, S::load(row_tail), odd[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) scores[r] = S::hsum(S::add(even[r], odd[r])) * scale;
}

template <class S, class Row>
void dots(const float* q, const Row* const* rows, size_t n_rows, size_t dim, float scale, float* scores) {
  size_t r = 0;
  for (; r + kDotRows <= n_rows; r += kDotRows) dots_group<S, kDotRows>(q, rows + r, dim, scale, scores + r);
  switch (n_rows - r) {
    case 3: dots_group<S, 3>(q, rows + r, dim, scale, scores + r); break;
    case 2: dots_group<S, 2>(q, rows + r, dim, scale, scores + r); break;
    case 1: dots_group<S, 1>(q, rows + r, dim, scale, scores + r); break;
    default: break;
  }
}

// out[d, d + C * lanes) over all rows, held in C registers.
template <class S, int C, class Row>
void weighted_block(const Row* const* rows, const float* w, size_t n_rows, size_t d, float* out) {
  typename S::V acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = S::zero();
  for (size_t r = 0; r < n_rows; ++r) {
    const typename S::V wr = S::set1(w[r]);
    const Row* row = rows[r] + d;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = S::fmadd(wr, S::load(row + c * S::kLanes), acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) S::store(out + d + c * S::kLanes, acc[c]);
}

template <class S, class Row>
void weighted_sum(const Row* const* rows, const float* w, size_t n_rows, size_t dim, float* out) {
  size_t d = 0;
  for (; d + kSumChunks * S::kLanes <= dim; d += kSumChunks * S::kLanes)
    weighted_block<S, kSumChunks>(rows, w, n_rows, d, out);
  for (; d + S::kLanes <= dim; d += S::kLanes) weighted_block<S, 1>(rows, w, n_rows, d, out);
  for (; d < dim; ++d) {
    __m128 acc = _mm_setzero_ps();
    for (size_t r = 0; r < n_rows; ++r) acc = _mm_fmadd_ss(_mm_set_ss(w[r]), _mm_set_ss(to_f32(rows[r][d])), acc);
    out[d] = _mm_cvtss_f32(acc);
  }
}

// Two heads at once (the heads of a layer all attend to the same rows): each
// row chunk is loaded (and widened from f16) once for both. Every (head, row)
// dot and every output element keeps the one-head kernels' operations, so
// the results are theirs bit for bit.
template <class S, int R, class Row>
void dots2_group(const float* q0, const float* q1, const Row* const* rows, size_t dim, float scale, float* s0,
                 float* s1) {
  typename S::V even0[R], odd0[R], even1[R], odd1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) even0[r] = odd0[r] = even1[r] = odd1[r] = S::zero();
  size_t i = 0;
  for (; i + 2 * S::kLanes <= dim; i += 2 * S::kLanes) {
    const typename S::V a0 = S::load(q0 + i), a1 = S::load(q0 + i + S::kLanes);
    const typename S::V b0 = S::load(q1 + i), b1 = S::load(q1 + i + S::kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const typename S::V lo = S::load(rows[r] + i), hi = S::load(rows[r] + i + S::kLanes);
      even0[r] = S::fmadd(a0, lo, even0[r]);
      odd0[r] = S::fmadd(a1, hi, odd0[r]);
      even1[r] = S::fmadd(b0, lo, even1[r]);
      odd1[r] = S::fmadd(b1, hi, odd1[r]);
    }
  }
  if (i < dim) {
    // Rare (dim not a multiple of two register widths): the one-head tails.
    float t0[R], t1[R];
    dots_group<S, R>(q0, rows, dim, scale, t0);
    dots_group<S, R>(q1, rows, dim, scale, t1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      s0[r] = t0[r];
      s1[r] = t1[r];
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    s0[r] = S::hsum(S::add(even0[r], odd0[r])) * scale;
    s1[r] = S::hsum(S::add(even1[r], odd1[r])) * scale;
  }
}

template <class S, class Row>
void dots2(const float* q0, const float* q1, const Row* const* rows, size_t n_rows, size_t dim, float scale, float* s0,
           float* s1) {
  size_t r = 0;
  for (; r + kDotRows <= n_rows; r += kDotRows) dots2_group<S, kDotRows>(q0, q1, rows + r, dim, scale, s0 + r, s1 + r);
  switch (n_rows - r) {
    case 3: dots2_group<S, 3>(q0, q1, rows + r, dim, scale, s0 + r, s1 + r); break;
    case 2: dots2_group<S, 2>(q0, q1, rows + r, dim, scale, s0 + r, s1 + r); break;
    case 1: dots2_group<S, 1>(q0, q1, rows + r, dim, scale, s0 + r, s1 + r); break;
    default: break;
  }
}

template <class S, int C, class Row>
void weighted_block2(const Row* const* rows, const float* w0, const float* w1, size_t n_rows, size_t d, float* out0,
                     float* out1) {
  typename S::V acc0[C], acc1[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = S::zero();
  for (size_t r = 0; r < n_rows; ++r) {
    const typename S::V a = S::set1(w0[r]), b = S::set1(w1[r]);
    const Row* row = rows[r] + d;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const typename S::V v = S::load(row + c * S::kLanes);
      acc0[c] = S::fmadd(a, v, acc0[c]);
      acc1[c] = S::fmadd(b, v, acc1[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    S::store(out0 + d + c * S::kLanes, acc0[c]);
    S::store(out1 + d + c * S::kLanes, acc1[c]);
  }
}

template <class S, class Row>
void weighted_sum2(const Row* const* rows, const float* w0, const float* w1, size_t n_rows, size_t dim, float* out0,
                   float* out1) {
  constexpr int kChunks2 = kSumChunks / 2;
  size_t d = 0;
  for (; d + kChunks2 * S::kLanes <= dim; d += kChunks2 * S::kLanes)
    weighted_block2<S, kChunks2>(rows, w0, w1, n_rows, d, out0, out1);
  if (d < dim) {
    // The rest (under kChunks2 registers wide) through the one-head kernel,
    // whose blocks and scalar tail give every element the same operations.
    weighted_sum<S>(rows, w0, n_rows, dim, out0);
    weighted_sum<S>(rows, w1, n_rows, dim, out1);
  }
}

}  // namespace
}  // namespace ds4::cpu
