// Default indexer scoring for one x86 level (IndexerScoreKernels,
// ops_indexer.h), one template over the level's traits (simd_x86.h); included
// only by ops_indexer_avx2.cpp and ops_indexer_avx512.cpp.
//
// Layout: q is transposed to qt[i][h] (heads zero-padded to a whole vector),
// so one vector holds element i of L heads' queries; each thread keeps the
// last transposition while q stays the same. Rows go in groups of kRows:
// each row chunk is read (f16: converted) once per block of kHeadVecs head
// vectors, and each of its elements is broadcast against the block, so a
// group's accumulators (kRows x kHeadVecs vectors) stay in registers.
//
// Order (results depend only on the inputs and the level): dot(row, q_h) is
// one FMA chain over i = 0 .. dim-1; the score is a vector of L lanes where
// lane j accumulates fma(max(dot_h, 0), w_h) over heads h = j, j + L, ... in
// order, then a fixed horizontal sum. Neither depends on which rows share a
// group or on how rows are split over calls; f16 -> f32 is exact, so f16 rows
// score as their f32 values do. Padded heads add max(0, 0) * 0 = +0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/indexer_query_layout.h"
#include "backend/cpu/simd_x86.h"

namespace ds4::cpu {

namespace {

template <class S, int kRows, int kHeadVecs>
class IndexerScorer {
 public:
  template <class Row>
  static void scores(const float* q, const float* w, size_t n_head, size_t dim, const Row* const* rows,
                     size_t n_rows, float* out) {
    if (n_rows == 0) return;
    const IndexerQueryLayout layout = indexer_query_layout(q, w, n_head, dim, L);
    const float* qt = layout.qt;
    const float* wp = layout.wp;
    const size_t hp = layout.hp;
    size_t r = 0;
    for (; r + kRows <= n_rows; r += kRows) group<kRows>(qt, wp, hp, dim, rows + r, out + r);
    if (r < n_rows) rest<kRows - 1>(n_rows - r, qt, wp, hp, dim, rows + r, out + r);
  }

 private:
  using V = typename S::V;
  static constexpr size_t L = S::kLanes;

  // Chunk [i, i + n) of a row as f32: in place for f32 rows, else in buf.
  static const float* chunk(const float* row, size_t n, float* buf) {
    if (n == L) return row;
    std::copy(row, row + n, buf);
    return buf;
  }
  static const float* chunk(const uint16_t* row, size_t n, float* buf) {
    if (n == L) {
      S::store(buf, S::load(row));
    } else {
      uint16_t tail[L] = {};  // zero-padded copy: no load past the row
      std::copy(row, row + n, tail);
      S::store(buf, S::load(tail));
    }
    return buf;
  }

  // The remaining left < kRows rows, as one group of that size.
  template <int R, class Row>
  static void rest(size_t left, const float* qt, const float* wp, size_t hp, size_t dim, const Row* const* rows,
                   float* out) {
    if constexpr (R > 0) {
      if (left == R)
        group<R>(qt, wp, hp, dim, rows, out);
      else
        rest<R - 1>(left, qt, wp, hp, dim, rows, out);
    }
  }

  template <int R, class Row>
  static void group(const float* qt, const float* wp, size_t hp, size_t dim, const Row* const* rows, float* out) {
    V total[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) total[r] = S::zero();
    size_t h = 0;
    for (; h + kHeadVecs * L <= hp; h += kHeadVecs * L) head_block<R, kHeadVecs>(qt + h, wp + h, hp, dim, rows, total);
    if (h < hp) head_rest<R, kHeadVecs - 1>((hp - h) / L, qt + h, wp + h, hp, dim, rows, total);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[r] = S::hsum(total[r]);
  }

  template <int R, int NV, class Row>
  static void head_rest(size_t vecs, const float* qt, const float* wp, size_t hp, size_t dim, const Row* const* rows,
                        V* total) {
    if constexpr (NV > 0) {
      if (vecs == NV)
        head_block<R, NV>(qt, wp, hp, dim, rows, total);
      else
        head_rest<R, NV - 1>(vecs, qt, wp, hp, dim, rows, total);
    }
  }

  // total[r] += max(dot(row r, q_h), 0) * w_h for the NV * L heads from qt's column 0.
  template <int R, int NV, class Row>
  static void head_block(const float* qt, const float* wp, size_t hp, size_t dim, const Row* const* rows,
                         V* total) {
    V acc[R][NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = S::zero();
    float buf[R][L];
    for (size_t i = 0; i < dim; i += L) {
      const size_t n = std::min(L, dim - i);
      const float* vals[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) vals[r] = chunk(rows[r] + i, n, buf[r]);
      const float* qi = qt + i * hp;
      for (size_t k = 0; k < n; ++k, qi += hp) {
        V qv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) qv[v] = S::load(qi + v * L);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const V b = S::set1(vals[r][k]);
#pragma GCC unroll 8
          for (int v = 0; v < NV; ++v) acc[r][v] = S::fmadd(b, qv[v], acc[r][v]);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) total[r] = S::fmadd(S::max(acc[r][v], S::zero()), S::load(wp + v * L), total[r]);
  }
};

}  // namespace
}  // namespace ds4::cpu
