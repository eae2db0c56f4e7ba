// Decode's matrix-vector products at the avx2 level (dot_rows_avx2.h): 8 rows
// per pass, row r's block partials (dot_blocks_avx2.h, the one-row kernels'
// own) folded with the other 7 rows' into lane r by one transpose-add
// (hsum8_i32), then the block's float term for the 8 rows as one vector: the
// scalar reference's operations, lane by lane, in block order. Per block this
// shares the activation's loads (and |x|) among the 8 rows and replaces 8
// scalar folds and terms by one vector each.
//
// Reading 8 short rows (0.5-4 KB) block by block defeats the hardware
// prefetchers, so the next 8 rows (contiguous) are swept into cache linearly
// meanwhile, an equal share per block (as the AVX-512 decode does), into L2
// (prefetcht1): into L1 (t0) they evicted the rows being read; ds4-bench-matvec
// -t 2 on AMD Zen 4, 3 alternating rounds: Q8_0 27.6-29.3 -> 32-55 GB/s, Q4_K
// 22-25 -> 30-32 (no prefetch at all: 24-27 and 14-16).
#include "core/x86_kernel_prelude.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "quant/dot_rows_avx2.h"
#include "quant/dot_x86_common.h"
#include "quant/dot_blocks_avx2.h"
#include "quant/mxfp4.h"

namespace ds4::quant::avx2_detail {
namespace {

constexpr int kRows = 8;

// The field of kBytes (1 or 2) at `offset` in block i of each of the 8 rows,
// as 8 words (row r in word r). Inserted word by word: eight narrow stores read
// back as one vector would stall on store forwarding.
template <size_t kBytes, typename Block>
inline __m128i rows_words(const Block* const* rows, int64_t i, size_t offset) {
  auto word = [&](int r) {
    uint16_t v = 0;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(&rows[r][i]) + offset, kBytes);
    return static_cast<int>(v);
  };
  __m128i v = _mm_cvtsi32_si128(word(0));
  v = _mm_insert_epi16(v, word(1), 1);
  v = _mm_insert_epi16(v, word(2), 2);
  v = _mm_insert_epi16(v, word(3), 3);
  v = _mm_insert_epi16(v, word(4), 4);
  v = _mm_insert_epi16(v, word(5), 5);
  v = _mm_insert_epi16(v, word(6), 6);
  v = _mm_insert_epi16(v, word(7), 7);
  return v;
}

// The f16 at `offset` in block i of each row, as f32 lanes.
template <typename Block>
inline __m256 rows_f16(const Block* const* rows, int64_t i, size_t offset) {
  return _mm256_cvtph_ps(rows_words<2>(rows, i, offset));
}

// Each row's block scale d as f32 lanes: the f16 field d, or IQ1_M's
// assembled from its scale words.
template <typename Block>
inline __m256 rows_d(const Block* const* rows, int64_t i) {
  return rows_f16(rows, i, offsetof(Block, d));
}
inline __m256 rows_d(const BlockIQ1_M* const* rows, int64_t i) {
  __m128i v = _mm_cvtsi32_si128(iq1_m_d_bits(rows[0][i]));
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[1][i]), 1);
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[2][i]), 2);
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[3][i]), 3);
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[4][i]), 4);
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[5][i]), 5);
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[6][i]), 6);
  v = _mm_insert_epi16(v, iq1_m_d_bits(rows[7][i]), 7);
  return _mm256_cvtph_ps(v);
}

// The byte at `offset` in block i of each row, as int32 lanes.
template <typename Block>
inline __m256i rows_u8(const Block* const* rows, int64_t i, size_t offset) {
  return _mm256_cvtepu16_epi32(rows_words<1>(rows, i, offset));
}

// ggml's E8M0 half scale 2^(e-128) (e8m0_to_fp32_half) per lane.
inline __m256 e8m0_half_lanes(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
}

// The driver: groups of 8 rows (a short last group repeats its last row; those
// lanes are not stored), acc = kernel.block(rows, i, acc) for every block in
// order, then kernel.finish(acc) to out.
template <typename Block, typename Kernel>
void rows8(const Kernel& kernel, int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, float* out) {
  const int64_t nb = n / Kernel::kBlockElems;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int count = static_cast<int>(std::min<int64_t>(kRows, n_rows - r0));
    const Block* rows[kRows];
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = r0 + std::min(r, count - 1);
      rows[r] = reinterpret_cast<const Block*>(w + static_cast<uint64_t>(row) * row_bytes);
    }
    const int64_t next_rows = std::min<int64_t>(kRows, n_rows - r0 - kRows);
    const char* sweep = next_rows > 0 ? reinterpret_cast<const char*>(w + static_cast<uint64_t>(r0 + kRows) * row_bytes)
                                      : nullptr;
    const size_t span = next_rows > 0 ? static_cast<size_t>(next_rows - 1) * row_bytes +
                                             static_cast<size_t>(nb) * sizeof(Block)
                                       : 0;
    const size_t share = nb > 0 ? (span + static_cast<size_t>(nb) - 1) / static_cast<size_t>(nb) : 0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      if (sweep != nullptr) {
        const char* p = sweep + static_cast<size_t>(i) * share;
        for (size_t off = 0; off < share; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
      }
      acc = kernel.block(rows, i, acc);
    }
    acc = kernel.finish(acc);
    if (count == kRows) {
      _mm256_storeu_ps(out + r0, acc);
    } else {
      alignas(32) float t[kRows];
      _mm256_store_ps(t, acc);
      std::memcpy(out + r0, t, static_cast<size_t>(count) * sizeof(float));
    }
  }
}

struct NoFinish {
  static __m256 finish(__m256 acc) { return acc; }
};

// ---- Q8_0: float(isum) * (d_w * d_x) per block ----

template <bool kSigned>
struct Q8_0Kernel : NoFinish {
  static constexpr int kBlockElems = kQK8_0;
  const BlockQ8_0* x;
  __m256 block(const BlockQ8_0* const* rows, int64_t i, __m256 acc) const {
    __m256i p[kRows];
    if constexpr (kSigned) {
      const __m256i xv = in_register(load256(x[i].qs));
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) p[r] = q8_0_block_signed(load256(rows[r][i].qs), xv);
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) p[r] = q8_0_block(rows[r][i], x[i]);
    }
    const __m256 d = _mm256_mul_ps(rows_f16(rows, i, offsetof(BlockQ8_0, d)), _mm256_set1_ps(f16_value(x[i].d)));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(hsum8_i32(p)), d));
  }
};

// True when no code of x is -128 (q8_0_block_signed's precondition);
// quantize_row_q8_0_act never writes one.
bool q8_0_no_min_code(const BlockQ8_0* x, int64_t nb) {
  const __m256i min = _mm256_set1_epi8(static_cast<char>(-128));
  __m256i any = _mm256_setzero_si256();
  for (int64_t i = 0; i < nb; ++i) any = _mm256_or_si256(any, _mm256_cmpeq_epi8(load256(x[i].qs), min));
  return _mm256_testz_si256(any, any) != 0;
}

// ---- MXFP4: (d_x * e8m0_half(e)) * float(isum) per block ----

struct Mxfp4Kernel : NoFinish {
  static constexpr int kBlockElems = kQKMxfp4;
  const BlockQ8_0* x;
  __m256i table = _mm256_broadcastsi128_si256(load128(kMxfp4DoubledValues.data()));
  __m256 block(const BlockMXFP4* const* rows, int64_t i, __m256 acc) const {
    const __m256i xv = in_register(load256(x[i].qs));
    const __m256i ax = _mm256_abs_epi8(xv);
    __m256i p[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m128i q = load128(rows[r][i].qs);
      const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
      const __m256i wv = _mm256_shuffle_epi8(table, codes);
      // 16 pair sums of at most 2 * 128 * 12 = 3072: a half's 8 add up to
      // 24576, within hsum8_i16's int16.
      p[r] = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv));
    }
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16_value(x[i].d)),
                                   e8m0_half_lanes(rows_u8(rows, i, offsetof(BlockMXFP4, e))));
    return _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8_i16(p))));
  }
};

// ---- Q2_K / Q4_K / Q5_K: dall * float(isum) - dmin * float(msum) per block ----

template <typename Block>
struct KQuantKernel : NoFinish {
  static constexpr int kBlockElems = kQK_K;
  const BlockQ8_K* x;
  __m256 block(const Block* const* rows, int64_t i, __m256 acc) const {
    __m256i isum[kRows], msum[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      if constexpr (std::is_same_v<Block, BlockQ2_K>) {
        q2_K_block_parts(rows[r][i], x[i], isum[r], msum[r]);
      } else if constexpr (std::is_same_v<Block, BlockQ4_K>) {
        q4_K_block_parts(rows[r][i], x[i], isum[r], msum[r]);
      } else {
        static_assert(std::is_same_v<Block, BlockQ5_K>);
        q5_K_block_parts(rows[r][i], x[i], isum[r], msum[r]);
      }
    }
    const __m256 xd = _mm256_set1_ps(x[i].d);
    const __m256 dall = _mm256_mul_ps(xd, rows_f16(rows, i, offsetof(Block, d)));
    const __m256 dmin = _mm256_mul_ps(xd, rows_f16(rows, i, offsetof(Block, dmin)));
    const __m256 term = _mm256_sub_ps(_mm256_mul_ps(dall, _mm256_cvtepi32_ps(hsum8_i32(isum))),
                                      _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(hsum8_i32(msum))));
    return _mm256_add_ps(acc, term);
  }
};

// ---- Q3_K / Q6_K / IQ4_XS / IQ3_XXS / IQ2_XS / IQ2_S / IQ1_M: (d_w * d_x) * float(isum) per block ----

// Parts::of(row block, activation block): 8 int32 lanes totalling the block's
// isum; Parts::finish(sum): the one-row kernel's last step on its float sum.
template <typename Block, typename Parts>
struct ScaledIntKernel {
  static constexpr int kBlockElems = kQK_K;
  const BlockQ8_K* x;
  __m256 block(const Block* const* rows, int64_t i, __m256 acc) const {
    __m256i p[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) p[r] = Parts::of(rows[r][i], x[i]);
    const __m256 d = _mm256_mul_ps(rows_d(rows, i), _mm256_set1_ps(x[i].d));
    __m256 value = _mm256_cvtepi32_ps(hsum8_i32(p));
    if constexpr (requires { Parts::kBlockScale; }) value = _mm256_mul_ps(_mm256_set1_ps(Parts::kBlockScale), value);
    return _mm256_add_ps(acc, _mm256_mul_ps(d, value));
  }
  static __m256 finish(__m256 acc) { return Parts::finish(acc); }
};
// The float sum times kScale at the end (IQ3: 0.25, IQ2_XS: 0.125), as the
// one-row kernels do.
template <int kNumerator, int kDenominator>
struct ScaledBy {
  static __m256 finish(__m256 acc) {
    return _mm256_mul_ps(_mm256_set1_ps(static_cast<float>(kNumerator) / static_cast<float>(kDenominator)), acc);
  }
};
struct Q3KParts : NoFinish {
  static __m256i of(const BlockQ3_K& w, const BlockQ8_K& x) { return q3_K_block_parts(w, x); }
};
struct Q6KParts : NoFinish {
  static __m256i of(const BlockQ6_K& w, const BlockQ8_K& x) { return q6_K_block_parts(w, x); }
};
struct Iq4XsParts : NoFinish {
  static __m256i of(const BlockIQ4_XS& w, const BlockQ8_K& x) { return iq4_xs_block_parts(w, x); }
};
struct Iq3XxsParts : ScaledBy<1, 4> {
  static __m256i of(const BlockIQ3_XXS& w, const BlockQ8_K& x) { return iq3_xxs_block_parts(w, x); }
};
struct Iq3XxsSignedXParts : ScaledBy<1, 4> {
  static __m256i of(const BlockIQ3_XXS& w, const BlockQ8_K& x) { return iq3_xxs_block_parts<true>(w, x); }
};
struct Iq2XsParts : ScaledBy<1, 8> {
  static __m256i of(const BlockIQ2_XS& w, const BlockQ8_K& x) { return iq2_xs_block_parts(w, x); }
};
struct Iq2SParts : ScaledBy<1, 8> {
  static __m256i of(const BlockIQ2_S& w, const BlockQ8_K& x) { return iq2_s_block_parts(w, x); }
};
// The same integers for activations without a -128 code, in fewer uops.
template <typename Block>
struct SignedXParts : ScaledBy<1, 8> {
  static __m256i of(const Block& w, const BlockQ8_K& x) { return halves_block_parts<true>(w, x); }
};
// IQ1_M's one-row kernel scales each block's integer by 0.125 (kBlockScale)
// before the d factor, as the scalar reference.
struct Iq1MParts : NoFinish {
  static constexpr float kBlockScale = 0.125f;
  static __m256i of(const BlockIQ1_M& w, const BlockQ8_K& x) { return iq1_m_block_parts(w, x); }
};
using Q3KKernel = ScaledIntKernel<BlockQ3_K, Q3KParts>;
using Q6KKernel = ScaledIntKernel<BlockQ6_K, Q6KParts>;
using Iq4XsKernel = ScaledIntKernel<BlockIQ4_XS, Iq4XsParts>;
using Iq3XxsKernel = ScaledIntKernel<BlockIQ3_XXS, Iq3XxsParts>;
using Iq2XsKernel = ScaledIntKernel<BlockIQ2_XS, Iq2XsParts>;
using Iq2SKernel = ScaledIntKernel<BlockIQ2_S, Iq2SParts>;
using Iq1MKernel = ScaledIntKernel<BlockIQ1_M, Iq1MParts>;

// ---- IQ2_XXS: (d_w * d_x) * float(isum) per block, 0.125 * the sum ----

struct Iq2XxsKernel {
  static constexpr int kBlockElems = kQK_K;
  const BlockQ8_K* x;
  __m256 block(const BlockIQ2_XXS* const* rows, int64_t i, __m256 acc) const {
    __m256i a[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) a[r] = _mm256_setzero_si256();
    // Sub-blocks outer: each activation chunk is loaded and made absolute
    // once for the 8 rows.
#pragma GCC unroll 2
    for (int b = 0; b < 8; ++b) {
      const __m256i xv = in_register(load256(x[i].qs + 32 * b));
      const __m256i ax = _mm256_abs_epi8(xv);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) a[r] = iq2_xxs_sub_block(a[r], iq2_xxs_aux(rows[r][i], b), xv, ax);
    }
    const __m256 d = _mm256_mul_ps(rows_f16(rows, i, offsetof(BlockIQ2_XXS, d)), _mm256_set1_ps(x[i].d));
    return _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8_i32(a))));
  }
  static __m256 finish(__m256 acc) { return _mm256_mul_ps(_mm256_set1_ps(0.125f), acc); }
};

// The same sums for activations without a -128 code (quantize_row_q8_K never
// writes one), in fewer uops: the grid magnitudes (u8) against x carrying the
// weight signs (x = -128 would overflow there), the signs made in registers
// (parity_sign_controls) instead of from four table loads. Rows outer: one
// accumulator live, x re-read from L1.
struct Iq2XxsSignedKernel {
  static constexpr int kBlockElems = kQK_K;
  const BlockQ8_K* x;
  Iq2SignConstants signs{};
  __m256 block(const BlockIQ2_XXS* const* rows, int64_t i, __m256 acc) const {
    __m256i a[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const auto* q = reinterpret_cast<const uint8_t*>(rows[r][i].qs);
      // Opaque per row, so the compiler re-reads x from L1 for each row
      // instead of holding its 8 chunks in registers (which spills).
      const int8_t* xq = in_register(x[i].qs);
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
      for (int b = 0; b < 8; ++b) {
        const uint8_t* sub = q + 8 * b;
        uint64_t aux;
        std::memcpy(&aux, sub, 8);
        aux = in_register(aux);
        const __m256i sign_word = _mm256_broadcastd_epi32(_mm_loadu_si32(sub + 4));
        const __m256i xs = _mm256_sign_epi8(load256(xq + 32 * b), parity_sign_controls(sign_word, signs));
        const uint64_t* grid = kIq2xxsGrid.data();
        const __m256i g = _mm256_set_epi64x(
            static_cast<int64_t>(grid[(aux >> 24) & 255]), static_cast<int64_t>(grid[(aux >> 16) & 255]),
            static_cast<int64_t>(grid[(aux >> 8) & 255]), static_cast<int64_t>(grid[aux & 255]));
        const __m256i prod = _mm256_maddubs_epi16(g, xs);
        const __m256i mult = iq2_xxs_multiplier_words(aux);
        // In order, in a register: left alone, the compiler holds all 64
        // products for a later tree of adds and spills them.
        sum[b & 1] = in_register(_mm256_add_epi32(sum[b & 1], _mm256_madd_epi16(prod, mult)));
      }
      a[r] = _mm256_add_epi32(sum[0], sum[1]);
    }
    const __m256 d = _mm256_mul_ps(rows_f16(rows, i, offsetof(BlockIQ2_XXS, d)), _mm256_set1_ps(x[i].d));
    return _mm256_add_ps(acc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8_i32(a))));
  }
  static __m256 finish(__m256 acc) { return Iq2XxsKernel::finish(acc); }
};

bool q8_K_no_min_code(const BlockQ8_K* x, int64_t nb) {
  const __m256i min = _mm256_set1_epi8(static_cast<char>(-128));
  __m256i any = _mm256_setzero_si256();
  for (int64_t i = 0; i < nb; ++i)
    for (int c = 0; c < kQK_K / 32; ++c) any = _mm256_or_si256(any, _mm256_cmpeq_epi8(load256(x[i].qs + 32 * c), min));
  return _mm256_testz_si256(any, any) != 0;
}

}  // namespace

void q8_0_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_0* x, float* out) {
  if (q8_0_no_min_code(x, n / kQK8_0)) {
    rows8<BlockQ8_0>(Q8_0Kernel<true>{{}, x}, n, w, row_bytes, n_rows, out);
  } else {
    rows8<BlockQ8_0>(Q8_0Kernel<false>{{}, x}, n, w, row_bytes, n_rows, out);
  }
}

void mxfp4_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_0* x, float* out) {
  rows8<BlockMXFP4>(Mxfp4Kernel{{}, x}, n, w, row_bytes, n_rows, out);
}

void q2_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockQ2_K>(KQuantKernel<BlockQ2_K>{{}, x}, n, w, row_bytes, n_rows, out);
}

void q4_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockQ4_K>(KQuantKernel<BlockQ4_K>{{}, x}, n, w, row_bytes, n_rows, out);
}

void q3_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockQ3_K>(Q3KKernel{x}, n, w, row_bytes, n_rows, out);
}

void iq4_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockIQ4_XS>(Iq4XsKernel{x}, n, w, row_bytes, n_rows, out);
}

void iq3_xxs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  if (q8_K_no_min_code(x, n / kQK_K)) {
    rows8<BlockIQ3_XXS>(ScaledIntKernel<BlockIQ3_XXS, Iq3XxsSignedXParts>{x}, n, w, row_bytes, n_rows, out);
  } else {
    rows8<BlockIQ3_XXS>(Iq3XxsKernel{x}, n, w, row_bytes, n_rows, out);
  }
}

void iq2_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  if (q8_K_no_min_code(x, n / kQK_K)) {
    rows8<BlockIQ2_XS>(ScaledIntKernel<BlockIQ2_XS, SignedXParts<BlockIQ2_XS>>{x}, n, w, row_bytes, n_rows, out);
  } else {
    rows8<BlockIQ2_XS>(Iq2XsKernel{x}, n, w, row_bytes, n_rows, out);
  }
}

void iq2_s_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  if (q8_K_no_min_code(x, n / kQK_K)) {
    rows8<BlockIQ2_S>(ScaledIntKernel<BlockIQ2_S, SignedXParts<BlockIQ2_S>>{x}, n, w, row_bytes, n_rows, out);
  } else {
    rows8<BlockIQ2_S>(Iq2SKernel{x}, n, w, row_bytes, n_rows, out);
  }
}

void iq1_m_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockIQ1_M>(Iq1MKernel{x}, n, w, row_bytes, n_rows, out);
}

void q5_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockQ5_K>(KQuantKernel<BlockQ5_K>{{}, x}, n, w, row_bytes, n_rows, out);
}

void q6_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  rows8<BlockQ6_K>(Q6KKernel{x}, n, w, row_bytes, n_rows, out);
}

void iq2_xxs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  if (q8_K_no_min_code(x, n / kQK_K)) {
    rows8<BlockIQ2_XXS>(Iq2XxsSignedKernel{x}, n, w, row_bytes, n_rows, out);
  } else {
    rows8<BlockIQ2_XXS>(Iq2XxsKernel{x}, n, w, row_bytes, n_rows, out);
  }
}

}  // namespace ds4::quant::avx2_detail
