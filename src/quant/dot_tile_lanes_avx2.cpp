// Prefill tile kernels (dot_tile.h) at the avx2 level for the integer formats
// (Q8_0, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ1_M, IQ4_XS), 2 activations or
// more: one int32 lane per weight row.
//
// Per 8-row group and block, the rows' codes are re-laid out once (an 8 x 8
// dword transpose) so that lane r of register k holds elements 4k..4k+3 of row
// r: the integers the one-row kernel multiplies (K-quant codes, IQ2_XXS sign *
// grid, MXFP4 doubled E2M1 values, Q8_0 codes), with the block's scales,
// minimums and f16 factors as lane-per-row vectors. Each activation's matching
// 4 bytes are then broadcast to the 8 lanes, and one vpmaddubsw + vpmaddwd add
// them for 8 rows at once; a block ends with the exact integer sums of 8
// (row, activation) pairs in 8 lanes, no horizontal reduction. The float term
// is the scalar reference's, lane by lane, added in block order from 0, so
// every output is bit-identical to the one-row kernel (kDotAvx2, itself
// bit-identical to the scalar reference).
//
// vpmaddubsw multiplies unsigned by signed bytes:
//   K-quants: codes (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63) x
//     activation codes; a sub-block's pair sums add in int16 first, then one
//     vpmaddwd by the sub-block's scale (KQuantLanes).
//   IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS / IQ1_M / MXFP4: (x + 128) x signed weights (|w| <= 43 / 43 / 43 / 62 / 9 /
//     12), no pair
//     saturates; the 128 * sum(w) this adds is taken off per block (exact).
//   Q8_0 and IQ4_XS (|w| <= 127): |w| x (x * sign(w)), exact unless x holds -128
//     (its negation overflows): such an activation goes through the one-row kernel.
//
// Activations go 4 at a time, so each weight register is loaded once for 4
// (8 measured slower: the sums no longer fit the 16 registers).
#include "core/x86_kernel_prelude.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/kernel_scratch.h"
#include "quant/dot_tile.h"
#include "quant/dot_tile_loop.h"
#include "quant/dot_x86_common.h"
#include "quant/iq4_values.h"
#include "quant/mxfp4.h"

namespace ds4::quant {

extern const DotKernels kDotAvx2;

namespace tile_avx2 {
namespace {

constexpr int kRows = 8;  // weight rows per group, one int32 lane each

thread_local KernelScratch t_block;  // one block of a row group, re-laid out
thread_local KernelScratch t_acts;   // the activations' prepared bytes
thread_local KernelScratch t_sums;   // the running float sums, 8 lanes per activation
thread_local KernelScratch t_lists;  // the activations split into the tile's and the one-row kernel's

inline __m256i load(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
inline void store(void* p, __m256i v) { _mm256_store_si256(static_cast<__m256i*>(p), v); }
inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// in[r] = 8 dwords of row r -> out[k] lane r = dword k of row r.
__attribute__((always_inline)) inline void transpose8(const __m256i in[8], __m256i* out) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_epi32(in[j], in[j + 1]);
    t[j + 1] = _mm256_unpackhi_epi32(in[j], in[j + 1]);
  }
#pragma GCC unroll 2
  for (int j = 0; j < 8; j += 4) {
    u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);      // dwords 0 | 4
    u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);  // 1 | 5
    u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);  // 2 | 6
    u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);  // 3 | 7
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
    out[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
  }
}

// The f16 at `offset` in block i of each row, as f32 lanes.
template <typename Block>
inline __m256 rows_f16(const Block* const* rows, int64_t i, size_t offset) {
  alignas(16) uint16_t v[kRows];
  for (int r = 0; r < kRows; ++r) std::memcpy(&v[r], reinterpret_cast<const unsigned char*>(&rows[r][i]) + offset, 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
}

// Each row's block scale d as f32 lanes: the f16 field d, or IQ1_M's
// assembled from its scale words.
template <typename Block>
inline __m256 rows_d(const Block* const* rows, int64_t i) {
  return rows_f16(rows, i, offsetof(Block, d));
}
inline __m256 rows_d(const BlockIQ1_M* const* rows, int64_t i) {
  alignas(16) uint16_t v[kRows];
  for (int r = 0; r < kRows; ++r) v[r] = iq1_m_d_bits(rows[r][i]);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
}

// Lane r = (v[r], v[r]) as int16 words: a per-row factor for vpmaddwd.
inline __m256i word_pairs(const int32_t* v) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
  return _mm256_or_si256(x, _mm256_slli_epi32(x, 16));
}

// Lanes (w, w) as int16 words, w the low / the high word of each dword lane.
inline __m256i low_word_pairs(__m256i x) { return _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(x, 0xa0), 0xa0); }
inline __m256i high_word_pairs(__m256i x) { return _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(x, 0xf5), 0xf5); }

// Each row's 16 int16 words (row r's from words(r)) transposed: lane r of
// out[k] = words 2k and 2k + 1 of row r. The rows' scales and mins reach the
// lane-per-row registers this way, not element by element in scalar code
// (that was a third of the K-quant relayouts' time).
template <typename Words>
inline void transpose_row_words(Words words, __m256i out[8]) {
  __m256i w[kRows];
  for (int r = 0; r < kRows; ++r) w[r] = words(r);
  transpose8(w, out);
}

// Lane r = the dword at `offset` in row r's block i.
template <typename Block>
inline __m256i rows_dword(const Block* const* rows, int64_t i, size_t offset) {
  int32_t v[kRows];
  for (int r = 0; r < kRows; ++r) std::memcpy(&v[r], reinterpret_cast<const unsigned char*>(&rows[r][i]) + offset, 4);
  return _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

// Sum of each row's 32 weight bytes (int8) times mul, as int32 lanes.
inline __m256i weighted_byte_sum(__m256i w, __m256i mul_words) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), w), mul_words);
}

// ---- The formats ----
//
// Each format: Block, Act (the activation block), kBlockElems, the bytes of a
// re-laid-out block (kLaidBytes), relayout(rows, i, dst), the activation
// preparation (kPrepared: x + 128 copies), term<T>(laid, acts, i, sums) which
// adds block i's term to T activations' sums, and finish.

// Activation view for a pass: token t's block i.
template <typename Act>
struct ActRows {
  const Act* const* x;       // the dot kernel's activation blocks
  const uint8_t* const* xu;  // x + 128 copies (formats that want them), kBlockElems bytes per block
};

// Q4_K, Q2_K, Q5_K, Q3_K and Q6_K: 64 code registers (codes 0..15 / 0..3 /
// 0..31 / 0..7 / 0..63), then kSubBlocks scale pairs, 8 min pairs (each
// against two of the activation's 16-sums), d and dmin. A sub-block's pair
// sums add in int16 first (Q4_K 8 x 3840, Q2_K 4 x 768, Q5_K 4 x 7936 (its
// 32-element sub-blocks counted as two with one scale), Q3_K 4 x 1792, Q6_K
// 2 x 16128 (its 16-element sub-blocks as two) < 32768), then one vpmaddwd by
// its scale. kOneTerm: the float term is (d_w d_x) * (isum + msum) (Q3_K /
// Q6_K: the mins are the offset's -4 / -32 * scale) instead of k_block_value.
template <int kSubBlocks, bool kOneTerm = false>
struct KQuantLanes {
  using Act = BlockQ8_K;
  static constexpr int kBlockElems = kQK_K;
  static constexpr bool kPrepared = false;
  static constexpr int kPass = 4;  // activations per pass
  static constexpr int kGroupsPerSub = 64 / kSubBlocks;
  static constexpr int kScales = 64, kMins = kScales + kSubBlocks, kD = kMins + 8, kDmin = kD + 1;
  static constexpr size_t kLaidBytes = 32 * (kDmin + 1);

  // sc[j]: the rows' scale of sub-block j as word pairs; mins[j]: their min
  // pair j; d and dmin from the rows' blocks.
  template <typename Block>
  static void store_factors(const Block* const* rows, int64_t i, const __m256i* sc, const __m256i* mins, uint8_t* dst) {
    for (int j = 0; j < kSubBlocks; ++j) store(dst + 32 * (kScales + j), sc[j]);
    for (int j = 0; j < 8; ++j) store(dst + 32 * (kMins + j), mins[j]);
    _mm256_store_ps(reinterpret_cast<float*>(dst + 32 * kD), rows_f16(rows, i, offsetof(Block, d)));
    if constexpr (!kOneTerm) {
      _mm256_store_ps(reinterpret_cast<float*>(dst + 32 * kDmin), rows_f16(rows, i, offsetof(Block, dmin)));
    }
  }

  template <int T>
  static void term(const uint8_t* laid, const ActRows<Act>& a, int64_t i, float* sums) {
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int s = 0; s < kSubBlocks; ++s) {
      __m256i p[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) p[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = 0; g < kGroupsPerSub; ++g) {
        const int k = kGroupsPerSub * s + g;
        const __m256i wk = load(laid + 32 * k);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          p[t] = in_register(_mm256_add_epi16(p[t], _mm256_maddubs_epi16(wk, bcast4(a.x[t][i].qs + 4 * k))));
        }
      }
      const __m256i scale = load(laid + 32 * (kScales + s));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], scale));
    }
    const __m256 wd = _mm256_load_ps(reinterpret_cast<const float*>(laid + 32 * kD));
    const __m256 wdmin = kOneTerm ? wd : _mm256_load_ps(reinterpret_cast<const float*>(laid + 32 * kDmin));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(load(laid + 32 * (kMins + j)), bcast4(a.x[t][i].bsums + 2 * j)));
      }
      // dall * float(isum) - dmin * float(msum), added to the running sum.
      const __m256 x = _mm256_set1_ps(a.x[t][i].d);
      const __m256 dall = _mm256_mul_ps(x, wd);
      __m256 term;
      if constexpr (kOneTerm) {
        term = _mm256_mul_ps(dall, _mm256_cvtepi32_ps(_mm256_add_epi32(isum[t], msum)));
      } else {
        const __m256 dmin = _mm256_mul_ps(x, wdmin);
        term = _mm256_sub_ps(_mm256_mul_ps(dall, _mm256_cvtepi32_ps(isum[t])),
                             _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum)));
      }
      float* sum = sums + kRows * t;
      _mm256_store_ps(sum, _mm256_add_ps(_mm256_load_ps(sum), term));
    }
  }
  static __m256 finish(__m256 v) { return v; }
};

// Lane r of out[k] = bytes 4k .. 4k + 3 of the 32 at `offset` in row r's
// block i. The K-quants transpose their packed bytes this way and take the
// codes out afterwards: shifts and masks act within a byte or a word and the
// transpose moves whole dwords, so the registers are those of transposing
// the codes, for one transpose per 32 packed bytes instead of one per 32
// codes (Q4_K: 4 instead of 8 per block).
template <typename Block>
__attribute__((always_inline)) inline void transpose_rows(const Block* const* rows, int64_t i, size_t offset,
                                                          __m256i out[8]) {
  __m256i in[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) in[r] = load256(reinterpret_cast<const unsigned char*>(&rows[r][i]) + offset);
  transpose8(in, out);
}

// Lane r of out[k] = bytes 4k .. 4k + 3 of the 16 at `offset` in row r's
// block i (k < 4); rows r and r + 4 share an input register, a 128-bit half
// each, so two rounds of unpacks do it.
template <typename Block>
__attribute__((always_inline)) inline void transpose_rows16(const Block* const* rows, int64_t i, size_t offset,
                                                            __m256i out[4]) {
  __m256i in[4];
  const auto bytes = [&](int r) { return reinterpret_cast<const unsigned char*>(&rows[r][i]) + offset; };
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) in[r] = _mm256_set_m128i(load128(bytes(r + 4)), load128(bytes(r)));
  const __m256i d01 = _mm256_unpacklo_epi32(in[0], in[1]), d23 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i e01 = _mm256_unpacklo_epi32(in[2], in[3]), e23 = _mm256_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm256_unpacklo_epi64(d01, e01);
  out[1] = _mm256_unpackhi_epi64(d01, e01);
  out[2] = _mm256_unpacklo_epi64(d23, e23);
  out[3] = _mm256_unpackhi_epi64(d23, e23);
}

// The code registers of the K-quants as eight 32-element planes per
// 128-element half: code(h, p, k) is register k of plane p of half h (lane r:
// row r's elements 128h + 32p + 4k .. + 3), stored as register 32h + 8p + k.
// Unrolled whole, so h, p and k are constants in code (shift counts, which
// chunk).
template <typename Code>
__attribute__((always_inline)) inline void store_planes(uint8_t* dst, Code code) {
  auto* out = reinterpret_cast<__m256i*>(dst);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) out[32 * h + 8 * p + k] = code(h, p, k);
    }
  }
}

// Formats whose 16 signed scales s meet an offset (Q3_K 4, Q6_K 32 = 1 <<
// kOffsetShift): t[j] holds scales 2j, 2j + 1 as words; each scale goes to
// kHalves consecutive scale registers, the min pair j is (-offset s_2j,
// -offset s_2j+1).
template <typename Lanes, int kHalves, int kOffsetShift, typename Block>
inline void store_offset_scales(const Block* const* rows, int64_t i, const __m256i t[8], uint8_t* dst) {
  __m256i sc[16 * kHalves], mn[8];
  for (int j = 0; j < 8; ++j) {
    for (int h = 0; h < kHalves; ++h) {
      sc[kHalves * 2 * j + h] = low_word_pairs(t[j]);
      sc[kHalves * (2 * j + 1) + h] = high_word_pairs(t[j]);
    }
    mn[j] = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(t[j], kOffsetShift));
  }
  Lanes::store_factors(rows, i, sc, mn, dst);
}

// Q4_K and Q5_K: nibble codes (Q5_K's with the fifth bit: element 32s + l
// has bit s of qh byte l), the packed 6-bit scales and mins. Q5_K's codes
// reach 31, so its 32-element sub-blocks go as two 16-element halves with
// one scale (four pair sums in int16: 4 x 2 x 31 x 128 < 32768).
template <typename B, bool kFifthBit>
struct NibbleKFormat : KQuantLanes<kFifthBit ? 16 : 8> {
  using Base = KQuantLanes<kFifthBit ? 16 : 8>;
  using Block = B;
  static constexpr int kHalves = kFifthBit ? 2 : 1;

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    // Element 64c + 32n + l: nibble n of qs byte 32c + l (Q5_K: bit 2c + n
    // of qh byte l above it), so plane p of half h is nibble p & 1 of chunk
    // 2h + (p >> 1), its fifth bit bit 4h + p of qh.
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i q[4][8], qh[8];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) transpose_rows(rows, i, offsetof(Block, qs) + 32 * c, q[c]);
    if constexpr (kFifthBit) transpose_rows(rows, i, offsetof(Block, qh), qh);
    store_planes(
        dst, [&](int h, int p, int k) __attribute__((always_inline)) {
          const __m256i packed = q[2 * h + (p >> 1)][k];
          __m256i code = _mm256_and_si256((p & 1) ? _mm256_srli_epi16(packed, 4) : packed, low4);
          if constexpr (kFifthBit) {
            code =
                _mm256_or_si256(code, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[k], 4 * h + p), one), 4));
          }
          return code;
        });
    // Sub-block j's scale for each of its halves; its min meets both of its
    // 16-sums: the pair (m_j, m_j). t[k] holds scales 2k, 2k + 1 (k < 4) and
    // mins 2k - 8, 2k - 7.
    __m256i t[8], sc[8 * kHalves], mn[8];
    transpose_row_words([&](int r) { return _mm256_cvtepu8_epi16(q4_K_scale_min_bytes(rows[r][i].scales)); }, t);
    for (int k = 0; k < 4; ++k) {
      for (int h = 0; h < kHalves; ++h) {
        sc[kHalves * 2 * k + h] = low_word_pairs(t[k]);
        sc[kHalves * (2 * k + 1) + h] = high_word_pairs(t[k]);
      }
      mn[2 * k] = low_word_pairs(t[4 + k]);
      mn[2 * k + 1] = high_word_pairs(t[4 + k]);
    }
    Base::store_factors(rows, i, sc, mn, dst);
  }
};
using Q4KFormat = NibbleKFormat<BlockQ4_K, false>;
using Q5KFormat = NibbleKFormat<BlockQ5_K, true>;

struct Q2KFormat : KQuantLanes<16> {
  using Block = BlockQ2_K;

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    const __m256i three = _mm256_set1_epi8(3);
    __m256i q[2][8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) transpose_rows(rows, i, offsetof(Block, qs) + 32 * h, q[h]);
    store_planes(
        dst, [&](int h, int p, int k)
                 __attribute__((always_inline)) { return _mm256_and_si256(_mm256_srli_epi16(q[h][k], 2 * p), three); });
    // 16-groups 2j and 2j+1 have their own mins: the pair (m_2j, m_2j+1);
    // t[j] holds the scale bytes 2j, 2j + 1 as words.
    __m256i t[8], sc[16], mn[8];
    transpose_row_words([&](int r) { return _mm256_cvtepu8_epi16(load128(rows[r][i].scales)); }, t);
    const __m256i low4 = _mm256_set1_epi16(0x0f);
    for (int j = 0; j < 8; ++j) {
      const __m256i scales = _mm256_and_si256(t[j], low4);
      sc[2 * j] = low_word_pairs(scales);
      sc[2 * j + 1] = high_word_pairs(scales);
      mn[j] = _mm256_srli_epi16(t[j], 4);
    }
    store_factors(rows, i, sc, mn, dst);
  }
};

// Q3_K: codes u = q + 4 (element 128h + 32p + l: bits 2p of qs byte 32h + l,
// bit 4h + p of hmask byte l), 16 signed group scales s - 32, the offset's
// -4 * s as the mins (pairs against bsums 2j, 2j+1), one float term.
struct Q3KFormat : KQuantLanes<16, true> {
  using Block = BlockQ3_K;

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i q[2][8], hm[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) transpose_rows(rows, i, offsetof(Block, qs) + 32 * h, q[h]);
    transpose_rows(rows, i, offsetof(Block, hmask), hm);
    store_planes(
        dst, [&](int h, int p, int k) __attribute__((always_inline)) {
          const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm[k], 4 * h + p), one), 2);
          return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q[h][k], 2 * p), three), top);
        });
    __m256i t[8];
    transpose_row_words([&](int r) { return _mm256_cvtepi8_epi16(q3_K_signed_scales(rows[r][i].scales)); }, t);
    store_offset_scales<KQuantLanes<16, true>, 1, 2>(rows, i, t, dst);
  }
};

// Q6_K: codes u = q + 32 (0..63; element 128h + 32k + l: the low or, for
// k >= 2, high nibble of ql byte 64h + 32(k & 1) + l, bits 2k of qh byte
// 32h + l), 16 signed scales, the offset's -32 * s as the mins (pairs against
// bsums 2j, 2j + 1), one float term. Codes reach 63, so a 16-element
// sub-block goes as two 8-element halves with one scale (two pair sums in
// int16: 2 x 2 x 63 x 128 < 32768).
struct Q6KFormat : KQuantLanes<32, true> {
  using Block = BlockQ6_K;

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
    __m256i ql[4][8], qh[2][8];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) transpose_rows(rows, i, offsetof(Block, ql) + 32 * c, ql[c]);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) transpose_rows(rows, i, offsetof(Block, qh) + 32 * h, qh[h]);
    store_planes(
        dst, [&](int h, int p, int k) __attribute__((always_inline)) {
          const __m256i packed = ql[2 * h + (p & 1)][k];
          const __m256i low = _mm256_and_si256(p >= 2 ? _mm256_srli_epi16(packed, 4) : packed, low4);
          return _mm256_or_si256(low,
                                 _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[h][k], 2 * p), three), 4));
        });
    // Each scale serves both halves of its sub-block.
    __m256i t[8];
    transpose_row_words([&](int r) { return _mm256_cvtepi8_epi16(load128(rows[r][i].scales)); }, t);
    store_offset_scales<KQuantLanes<32, true>, 2, 5>(rows, i, t, dst);
  }
};

// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ1_M: signed weights (|w| <= 43 / 43 / 43 / 62 / 9) against
// x + 128, so no vpmaddubsw pair saturates (255 * 62 * 2 < 32768); 64 weight
// registers, 16 multiplier pairs (one per 16-element half sub-block),
// 128 * sum(w * mul) (taken off per block), d. Source gives sub-block b's 32
// weights of a row's block and its halves' multipliers, and the scale the
// one-row kernel applies to its sum at the end.
template <typename Source>
struct SignedWeightLanes {
  using Block = typename Source::Block;
  static constexpr int kPass = 4;
  using Act = BlockQ8_K;
  static constexpr int kBlockElems = kQK_K;
  static constexpr bool kPrepared = true;
  static constexpr int kMuls = 64, kCorr = kMuls + 16, kD = kCorr + 1;
  static constexpr size_t kLaidBytes = 32 * (kD + 1);

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    auto* out = reinterpret_cast<__m256i*>(dst);
    __m256i wsum[kRows];
    for (int r = 0; r < kRows; ++r) wsum[r] = _mm256_setzero_si256();
    alignas(32) int32_t mul[16][kRows];
    for (int b = 0; b < 8; ++b) {
      __m256i v[kRows];
      for (int r = 0; r < kRows; ++r) {
        v[r] = Source::weights(rows[r][i], b, mul[2 * b][r], mul[2 * b + 1][r]);
        const __m256i halves = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(mul[2 * b + 1][r])),
                                                _mm_set1_epi16(static_cast<int16_t>(mul[2 * b][r])));
        wsum[r] = _mm256_add_epi32(wsum[r], weighted_byte_sum(v[r], halves));
      }
      transpose8(v, out + 8 * b);
    }
    for (int h = 0; h < 16; ++h) store(dst + 32 * (kMuls + h), word_pairs(mul[h]));
    store(dst + 32 * kCorr, _mm256_slli_epi32(hsum8_i32(wsum), 7));
    _mm256_store_ps(reinterpret_cast<float*>(dst + 32 * kD), rows_d(rows, i));
  }

  template <int T>
  static void term(const uint8_t* laid, const ActRows<Act>& a, int64_t i, float* sums) {
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    if constexpr (requires { Source::kHalfInInt16; }) {
      // A half sub-block's four groups add in int16 before its multiplier.
      for (int h = 0; h < 16; ++h) {
        const __m256i mul = load(laid + 32 * (kMuls + h));
        __m256i p[T];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const __m256i wk = load(laid + 32 * (4 * h + g));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(bcast4(a.xu[t] + kQK_K * i + 16 * h + 4 * g), wk);
            p[t] = g == 0 ? prod : in_register(_mm256_add_epi16(p[t], prod));
          }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) isum[t] = in_register(_mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], mul)));
      }
    } else {
      for (int b = 0; b < 8; ++b) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m256i mul = load(laid + 32 * (kMuls + 2 * b + g / 4));
          const __m256i wk = load(laid + 32 * (8 * b + g));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(bcast4(a.xu[t] + kQK_K * i + 32 * b + 4 * g), wk);
            isum[t] = in_register(_mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, mul)));
          }
        }
      }
    }
    const __m256i corr = load(laid + 32 * kCorr);
    const __m256 wd = _mm256_load_ps(reinterpret_cast<const float*>(laid + 32 * kD));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 d = _mm256_mul_ps(wd, _mm256_set1_ps(a.x[t][i].d));
      __m256 value = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], corr));
      if constexpr (requires { Source::kBlockScale; }) {
        value = _mm256_mul_ps(_mm256_set1_ps(Source::kBlockScale), value);
      }
      float* sum = sums + kRows * t;
      _mm256_store_ps(sum, _mm256_add_ps(_mm256_load_ps(sum), _mm256_mul_ps(d, value)));
    }
  }
  static __m256 finish(__m256 v) {
    if constexpr (Source::kFinalScale == 1.0f) {
      return v;
    } else {
      return _mm256_mul_ps(_mm256_set1_ps(Source::kFinalScale), v);
    }
  }
};

struct Iq2XxsSource {
  using Block = BlockIQ2_XXS;
  static constexpr float kFinalScale = 0.125f;
  static __m256i weights(const Block& w, int b, int32_t& mul_lo, int32_t& mul_hi) {
    const auto* q = reinterpret_cast<const uint8_t*>(w.qs) + 8 * b;
    mul_lo = mul_hi = iq2_xxs_multiplier(q);
    return iq2_xxs_signed_grid(q);
  }
};
using Iq2XxsFormat = SignedWeightLanes<Iq2XxsSource>;

// IQ2_XS and IQ2_S: signed grid values, the sum times 0.125 at the end.
template <typename B>
struct HalvesSource {
  using Block = B;
  static constexpr float kFinalScale = 0.125f;
  static __m256i weights(const Block& w, int b, int32_t& mul_lo, int32_t& mul_hi) {
    return halves_weights(w, b, mul_lo, mul_hi);
  }
};
using Iq2XsFormat = SignedWeightLanes<HalvesSource<BlockIQ2_XS>>;
using Iq2SFormat = SignedWeightLanes<HalvesSource<BlockIQ2_S>>;

// IQ1_M: weights 8 g + s (|w| <= 9), the block's integer S, taken times
// 0.125 per block before the d factor (kBlockScale) as its one-row kernel.
struct Iq1MSource : HalvesSource<BlockIQ1_M> {
  static constexpr float kFinalScale = 1.0f;
  static constexpr float kBlockScale = 0.125f;
  // |w| <= 9: a half sub-block's four pair sums fit int16 (4 x 2 x 255 x 9
  // < 32768), so they add before one vpmaddwd by its multiplier.
  static constexpr bool kHalfInInt16 = true;
};
using Iq1MFormat = SignedWeightLanes<Iq1MSource>;

struct Iq3XxsSource {
  using Block = BlockIQ3_XXS;
  static constexpr float kFinalScale = 0.25f;
  static __m256i weights(const Block& w, int b, int32_t& mul_lo, int32_t& mul_hi) {
    const __m256i v = iq3_xxs_weights(w, b, mul_lo);
    mul_hi = mul_lo;
    return v;
  }
};
using Iq3XxsFormat = SignedWeightLanes<Iq3XxsSource>;

struct Mxfp4Format {
  using Block = BlockMXFP4;
  static constexpr int kPass = 4;
  using Act = BlockQ8_0;
  static constexpr int kBlockElems = kQKMxfp4;
  static constexpr bool kPrepared = true;
  // 8 value registers, 128 * sum(w), the half scales.
  static constexpr size_t kLaidBytes = 32 * (8 + 2);

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    // Elements 4k .. 4k + 3 (k < 4) are the low nibbles of qs bytes 4k ..,
    // elements 16 + 4k .. their high nibbles: transposed packed, then looked
    // up (per byte, so the order does not matter).
    const __m256i table = _mm256_broadcastsi128_si256(load128(kMxfp4DoubledValues.data()));
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i q[4];
    transpose_rows16(rows, i, offsetof(Block, qs), q);
    auto* out = reinterpret_cast<__m256i*>(dst);
    __m256i wsum = _mm256_setzero_si256();  // int8: 32 values of |w| <= 12 in 4 lanes, 8 per byte
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      out[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(q[k], low4));
      out[4 + k] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q[k], 4), low4));
      wsum = _mm256_add_epi8(wsum, _mm256_add_epi8(out[k], out[4 + k]));
    }
    alignas(32) float e[kRows];
    for (int r = 0; r < kRows; ++r) e[r] = e8m0_half_value(rows[r][i].e);
    store(dst + 32 * 8, _mm256_slli_epi32(weighted_byte_sum(wsum, _mm256_set1_epi16(1)), 7));
    _mm256_store_ps(reinterpret_cast<float*>(dst + 32 * 9), _mm256_load_ps(e));
  }

  template <int T>
  static void term(const uint8_t* laid, const ActRows<Act>& a, int64_t i, float* sums) {
    __m256i p[2][T];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) p[h][t] = _mm256_setzero_si256();
      // Four pair sums of (x + 128) * w fit int16: 4 * 255 * 12 * 2 < 32768.
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i wk = load(laid + 32 * (4 * h + g));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          p[h][t] = in_register(
              _mm256_add_epi16(p[h][t], _mm256_maddubs_epi16(bcast4(a.xu[t] + kQKMxfp4 * i + 16 * h + 4 * g), wk)));
        }
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i corr = load(laid + 32 * 8);
    const __m256 e = _mm256_load_ps(reinterpret_cast<const float*>(laid + 32 * 9));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256i isum = _mm256_sub_epi32(
          _mm256_add_epi32(_mm256_madd_epi16(p[0][t], ones), _mm256_madd_epi16(p[1][t], ones)), corr);
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16_value(a.x[t][i].d)), e);
      float* sum = sums + kRows * t;
      _mm256_store_ps(sum, _mm256_add_ps(_mm256_load_ps(sum), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum))));
    }
  }
  static __m256 finish(__m256 v) { return v; }
};

struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr int kPass = 4;
  using Act = BlockQ8_0;
  static constexpr int kBlockElems = kQK8_0;
  static constexpr bool kPrepared = false;
  static constexpr bool kNoMinCode = true;
  // 8 code registers, their absolute values, d.
  static constexpr size_t kLaidBytes = 32 * (16 + 1);

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    __m256i v[kRows];
    for (int r = 0; r < kRows; ++r) v[r] = load256(rows[r][i].qs);
    auto* out = reinterpret_cast<__m256i*>(dst);
    transpose8(v, out);
    for (int g = 0; g < 8; ++g) out[8 + g] = _mm256_abs_epi8(out[g]);
    _mm256_store_ps(reinterpret_cast<float*>(dst + 32 * 16), rows_f16(rows, i, offsetof(Block, d)));
  }

  template <int T>
  static void term(const uint8_t* laid, const ActRows<Act>& a, int64_t i, float* sums) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m256i wk = load(laid + 32 * g);
      const __m256i awk = load(laid + 32 * (8 + g));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256i prod = _mm256_maddubs_epi16(awk, _mm256_sign_epi8(bcast4(a.x[t][i].qs + 4 * g), wk));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, ones));
      }
    }
    const __m256 wd = _mm256_load_ps(reinterpret_cast<const float*>(laid + 32 * 16));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 d = _mm256_mul_ps(wd, _mm256_set1_ps(f16_value(a.x[t][i].d)));
      float* sum = sums + kRows * t;
      _mm256_store_ps(sum, _mm256_add_ps(_mm256_load_ps(sum), _mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), d)));
    }
  }
  static __m256 finish(__m256 v) { return v; }
};

// IQ4_XS: the table values v (-127..113) against x as Q8_0's codes are, |v|
// times x signed like v (v + 128 against x would saturate vpmaddubsw), so an
// activation holding -128 goes to the one-row kernel (kNoMinCode); per
// sub-block 8 value registers, their absolute values, the 6-bit scale - 32 as
// word pairs (vpmaddwd), then d. The block's integer times d_w * d_x as the
// one-row kernel does.
struct Iq4XsFormat {
  using Block = BlockIQ4_XS;
  static constexpr int kPass = 4;
  using Act = BlockQ8_K;
  static constexpr int kBlockElems = kQK_K;
  static constexpr bool kPrepared = false;
  static constexpr bool kNoMinCode = true;
  static constexpr int kAbs = 64, kScales = 128, kD = kScales + 8;
  static constexpr size_t kLaidBytes = 32 * (kD + 1);

  static void relayout(const Block* const* rows, int64_t i, uint8_t* dst) {
    // Sub-block sb's elements 4g .. 4g + 3 (register 8 sb + g): the low
    // nibbles (g < 4) or the high (g >= 4) of qs bytes 16 sb + 4 (g & 3) ..;
    // the table lookup is per byte, so it too comes after the transpose.
    const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues.data()));
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    auto* out = reinterpret_cast<__m256i*>(dst);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i q[8];
      transpose_rows(rows, i, offsetof(Block, qs) + 32 * c, q);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const int reg = 8 * (2 * c + k / 4) + k % 4;
        out[reg] = _mm256_shuffle_epi8(table, _mm256_and_si256(q[k], low4));
        out[reg + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q[k], 4), low4));
        out[kAbs + reg] = _mm256_abs_epi8(out[reg]);
        out[kAbs + reg + 4] = _mm256_abs_epi8(out[reg + 4]);
      }
    }
    // Sub-block sb's 6-bit scale: its low nibble at bits 4 sb of scales_l (as
    // a dword), its top pair at bits 2 sb of scales_h; all rows at once.
    const __m256i high = _mm256_srli_epi32(rows_dword(rows, i, 0), 16);  // d | scales_h << 16
    const __m256i scales_l = rows_dword(rows, i, offsetof(Block, scales_l));
    for (int sb = 0; sb < 8; ++sb) {
      const __m256i ls = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi32(scales_l, 4 * sb), _mm256_set1_epi32(0xf)),
          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(high, 2 * sb), _mm256_set1_epi32(3)), 4));
      store(dst + 32 * (kScales + sb), low_word_pairs(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
    }
    _mm256_store_ps(reinterpret_cast<float*>(dst + 32 * kD), rows_f16(rows, i, offsetof(Block, d)));
  }

  template <int T>
  static void term(const uint8_t* laid, const ActRows<Act>& a, int64_t i, float* sums) {
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int sb = 0; sb < 8; ++sb) {
      const __m256i scale = load(laid + 32 * (kScales + sb));
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m256i wk = load(laid + 32 * (8 * sb + g));
        const __m256i awk = load(laid + 32 * (kAbs + 8 * sb + g));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256i prod = _mm256_maddubs_epi16(awk, _mm256_sign_epi8(bcast4(a.x[t][i].qs + 32 * sb + 4 * g), wk));
          isum[t] = in_register(_mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, scale)));
        }
      }
    }
    const __m256 wd = _mm256_load_ps(reinterpret_cast<const float*>(laid + 32 * kD));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 d = _mm256_mul_ps(wd, _mm256_set1_ps(a.x[t][i].d));
      float* sum = sums + kRows * t;
      _mm256_store_ps(sum, _mm256_add_ps(_mm256_load_ps(sum), _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[t]))));
    }
  }
  static __m256 finish(__m256 v) { return v; }
};

// True when no block of x holds a -128 code (the precondition of Q8_0Format
// and Iq4XsFormat: its negation overflows).
template <typename Act>
bool no_min_code(const Act* x, int64_t nb) {
  static_assert(sizeof(Act::qs) % 32 == 0);
  const __m256i min = _mm256_set1_epi8(static_cast<char>(-128));
  __m256i any = _mm256_setzero_si256();
  for (int64_t i = 0; i < nb; ++i) {
    for (size_t j = 0; j < sizeof(Act::qs); j += 32) {
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(load256(x[i].qs + j), min));
    }
  }
  return _mm256_testz_si256(any, any) != 0;
}

// The activation's codes + 128 as bytes, kBlockElems per block.
template <typename Act>
void offset_codes(const Act* x, int64_t nb, int elems, uint8_t* dst) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < elems; j += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + elems * i + j), _mm256_xor_si256(load256(x[i].qs + j), bias));
    }
  }
}

// term<T> for the T = count activations of one pass (count <= F::kPass).
template <typename F, int T = F::kPass>
inline void pass(const uint8_t* laid, const ActRows<typename F::Act>& a, int64_t i, float* sums, int count) {
  if constexpr (T > 1) {
    if (count < T) {
      pass<F, T - 1>(laid, a, i, sums, count);
      return;
    }
  }
  F::template term<T>(laid, a, i, sums);
}

template <typename F>
void lanes_tile(float (*dot)(int64_t, const typename F::Block*, const typename F::Act*), int64_t n, const uint8_t* w,
                uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts, float* out, int64_t ldo) {
  using Block = typename F::Block;
  using Act = typename F::Act;
  const int64_t nb = n / F::kBlockElems;
  // The activations the tile takes (all but those with a -128 code where the
  // format cannot take one).
  // Four lists of n_acts entries in one scratch: x and xu (pointers), index
  // and slow (activation numbers).
  const auto count_acts = static_cast<size_t>(n_acts);
  auto* lists = t_lists.get_as<uintptr_t>(4 * count_acts);
  auto** x = reinterpret_cast<const Act**>(lists);
  auto** xu = reinterpret_cast<const uint8_t**>(lists + count_acts);
  auto* index = reinterpret_cast<int64_t*>(lists + 2 * count_acts);
  auto* slow = reinterpret_cast<int64_t*>(lists + 3 * count_acts);
  int64_t n_fast = 0, n_slow = 0;
  for (int64_t t = 0; t < n_acts; ++t) {
    const auto* a = static_cast<const Act*>(acts[t]);
    if constexpr (requires { F::kNoMinCode; }) {
      if (!no_min_code(a, nb)) {
        slow[n_slow++] = t;
        continue;
      }
    }
    xu[n_fast] = nullptr;
    x[n_fast] = a;
    index[n_fast++] = t;
  }
  if constexpr (F::kPrepared) {
    uint8_t* bytes = t_acts.get(static_cast<size_t>(n_fast) * static_cast<size_t>(n));
    for (int64_t t = 0; t < n_fast; ++t) {
      uint8_t* dst = bytes + static_cast<size_t>(t) * static_cast<size_t>(n);
      offset_codes(x[t], nb, F::kBlockElems, dst);
      xu[t] = dst;
    }
  }
  uint8_t* laid = t_block.get(F::kLaidBytes);
  auto* sums = reinterpret_cast<float*>(t_sums.get(static_cast<size_t>(n_fast) * kRows * sizeof(float)));
  for (int64_t r0 = 0; r0 < n_rows && n_fast > 0; r0 += kRows) {
    const int count = static_cast<int>(std::min<int64_t>(kRows, n_rows - r0));
    const Block* rows[kRows];
    for (int r = 0; r < kRows; ++r) {
      rows[r] = reinterpret_cast<const Block*>(w + static_cast<uint64_t>(r0 + std::min(r, count - 1)) * row_bytes);
    }
    std::memset(sums, 0, static_cast<size_t>(n_fast) * kRows * sizeof(float));
    for (int64_t i = 0; i < nb; ++i) {
      F::relayout(rows, i, laid);
      for (int64_t t0 = 0; t0 < n_fast; t0 += F::kPass) {
        pass<F>(laid, ActRows<Act>{x + t0, xu + t0}, i, sums + kRows * t0,
                static_cast<int>(std::min<int64_t>(F::kPass, n_fast - t0)));
      }
    }
    for (int64_t t = 0; t < n_fast; ++t) {
      alignas(32) float v[kRows];
      _mm256_store_ps(v, F::finish(_mm256_load_ps(sums + kRows * t)));
      std::memcpy(out + index[t] * ldo + r0, v, static_cast<size_t>(count) * sizeof(float));
    }
  }
  for (int64_t s = 0; s < n_slow; ++s) {
    const int64_t t = slow[s];
    for (int64_t r = 0; r < n_rows; ++r) {
      out[t * ldo + r] = dot(n, reinterpret_cast<const Block*>(w + static_cast<uint64_t>(r) * row_bytes),
                             static_cast<const Act*>(acts[t]));
    }
  }
}

}  // namespace

void q8_0_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Q8_0Format>(kDotAvx2.q8_0_q8_0, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void mxfp4_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Mxfp4Format>(kDotAvx2.mxfp4_q8_0, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void q2_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Q2KFormat>(kDotAvx2.q2_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void q4_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Q4KFormat>(kDotAvx2.q4_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void q5_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Q5KFormat>(kDotAvx2.q5_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void q6_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Q6KFormat>(kDotAvx2.q6_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void q3_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Q3KFormat>(kDotAvx2.q3_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void iq2_xs_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Iq2XsFormat>(kDotAvx2.iq2_xs_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void iq3_xxs_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                   int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Iq3XxsFormat>(kDotAvx2.iq3_xxs_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void iq2_s_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Iq2SFormat>(kDotAvx2.iq2_s_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void iq4_xs_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Iq4XsFormat>(kDotAvx2.iq4_xs_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void iq1_m_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Iq1MFormat>(kDotAvx2.iq1_m_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
void iq2_xxs_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                   int64_t n_acts, float* out, int64_t ldo) {
  lanes_tile<Iq2XxsFormat>(kDotAvx2.iq2_xxs_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

}  // namespace tile_avx2
}  // namespace ds4::quant
