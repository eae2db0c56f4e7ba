// AVX-512 kernels of Default attention (AttentionRowKernels, ops_attention.h):
// score dots and the weighted row sum over f32 or f16 rows, 16 lanes.
//
// Each kernel is one template over the row type and f16 -> f32 is exact, so
// f16 rows give the bits f32 rows holding the same values give. Dots: two
// FMA accumulators per row (even / odd 16-wide chunks, the zero-padded tail
// in the odd one), four rows at a time sharing the q loads; a row's sum does
// not depend on which rows share its group. Weighted sum: each output element
// is one running FMA over the rows in order, whatever block it falls in.
// FMAs are explicit intrinsics; the project-wide -ffp-contract=off keeps the
// compiler from adding others. The file gets the VNNI/BF16 flags of the
// avx512vnni level too, but nothing here is integer or bf16 work for the
// compiler to turn into those instructions, so the plain avx512 level runs it.

#include "core/x86_intrinsics.h"

#include <cstddef>
#include <cstdint>

#include "backend/cpu/ops_attention.h"

namespace ds4::cpu {
namespace {

// Helpers stay in this anonymous namespace: an inline function compiled here
// with the ISA flags could be the copy the linker keeps for baseline callers.
// The loops over a group's rows / chunks are unrolled so that the
// accumulator arrays live in registers (-O2 alone keeps them on the stack).

constexpr size_t kLanes = 16;
constexpr int kDotRows = 4;  // rows per dot group
constexpr int kSumChunks = 8;  // 16-wide output chunks held in registers by the weighted sum

__m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
float to_f32(float v) { return v; }
float to_f32(uint16_t h) { return _cvtsh_ss(h); }

// Fixed order, written out here rather than left to _mm512_reduce_add_ps:
// high 256 bits onto low, high 128 onto low, then pairs, then the last two.
float hsum(__m512 v) {
  const __m512 high = _mm512_shuffle_f32x4(v, v, 0x4e);  // 128-bit lanes 2, 3 first
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(high));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, class Row>
void dots_group(const float* q, const Row* const* rows, size_t dim, float scale, float* scores) {
  __m512 even[R], odd[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 2 * kLanes <= dim; i += 2 * kLanes) {
    const __m512 q0 = load16(q + i), q1 = load16(q + i + kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      even[r] = _mm512_fmadd_ps(q0, load16(rows[r] + i), even[r]);
      odd[r] = _mm512_fmadd_ps(q1, load16(rows[r] + i + kLanes), odd[r]);
    }
  }
  if (i + kLanes <= dim) {
    const __m512 q0 = load16(q + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) even[r] = _mm512_fmadd_ps(q0, load16(rows[r] + i), even[r]);
    i += kLanes;
  }
  if (i < dim) {
    // Zero-padded copies: no load past the row (and nothing for a sanitizer to flag).
    float q_tail[kLanes] = {};
    for (size_t k = i; k < dim; ++k) q_tail[k - i] = q[k];
    const __m512 qt = load16(q_tail);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      Row row_tail[kLanes] = {};
      for (size_t k = i; k < dim; ++k) row_tail[k - i] = rows[r][k];
      odd[r] = _mm512_fmadd_ps(qt, load16(row_tail), odd[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) scores[r] = hsum(_mm512_add_ps(even[r], odd[r])) * scale;
}

template <class Row>
void dots(const float* q, const Row* const* rows, size_t n_rows, size_t dim, float scale, float* scores) {
  size_t r = 0;
  for (; r + kDotRows <= n_rows; r += kDotRows) dots_group<kDotRows>(q, rows + r, dim, scale, scores + r);
  switch (n_rows - r) {
    case 3: dots_group<3>(q, rows + r, dim, scale, scores + r); break;
    case 2: dots_group<2>(q, rows + r, dim, scale, scores + r); break;
    case 1: dots_group<1>(q, rows + r, dim, scale, scores + r); break;
    default: break;
  }
}

// out[d, d + C * 16) over all rows, held in C registers.
template <int C, class Row>
void weighted_block(const Row* const* rows, const float* w, size_t n_rows, size_t d, float* out) {
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (size_t r = 0; r < n_rows; ++r) {
    const __m512 wr = _mm512_set1_ps(w[r]);
    const Row* row = rows[r] + d;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(wr, load16(row + c * kLanes), acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + d + c * kLanes, acc[c]);
}

template <class Row>
void weighted_sum(const Row* const* rows, const float* w, size_t n_rows, size_t dim, float* out) {
  size_t d = 0;
  for (; d + kSumChunks * kLanes <= dim; d += kSumChunks * kLanes) weighted_block<kSumChunks>(rows, w, n_rows, d, out);
  for (; d + kLanes <= dim; d += kLanes) weighted_block<1>(rows, w, n_rows, d, out);
  for (; d < dim; ++d) {
    __m128 acc = _mm_setzero_ps();
    for (size_t r = 0; r < n_rows; ++r) acc = _mm_fmadd_ss(_mm_set_ss(w[r]), _mm_set_ss(to_f32(rows[r][d])), acc);
    out[d] = _mm_cvtss_f32(acc);
  }
}

}  // namespace

extern const AttentionRowKernels kAttentionRowsAvx512 = {"avx512", dots<float>, dots<uint16_t>, weighted_sum<float>,
                                                          weighted_sum<uint16_t>};

}  // namespace ds4::cpu
