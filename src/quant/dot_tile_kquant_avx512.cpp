// Tile kernels (dot_tile.h) for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K x
// Q8_K) at the avx512 levels: one register lane per weight row, as the Q8_0
// tile (dot_tile_q8_avx512.cpp).
//
// Each block of 16 rows is re-laid out once per call so that lane r of code
// register k holds row r's four codes of elements 4k..4k+3 (Q4_K 0..15, Q2_K
// 0..3, as bytes), next to per-lane registers of the rows' group scales, their
// mins (as int16 pairs) and d and dmin. The codes are unsigned and the
// activations signed, which is what vpdpbusd multiplies, so no offset is
// needed. For each activation the matching four activation bytes are broadcast
// to every lane: four multiply-adds give a 16-element group for 16 rows at
// once (|sum| <= 16 * 15 * 128 < 2^15), and one vpdpwssd against the lanes'
// scale (an int32 with a zero high word: Q4_K's 6-bit sub-block scale, Q2_K's
// 4-bit group scale) adds group sum * scale to the block's integer sum. The
// min term is vpdpwssd of the lanes' min pairs against the activation's
// matching sums (Q4_K: its 8 sub-block sums bsum 2s + bsum 2s+1, prepared once
// per call, each fits in int16; Q2_K: its 16 bsums as stored). No horizontal
// reduction: after a block each lane holds the exact integer sums the scalar
// reference forms for its (row, activation) pair, and the float term is the
// one-row kernels' (dot_avx512.cpp's k_quant_dot, dot_x86_common.h's
// k_block_value), lane by lane, added in block order from 0, so every output
// equals the one-row kernel bit for bit. Q5_K (codes 0..31) and Q6_K (0..63)
// groups outgrow int16 and meet their scales by vpmulld; Q3_K's and Q6_K's
// offsets (4, 32) are min terms with the scales as the mins.
//
// Rows go 16 at a time (rows past the end repeat the last one; their lanes are
// never stored); activations in passes of up to kMaxActs over a re-laid-out
// row group. Few activations (< kMinActs) go through the one-row kernels' sums
// with the rows in lanes (dot_rows_avx512.h).
#include "core/x86_kernel_prelude.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/kernel_scratch.h"
#include "quant/dot_rows_avx2.h"
#include "quant/dot_rows_avx512.h"
#include "quant/dot_tile.h"
#include "quant/dot_tile_avx512.h"
#include "quant/dot_tile_lanes_avx2.h"
#include "quant/dot_x86_common.h"
#include "quant/iq4_values.h"
#include "quant/iq_grids_avx512.h"

namespace ds4::quant {

namespace tile_avx512 {
namespace {

constexpr int kGroupRows = 16;  // one register lane per row
constexpr int kMaxActs = 12;    // activations per pass over a row group
// Fewest activations for which the tile beats looping the one-row kernel
// (ds4-bench-kernels, 64 rows x 4096, avx512vbmi: at 2 activations Q4_K 75
// against 49 GMAC/s, Q2_K 66 against 59).
constexpr int64_t kMinActs = 2;

// One block of a row group, re-laid out, in 64-byte registers: kCodeRegs code
// registers (lane r of register k: row r's codes 4k..4k+3), then the scale
// registers (lane r = row r's scale of a group, int32), the min registers
// (lane r = two of row r's mins as int16 words), d and dmin (f32 lanes).
constexpr int kCodeRegs = 64;
constexpr int kScaleReg = kCodeRegs;

// One prepared activation block: its 256 codes as stored, then the 32 bytes the
// min registers meet (Rows::prepare_min_operand), then d; padded.
constexpr size_t kActMinOperand = 256;
constexpr size_t kActScale = 288;
constexpr size_t kActBytes = 320;

thread_local KernelScratch t_weights;
thread_local KernelScratch t_acts;

// dot_bytes (dot_tile_avx512.h) is exact here: no int16 pair of products
// exceeds 2 * 15 * 128.

inline __m512i broadcast_dword(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// pshufb patterns: byte j of every dword to the dword's low byte, the other
// bytes zero (a 6-bit scale as an int32 with a zero high word).
template <int J>
constexpr auto kByteToDword = [] {
  struct {
    alignas(64) int8_t v[64];
  } p{};
  for (int i = 0; i < 64; ++i) p.v[i] = i % 4 == 0 ? static_cast<int8_t>((i & ~3 & 15) + J) : int8_t{-128};
  return p;
}();
// Bytes 2p and 2p+1 of every dword to its two words, zero-extended.
template <int P>
constexpr auto kBytePairToWords = [] {
  struct {
    alignas(64) int8_t v[64];
  } p{};
  for (int i = 0; i < 64; ++i) p.v[i] = i % 2 == 0 ? static_cast<int8_t>((i & ~3 & 15) + 2 * P + (i % 4) / 2) : int8_t{-128};
  return p;
}();

template <int J>
inline __m512i byte_to_dword(__m512i v) {
  return _mm512_shuffle_epi8(v, _mm512_load_si512(kByteToDword<J>.v));
}
template <int P>
inline __m512i byte_pair_to_words(__m512i v) {
  return _mm512_shuffle_epi8(v, _mm512_load_si512(kBytePairToWords<P>.v));
}

// Lane r of out[k] = dword k of the 16 bytes at at(r).
template <typename At>
inline void transpose_16_bytes_at(At at, __m512i out[4]) {
  // z[g], 128-bit lane i = row 4i + g: after the 4x4 transposes inside each
  // 128-bit lane, lane 4i + g of every output is row 4i + g.
  __m512i z[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    __m512i v = _mm512_castsi128_si512(load128(at(g)));
    v = _mm512_inserti32x4(v, load128(at(4 + g)), 1);
    v = _mm512_inserti32x4(v, load128(at(8 + g)), 2);
    z[g] = _mm512_inserti32x4(v, load128(at(12 + g)), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Lane r of out[k] = dword k of the 16 bytes at rows[r] + offset.
template <typename Block>
inline void transpose_16_bytes(const Block* const* rows, int64_t b, size_t offset, __m512i out[4]) {
  transpose_16_bytes_at([&](int r) { return reinterpret_cast<const uint8_t*>(&rows[r][b]) + offset; }, out);
}

// t[k] lane r = dword k of the 32 code bytes at qs + offset of rows[r]'s block b.
template <typename Block>
inline void transpose_qs_chunk(const Block* const* rows, int64_t b, int offset, __m512i t[8]) {
  __m256i q[kGroupRows];
#pragma GCC unroll 16
  for (int r = 0; r < kGroupRows; ++r) q[r] = load256(rows[r][b].qs + offset);
  transpose_rows(q, t);
}

// t[k] lane r = dword k of the 32 bytes at `offset` in rows[r]'s block b.
template <typename Block>
inline void transpose_bytes_chunk(const Block* const* rows, int64_t b, size_t offset, __m512i t[8]) {
  __m256i q[kGroupRows];
#pragma GCC unroll 16
  for (int r = 0; r < kGroupRows; ++r) q[r] = load256(reinterpret_cast<const uint8_t*>(&rows[r][b]) + offset);
  transpose_rows(q, t);
}

// Lanes r of an (f16 d | f16 dmin << 16) dword per row -> d and dmin as f32.
inline void store_d_dmin(__m512i packed, __m512i* d, __m512i* dmin) {
  _mm512_store_ps(reinterpret_cast<float*>(d), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(packed)));
  _mm512_store_ps(reinterpret_cast<float*>(dmin), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(packed, 16))));
}

// The headers of 16 rows' block b, lane r = row r, the packed scale bytes
// unpacked as unpack_q4_K_scales does, lane by lane (each lane's four bytes of
// sc_lo are scales 0..3, of sc_hi 4..7; mn_* the mins). The per-register
// forms are taken where used (fewer live registers).
struct Q4KHeaders {
  __m512i d_dmin, sc_lo, sc_hi, mn_lo, mn_hi;

  // Scale s (0..7) of each lane as an int32.
  __m512i scale(int s) const {
    const __m512i v = s < 4 ? sc_lo : sc_hi;
    switch (s & 3) {
      case 0: return byte_to_dword<0>(v);
      case 1: return byte_to_dword<1>(v);
      case 2: return byte_to_dword<2>(v);
      default: return byte_to_dword<3>(v);
    }
  }
  // Mins 2p, 2p+1 (p = 0..3) of each lane as an int16 pair.
  __m512i min_pair(int p) const {
    const __m512i v = p < 2 ? mn_lo : mn_hi;
    return (p & 1) == 0 ? byte_pair_to_words<0>(v) : byte_pair_to_words<1>(v);
  }
  __m512 d() const { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d_dmin)); }
  __m512 dmin() const { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d_dmin, 16))); }
};

// Q4_K and Q5_K (the same first 16 bytes: d, dmin, the packed scales).
template <typename Block>
inline Q4KHeaders q4_K_headers(const Block* const* rows, int64_t b) {
  __m512i h[4];  // d | dmin << 16, then the 12 packed scale bytes
  transpose_16_bytes(rows, b, 0, h);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i low6 = _mm512_set1_epi8(0x3f);
  const __m512i top2 = _mm512_set1_epi8(0x30);
  return Q4KHeaders{
      h[0], _mm512_and_si512(h[1], low6),
      _mm512_or_si512(_mm512_and_si512(h[3], low4), _mm512_and_si512(_mm512_srli_epi32(h[1], 2), top2)),
      _mm512_and_si512(h[2], low6),
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), low4),
                      _mm512_and_si512(_mm512_srli_epi32(h[2], 2), top2))};
}

// Formats whose min registers meet the activation's 16 bsums as stored
// (pair p against bsums 2p, 2p+1).
struct StoredBsums {
  static void prepare_min_operand(const BlockQ8_K& x, uint8_t* dst) { std::memcpy(dst, x.bsums, sizeof(x.bsums)); }
};

// Q4_K: 16-element group g has sub-block g / 2's 6-bit scale; min pair p is
// (min 2p, min 2p+1) against the activation's sub-block sums 2p, 2p+1.
struct Q4KRows {
  using Block = BlockQ4_K;
  static constexpr bool kWideGroups = false;
  static constexpr bool kOneTerm = false;
  static constexpr int kScaleRegs = 8;
  static constexpr int kMinRegs = 4;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // Codes: chunk c (32 bytes) holds elements 64c + j (low nibbles) and
    // 64c + 32 + j (high), so register 16c + j takes dword j's low nibbles and
    // 16c + 8 + j its high ones: element order, 4 per register.
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i t[8];
      transpose_qs_chunk(rows, b, 32 * c, t);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        _mm512_store_si512(out + 16 * c + j, _mm512_and_si512(t[j], low4));
        _mm512_store_si512(out + 16 * c + 8 + j, _mm512_and_si512(_mm512_srli_epi16(t[j], 4), low4));
      }
    }
    store_headers(rows, b, out);
  }

  // The scales, mins, d and dmin of the 16 rows, one register each (Q5_K's too).
  template <typename Block>
  static void store_headers(const Block* const* rows, int64_t b, __m512i* out) {
    const Q4KHeaders hdr = q4_K_headers(rows, b);
    __m512i* scale = out + kScaleReg;
    __m512i* min = scale + kScaleRegs;
#pragma GCC unroll 8
    for (int s = 0; s < kScaleRegs; ++s) _mm512_store_si512(scale + s, hdr.scale(s));
#pragma GCC unroll 4
    for (int p = 0; p < kMinRegs; ++p) _mm512_store_si512(min + p, hdr.min_pair(p));
    _mm512_store_ps(reinterpret_cast<float*>(min + kMinRegs), hdr.d());
    _mm512_store_ps(reinterpret_cast<float*>(min + kMinRegs + 1), hdr.dmin());
  }

  // Sub-block s covers bsums 2s and 2s+1; each sum is at most 32 * 128.
  static void prepare_min_operand(const BlockQ8_K& x, uint8_t* dst) {
    const __m256i sums = _mm256_madd_epi16(load256(x.bsums), _mm256_set1_epi16(1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_packs_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1)));
  }
};

// ---- Q4_K against one activation (decode): rows in lanes, no re-layout ----
//
// Per row and block, the 128 code bytes as two 64-byte loads: their low and
// high nibbles are four registers of 64 codes, which meet an activation laid
// out once per call to match (register 2h + n: the nibble plane n of code
// bytes 64h..64h+63, elements 128h + 32n + 0..31 and 128h + 64 + 32n + 0..31).
// One vpdpbusd each leaves 16 int32 lanes, 8 per 32-element sub-block (each
// |lane| <= 4 * 15 * 128: exact, and no vpmaddubsw pair saturates); two rounds
// of unpack-add fold a row's four registers into one holding each of its 8
// sub-block sums in two halves, and a pairwise add plus a 3-level two-source
// permute over the 16 rows gives each sub-block s a register S_s with row r in
// lane r. The rows' headers are transposed as the tile's re-layout does, so
// the scale and min terms are formed for 16 rows at once: isum = sum_s
// scale_s * S_s (vpmulld; |S_s| <= 32 * 15 * 128), msum = the min words
// against the activation's sub-block sums (vpdpwssd), and the float term is
// k_block_value's, lane by lane, added in block order from 0: every output is
// the one-row kernel's bits.

// One prepared activation block: the four 64-code registers, then the min
// operand (Q4KRows::prepare_min_operand) and d.
struct Q4KDecodeAct {
  alignas(64) uint8_t codes[4][64];
  uint8_t min_operand[16];
  float d;
  uint8_t pad[44];
};
static_assert(sizeof(Q4KDecodeAct) == 320);

thread_local KernelScratch t_decode_act;

// Lane j of register w_p (rows 2p, 2p+1 after the pairwise add) holds row
// 2p + j / 8's sub-block kPairSub[j % 8].
constexpr int kPairSub[8] = {0, 1, 4, 5, 2, 3, 6, 7};
constexpr int pair_lane_of(int sub) {
  for (int j = 0; j < 8; ++j)
    if (kPairSub[j] == sub) return j;
  return -1;
}
struct PermuteIndex {
  alignas(64) int32_t v[16];
};
// Level 1: rows 4q..4q+3 from (w_2q, w_2q+1); output `half` holds sub-blocks
// 4 * half + j / 4 of row 4q + j % 4 in lane j.
constexpr PermuteIndex level1_index(int half) {
  PermuteIndex p{};
  for (int j = 0; j < 16; ++j) {
    const int sub = 4 * half + j / 4, row = j % 4;
    p.v[j] = (row >= 2 ? 16 : 0) + 8 * (row & 1) + pair_lane_of(sub);
  }
  return p;
}
// Level 2: rows 8m..8m+7 from two level-1 registers of the same half; output
// `pair` (0, 1) holds the half's sub-blocks 2 * pair + j / 8 of row 8m + j % 8.
constexpr PermuteIndex level2_index(int pair) {
  PermuteIndex p{};
  for (int j = 0; j < 16; ++j) {
    const int sub = 2 * pair + j / 8, row = j % 8;
    p.v[j] = (row >= 4 ? 16 : 0) + 4 * sub + (row & 3);
  }
  return p;
}
// Level 3: all 16 rows from two level-2 registers; output t (0, 1) holds their
// t-th sub-block, row j in lane j.
constexpr PermuteIndex level3_index(int t) {
  PermuteIndex p{};
  for (int j = 0; j < 16; ++j) p.v[j] = (j >= 8 ? 16 : 0) + 8 * t + (j & 7);
  return p;
}
constexpr PermuteIndex kLevel1[2] = {level1_index(0), level1_index(1)};
constexpr PermuteIndex kLevel2[2] = {level2_index(0), level2_index(1)};
constexpr PermuteIndex kLevel3[2] = {level3_index(0), level3_index(1)};

void prepare_q4_K_decode_act(int64_t nb, const BlockQ8_K* x, Q4KDecodeAct* dst) {
  for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // Register 2h + n: elements 128h + 32n + 0..31, then 128h + 64 + 32n + 0..31.
      const int base = 128 * (k / 2) + 32 * (k % 2);
      std::memcpy(dst[b].codes[k], x[b].qs + base, 32);
      std::memcpy(dst[b].codes[k] + 32, x[b].qs + base + 64, 32);
    }
    Q4KRows::prepare_min_operand(x[b], dst[b].min_operand);
    dst[b].d = x[b].d;
  }
}

// Row r's block folded to one register: lane 4L + e holds part of sub-block
// (L < 2 ? 0, 1, 4, 5 : 2, 3, 6, 7)[e]; lanes 4L + e and 4(L ^ 1) + e add up
// to the whole.
template <bool kVnni>
inline __m512i q4_K_row_folded(const BlockQ4_K& w, const __m512i x[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i q0 = _mm512_loadu_si512(w.qs), q1 = _mm512_loadu_si512(w.qs + 64);
  const __m512i p0 = dot_bytes<kVnni>(zero, _mm512_and_si512(q0, low4), x[0]);
  const __m512i p1 = dot_bytes<kVnni>(zero, _mm512_and_si512(_mm512_srli_epi16(q0, 4), low4), x[1]);
  const __m512i p2 = dot_bytes<kVnni>(zero, _mm512_and_si512(q1, low4), x[2]);
  const __m512i p3 = dot_bytes<kVnni>(zero, _mm512_and_si512(_mm512_srli_epi16(q1, 4), low4), x[3]);
  const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
  const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
}

// 16 rows of Q4_K against one prepared activation: row r's dot in lane r.
template <bool kVnni>
__m512 q4_K_decode_group(int64_t nb, const BlockQ4_K* const* rows, const char* sweep, size_t sweep_share,
                         const Q4KDecodeAct* xa) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (sweep != nullptr) {
      const char* p = sweep + static_cast<size_t>(b) * sweep_share;
      // Into L2: into L1 the sweep evicted the rows being read (AMD Zen 4,
      // ds4-bench-matvec q4_k -t 2: 10-15 -> 26-29 GB/s).
      for (size_t off = 0; off < sweep_share; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
    }
    const Q4KDecodeAct& xb = xa[b];
    __m512i x[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) x[k] = _mm512_load_si512(xb.codes[k]);
    // Rows paired: w[p] lanes 0..7 row 2p's eight sub-block sums, 8..15 row 2p+1's.
    __m512i w[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const __m512i a = q4_K_row_folded<kVnni>(rows[2 * p][b], x);
      const __m512i c = q4_K_row_folded<kVnni>(rows[2 * p + 1][b], x);
      w[p] = _mm512_add_epi32(_mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_i64x2(a, c, _MM_SHUFFLE(3, 1, 3, 1)));
    }
    __m512i l1[2][4];  // [half][q]
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        l1[h][q] = _mm512_permutex2var_epi32(w[2 * q], _mm512_load_si512(kLevel1[h].v), w[2 * q + 1]);
    }
    __m512i l2[4][2];  // [sub-block pair 0..3][m]
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int m = 0; m < 2; ++m) {
#pragma GCC unroll 2
        for (int pr = 0; pr < 2; ++pr)
          l2[2 * h + pr][m] =
              _mm512_permutex2var_epi32(l1[h][2 * m], _mm512_load_si512(kLevel2[pr].v), l1[h][2 * m + 1]);
      }
    }
    const Q4KHeaders hdr = q4_K_headers(rows, b);
    __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int t = 0; t < 2; ++t) {
        const __m512i sub_sums = _mm512_permutex2var_epi32(l2[k][0], _mm512_load_si512(kLevel3[t].v), l2[k][1]);
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sub_sums, hdr.scale(2 * k + t)));
      }
    }
    __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) msum = dot_words<kVnni>(msum, hdr.min_pair(p), broadcast_dword(xb.min_operand + 4 * p));
    // k_block_value lane by lane: (x.d * d) * isum - (x.d * dmin) * msum.
    const __m512 dall = _mm512_mul_ps(_mm512_set1_ps(xb.d), hdr.d());
    const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(xb.d), hdr.dmin());
    acc = _mm512_add_ps(acc, _mm512_sub_ps(_mm512_mul_ps(dall, _mm512_cvtepi32_ps(isum)),
                                           _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum))));
  }
  return acc;
}

// out[r] = row r . x, bit-identical to the level's one-row kernel. The next 16
// rows (contiguous) are swept into cache meanwhile, an equal share per block.
template <bool kVnni>
void q4_K_decode(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  const int64_t nb = n / kQK_K;
  if (n_rows <= 0 || nb <= 0) return;
  auto* xa = reinterpret_cast<Q4KDecodeAct*>(t_decode_act.get(static_cast<size_t>(nb) * sizeof(Q4KDecodeAct)));
  prepare_q4_K_decode_act(nb, x, xa);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kGroupRows) {
    const BlockQ4_K* rows[kGroupRows];
    group_row_pointers(w, row_bytes, r0, n_rows, rows);
    const char* sweep = nullptr;
    size_t share = 0;
    if (r0 + kGroupRows < n_rows) {
      const int64_t next_rows = std::min<int64_t>(kGroupRows, n_rows - r0 - kGroupRows);
      sweep = reinterpret_cast<const char*>(w + static_cast<uint64_t>(r0 + kGroupRows) * row_bytes);
      share = (static_cast<size_t>(next_rows) * row_bytes + static_cast<size_t>(nb) - 1) / static_cast<size_t>(nb);
    }
    const __m512 acc = q4_K_decode_group<kVnni>(nb, rows, sweep, share, xa);
    const int64_t left = n_rows - r0;
    _mm512_mask_storeu_ps(out + r0, static_cast<__mmask16>(left >= kGroupRows ? 0xffffu : (1u << left) - 1), acc);
  }
}

// Q2_K: 16-element group g has its own 4-bit scale; min pair p is
// (min 2p, min 2p+1) against bsums 2p, 2p+1 as stored.
struct Q2KRows : StoredBsums {
  using Block = BlockQ2_K;
  static constexpr bool kWideGroups = false;
  static constexpr bool kOneTerm = false;
  static constexpr int kScaleRegs = 16;
  static constexpr int kMinRegs = 8;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    const __m512i low2 = _mm512_set1_epi8(3);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // Codes: byte l of half n holds elements 128n + 32j + l in bits 2j, 2j+1,
    // so plane j of dword d is register 32n + 8j + d: element order again.
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      __m512i t[8];
      transpose_qs_chunk(rows, b, 32 * n, t);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 8
        for (int d = 0; d < 8; ++d)
          _mm512_store_si512(out + 32 * n + 8 * j + d, _mm512_and_si512(_mm512_srli_epi16(t[d], 2 * j), low2));
      }
    }
    // Scale bytes: group g's scale in the low nibble, its min in the high one;
    // dword q of a lane holds groups 4q..4q+3.
    __m512i h[4];
    transpose_16_bytes(rows, b, offsetof(BlockQ2_K, scales), h);
    __m512i* scale = out + kScaleReg;
    __m512i* min = scale + kScaleRegs;
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m512i sc = _mm512_and_si512(h[q], low4);
      const __m512i mn = _mm512_and_si512(_mm512_srli_epi16(h[q], 4), low4);
      _mm512_store_si512(scale + 4 * q + 0, byte_to_dword<0>(sc));
      _mm512_store_si512(scale + 4 * q + 1, byte_to_dword<1>(sc));
      _mm512_store_si512(scale + 4 * q + 2, byte_to_dword<2>(sc));
      _mm512_store_si512(scale + 4 * q + 3, byte_to_dword<3>(sc));
      _mm512_store_si512(min + 2 * q, byte_pair_to_words<0>(mn));
      _mm512_store_si512(min + 2 * q + 1, byte_pair_to_words<1>(mn));
    }
    alignas(64) uint32_t d_dmin[kGroupRows];
#pragma GCC unroll 16
    for (int r = 0; r < kGroupRows; ++r) std::memcpy(&d_dmin[r], &rows[r][b].d, 4);
    store_d_dmin(_mm512_load_si512(d_dmin), min + kMinRegs, min + kMinRegs + 1);
  }
};

// Signed 8-bit group scales, dword q of a lane holding scales 4q..4q+3, into
// the 16 scale registers (kWords: an int16 word with a zero high word, for
// vpdpwssd; else the int32) and the 8 min registers: (offset * scale 2p,
// offset * scale 2p+1) as int16 words, against bsums 2p, 2p+1.
template <bool kWords>
inline void store_signed_scales(const __m512i sc[4], int32_t offset, __m512i* scale, __m512i* min) {
  const __m512i low_word = _mm512_set1_epi32(0xffff);
  const __m512i factor = _mm512_set1_epi32(offset);
  auto pair = [&](__m512i lo, __m512i hi) {
    return _mm512_or_si512(_mm512_and_si512(_mm512_mullo_epi32(lo, factor), low_word),
                           _mm512_slli_epi32(_mm512_mullo_epi32(hi, factor), 16));
  };
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    // Byte k sign-extended to the dword: shifted to the top, then back.
    const __m512i s0 = _mm512_srai_epi32(_mm512_slli_epi32(sc[q], 24), 24);
    const __m512i s1 = _mm512_srai_epi32(_mm512_slli_epi32(sc[q], 16), 24);
    const __m512i s2 = _mm512_srai_epi32(_mm512_slli_epi32(sc[q], 8), 24);
    const __m512i s3 = _mm512_srai_epi32(sc[q], 24);
    auto as_scale = [&](__m512i v) { return kWords ? _mm512_and_si512(v, low_word) : v; };
    _mm512_store_si512(scale + 4 * q + 0, as_scale(s0));
    _mm512_store_si512(scale + 4 * q + 1, as_scale(s1));
    _mm512_store_si512(scale + 4 * q + 2, as_scale(s2));
    _mm512_store_si512(scale + 4 * q + 3, as_scale(s3));
    _mm512_store_si512(min + 2 * q, pair(s0, s1));
    _mm512_store_si512(min + 2 * q + 1, pair(s2, s3));
  }
}

// The rows' f16 d of block b as f32 lanes (IQ1_M's assembled from its scale
// words).
template <typename Block>
inline void store_d(const Block* const* rows, int64_t b, __m512i* dst) {
  alignas(32) uint16_t d[kGroupRows];
#pragma GCC unroll 16
  for (int r = 0; r < kGroupRows; ++r) {
    if constexpr (std::is_same_v<Block, BlockIQ1_M>) {
      d[r] = iq1_m_d_bits(rows[r][b]);
    } else {
      d[r] = rows[r][b].d;
    }
  }
  _mm512_store_ps(reinterpret_cast<float*>(dst), _mm512_cvtph_ps(load256(d)));
}

// Q6_K: 16-element group g has its own signed 8-bit scale; the codes are
// value + 32 (0..63). A group's code x activation sum reaches 16 * 63 * 128,
// too wide for vpdpwssd's int16 words, so it meets its scale by vpmulld. The
// offset is the min term: pair p = (-32 sc_2p, -32 sc_2p+1) against bsums 2p,
// 2p+1 as stored, added to the block's integer (the one-row kernel,
// dot_avx2.cpp's dot_q6_K_q8_K, forms one integer per block and takes it
// times d_w * d_x).
struct Q6KRows : StoredBsums {
  using Block = BlockQ6_K;
  static constexpr int kScaleRegs = 16;
  static constexpr int kMinRegs = 8;
  static constexpr bool kWideGroups = true;
  static constexpr bool kOneTerm = true;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(3);
    // Half h: ql bytes 64h + j (A) and 64h + 32 + j (B), qh bytes 32h + j (H);
    // dword j of each is elements 4j..4j+3 of the half's four 32-element runs:
    // A's low nibbles with H's bits 0-1 (run 0), B's low with bits 2-3 (run 1),
    // A's high with bits 4-5 (run 2), B's high with bits 6-7 (run 3).
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i a[8], bq[8], hb[8];
      transpose_bytes_chunk(rows, b, offsetof(Block, ql) + 64 * h, a);
      transpose_bytes_chunk(rows, b, offsetof(Block, ql) + 64 * h + 32, bq);
      transpose_bytes_chunk(rows, b, offsetof(Block, qh) + 32 * h, hb);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        __m512i* run = out + 32 * h + j;
        const __m512i top = hb[j];
        run[0] = _mm512_or_si512(_mm512_and_si512(a[j], low4), _mm512_slli_epi16(_mm512_and_si512(top, low2), 4));
        run[8] = _mm512_or_si512(_mm512_and_si512(bq[j], low4),
                                 _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(top, 2), low2), 4));
        run[16] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a[j], 4), low4),
                                  _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(top, 4), low2), 4));
        run[24] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bq[j], 4), low4),
                                  _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(top, 6), low2), 4));
      }
    }
    // Scales: dword q of a lane holds scales 4q..4q+3 (int8).
    __m512i sc[4];
    transpose_16_bytes(rows, b, offsetof(Block, scales), sc);
    store_signed_scales<false>(sc, -32, out + kScaleReg, out + kScaleReg + kScaleRegs);
    store_d(rows, b, out + kScaleReg + kScaleRegs + kMinRegs);
  }
};

// Q5_K: Q4_K's headers and sub-blocks, codes 0..31 (the fifth bit from qh).
// A group's code x activation sum reaches 16 * 31 * 128, too wide for
// vpdpwssd's int16 words, so it meets its scale by vpmulld; the float term is
// Q4_K's (k_block_value), as in the one-row kernel (dot_avx2.cpp).
struct Q5KRows {
  using Block = BlockQ5_K;
  static constexpr bool kWideGroups = true;
  static constexpr bool kOneTerm = false;
  static constexpr int kScaleRegs = Q4KRows::kScaleRegs;
  static constexpr int kMinRegs = Q4KRows::kMinRegs;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    // Element 32s + l's fifth bit is bit s of qh byte l: dword j of qh holds
    // bytes 4j..4j+3, matching dword j of each 32-byte code chunk.
    __m512i qh[8];
    transpose_bytes_chunk(rows, b, offsetof(Block, qh), qh);
    // Codes as Q4_K's: chunk c's low nibbles are sub-block 2c, its high ones 2c + 1.
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i t[8];
      transpose_qs_chunk(rows, b, 32 * c, t);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m512i top_lo = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[j], 2 * c), one), 4);
        const __m512i top_hi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[j], 2 * c + 1), one), 4);
        _mm512_store_si512(out + 16 * c + j, _mm512_or_si512(_mm512_and_si512(t[j], low4), top_lo));
        _mm512_store_si512(out + 16 * c + 8 + j,
                           _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(t[j], 4), low4), top_hi));
      }
    }
    Q4KRows::store_headers(rows, b, out);
  }

  static void prepare_min_operand(const BlockQ8_K& x, uint8_t* dst) { Q4KRows::prepare_min_operand(x, dst); }
};

// Q3_K: codes u = q + 4 (0..7, the third bit from hmask), each 16-element
// group with its own signed 6-bit scale s - 32 (a group's sum fits int16, so
// vpdpwssd against the scale's word); the offset is the min term, pair p =
// (-4 s_2p, -4 s_2p+1) against bsums 2p, 2p+1 as stored, added to the block's
// integer, and the float term is the one-row kernel's (dot_avx2.cpp's
// dot_q3_K_q8_K): (d_w * d_x) * integer.
struct Q3KRows : StoredBsums {
  using Block = BlockQ3_K;
  static constexpr bool kWideGroups = false;
  static constexpr bool kOneTerm = true;
  static constexpr int kScaleRegs = 16;
  static constexpr int kMinRegs = 8;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    const __m512i low2 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    // Element 128n + 32j + l: bits 2j of qs byte 32n + l (as Q2_K's), bit
    // 4n + j of hmask byte l.
    __m512i hm[8];
    transpose_bytes_chunk(rows, b, offsetof(Block, hmask), hm);
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      __m512i t[8];
      transpose_qs_chunk(rows, b, 32 * n, t);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 8
        for (int d = 0; d < 8; ++d) {
          const __m512i low = _mm512_and_si512(_mm512_srli_epi16(t[d], 2 * j), low2);
          const __m512i top = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hm[d], 4 * n + j), one), 2);
          _mm512_store_si512(out + 32 * n + 8 * j + d, _mm512_or_si512(low, top));
        }
      }
    }
    // Scales: each row's 16 signed scales unpacked (q3_K_signed_scales), then
    // dword q of a lane holds scales 4q..4q+3.
    alignas(16) int8_t unpacked[kGroupRows][16];
#pragma GCC unroll 16
    for (int r = 0; r < kGroupRows; ++r) {
      _mm_store_si128(reinterpret_cast<__m128i*>(unpacked[r]), q3_K_signed_scales(rows[r][b].scales));
    }
    __m512i sc[4];
    transpose_16_bytes_at([&](int r) { return reinterpret_cast<const uint8_t*>(unpacked[r]); }, sc);
    store_signed_scales<true>(sc, -4, out + kScaleReg, out + kScaleReg + kScaleRegs);
    store_d(rows, b, out + kScaleReg + kScaleRegs + kMinRegs);
  }
};

// IQ4_XS (VNNI levels only): each code's table value v (int8, -127..113) as
// v + 128 (u8), so that vpdpbusd multiplies it; a 16-element group's sum
// reaches 16 * 241 * 128, so it meets its sub-block's signed scale ls - 32 by
// vpmulld, and the 128 * sum(x) this adds is the min term: pair p (groups 2p,
// 2p+1, both in sub-block p) = (-128 s_p, -128 s_p) against bsums 2p, 2p+1.
// The float term is the one-row kernel's (dot_avx2.cpp's dot_iq4_xs_q8_K):
// (d_w * d_x) * integer. Plain avx512 has no tile for it: vpmaddubsw would
// saturate on (v + 128) * x pairs.
struct IQ4XSRows : StoredBsums {
  using Block = BlockIQ4_XS;
  static constexpr bool kWideGroups = true;
  static constexpr bool kOneTerm = true;
  static constexpr int kScaleRegs = 8;
  static constexpr int kMinRegs = 8;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bias = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i table = _mm512_broadcast_i32x4(load128(kIq4nlValues.data()));
    auto biased = [&](__m512i idx) { return _mm512_xor_si512(_mm512_shuffle_epi8(table, idx), bias); };
    // Chunk c (32 bytes) holds sub-blocks 2c and 2c + 1; dword j's low
    // nibbles are elements 4j'..4j'+3 of its sub-block (j' = j % 4), its high
    // nibbles elements 16 + 4j'...
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i t[8];
      transpose_qs_chunk(rows, b, 32 * c, t);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int sub = 2 * c + j / 4;
        _mm512_store_si512(out + 8 * sub + j % 4, biased(_mm512_and_si512(t[j], low4)));
        _mm512_store_si512(out + 8 * sub + 4 + j % 4, biased(_mm512_and_si512(_mm512_srli_epi16(t[j], 4), low4)));
      }
    }
    // The headers in lanes: dword 0 = d | scales_h << 16, dword 1 = scales_l
    // (sub-block s's low nibble at bits 4s, its top pair at bits 2s of
    // scales_h). Unpacked 16 rows at a time: row by row in scalar code this was
    // half of the tile's time at 12 activations.
    __m512i h[4];
    transpose_16_bytes(rows, b, 0, h);
    const __m512i high = _mm512_srli_epi32(h[0], 16);
    __m512i* scale = out + kScaleReg;
    __m512i* min = scale + kScaleRegs;
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m512i ls =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[1], 4 * s), _mm512_set1_epi32(0xf)),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(high, 2 * s), _mm512_set1_epi32(3)), 4));
      const __m512i sc = _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
      // Both int16 words of the min pair = -128 * sc.
      const __m512i word = _mm512_and_si512(_mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sc, 7)),
                                            _mm512_set1_epi32(0xffff));
      _mm512_store_si512(scale + s, sc);
      _mm512_store_si512(min + s, _mm512_or_si512(word, _mm512_slli_epi32(word, 16)));
    }
    _mm512_store_ps(reinterpret_cast<float*>(min + kMinRegs), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0])));
  }
};

// IQ3_XXS, IQ2_XS and IQ2_S (VNNI levels only): each weight w (grid magnitude
// with its sign, |w| <= 62 / 43) as w + 128 (u8) for vpdpbusd, as IQ4_XS; a
// 16-element group's sum meets its multiplier (IQ3_XXS: the sub-block's 2 *
// (aux >> 28) + 1, IQ2_XS / IQ2_S: 2 * scale + 1 of its half) by vpmulld,
// -128 * multiplier is the min term, and the float term is the one-row
// kernel's (dot_avx2.cpp): (d_w * d_x) * integer per block, the sum times the
// format's final scale (0.25 / 0.125) at the end (finish). Plain avx512 has
// no tile for them (vpmaddubsw would saturate). A row's block is decoded in
// registers (iq_grids_avx512.h; kVbmi: the grid from compact codes, else
// gathered); Source gives its sign masks and chunk magnitudes, and the 16
// rows' multipliers and min pairs from their transposed headers.
template <typename Source>
struct SignedGridRows : StoredBsums {
  using Block = typename Source::Block;
  static constexpr bool kWideGroups = true;
  static constexpr bool kOneTerm = true;
  static constexpr int kScaleRegs = 16;
  static constexpr int kMinRegs = 8;

  static void relayout_block(const Block* const* rows, int64_t b, __m512i* out) {
    // Each row's 256 weights + 128 in element order, then 32-byte chunks
    // transposed as the code bytes of the other formats.
    alignas(64) uint8_t biased[kGroupRows][kQK_K];
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    const typename Source::Tables tables = Source::tables();
    for (int r = 0; r < kGroupRows; ++r) {
      uint64_t signs[4];
      __m512i magnitudes[4];
      Source::decode(rows[r][b], tables, signs, magnitudes);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        _mm512_store_si512(biased[r] + 64 * c, _mm512_xor_si512(signed_magnitudes(magnitudes[c], signs[c]), bias));
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i q[kGroupRows];
#pragma GCC unroll 16
      for (int r = 0; r < kGroupRows; ++r)
        q[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(biased[r] + 32 * c));
      __m512i t[8];
      transpose_rows(q, t);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) _mm512_store_si512(out + 8 * c + j, t[j]);
    }
    __m512i* scale = out + kScaleReg;
    __m512i* min = scale + kScaleRegs;
    __m512i multipliers[16];
    Source::multipliers(rows, b, multipliers);
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const __m512i lo = multipliers[2 * p], hi = multipliers[2 * p + 1];
      _mm512_store_si512(scale + 2 * p, lo);
      _mm512_store_si512(scale + 2 * p + 1, hi);
      // (-128 * lo, -128 * hi) as an int16 pair.
      const __m512i lo_word =
          _mm512_and_si512(_mm512_mullo_epi32(lo, _mm512_set1_epi32(-128)), _mm512_set1_epi32(0xffff));
      _mm512_store_si512(
          min + p, _mm512_or_si512(lo_word, _mm512_slli_epi32(_mm512_mullo_epi32(hi, _mm512_set1_epi32(-128)), 16)));
    }
    store_d(rows, b, min + kMinRegs);
  }

  static constexpr float kBlockScale = Source::kBlockScale;

  static __m512 finish(__m512 v) {
    if constexpr (Source::kFinalScale == 1.0f) return v;
    return _mm512_mul_ps(_mm512_set1_ps(Source::kFinalScale), v);
  }
};

// IQ3_XXS: sub-block s's multiplier 2 * (aux >> 28) + 1 serves both its halves.
template <bool kVbmi>
struct Iq3XxsSource : Iq3XxsGrid<kVbmi> {
  using Block = BlockIQ3_XXS;
  static void multipliers(const Block* const* rows, int64_t b, __m512i m[16]) {
    __m512i aux[8];
    transpose_16_bytes(rows, b, offsetof(Block, qs) + kQK_K / 4, aux);
    transpose_16_bytes(rows, b, offsetof(Block, qs) + kQK_K / 4 + 16, aux + 4);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      m[2 * s] = m[2 * s + 1] = _mm512_or_si512(_mm512_srli_epi32(aux[s], 27), _mm512_set1_epi32(1));
    }
  }
};
template <bool kVbmi>
using IQ3XXSRows = SignedGridRows<Iq3XxsSource<kVbmi>>;

// IQ2_XS and IQ2_S: 2 * scale + 1 of each half from the 8 scale bytes that
// end the block (the low nibble for the first half of a sub-block).
template <typename Grid>
struct HalvesSource : Grid {
  using Block = typename Grid::Block;
  static void multipliers(const Block* const* rows, int64_t b, __m512i m[16]) {
    static_assert(offsetof(Block, scales) + 8 == sizeof(Block));
    __m512i h[4];  // the block's last 16 bytes: scales 0..3 in h[2], 4..7 in h[3]
    transpose_16_bytes(rows, b, sizeof(Block) - 16, h);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m512i scale = _mm512_srli_epi32(h[2 + s / 4], 8 * (s % 4));
      const __m512i lo = _mm512_and_si512(scale, _mm512_set1_epi32(0xf));
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(scale, 4), _mm512_set1_epi32(0xf));
      m[2 * s] = _mm512_or_si512(_mm512_slli_epi32(lo, 1), _mm512_set1_epi32(1));
      m[2 * s + 1] = _mm512_or_si512(_mm512_slli_epi32(hi, 1), _mm512_set1_epi32(1));
    }
  }
};
template <bool kVbmi>
using IQ2XSRows = SignedGridRows<HalvesSource<Iq2XsGrid<kVbmi>>>;
template <bool kVbmi>
using IQ2SRows = SignedGridRows<HalvesSource<Iq2SGrid<kVbmi>>>;

// IQ1_M: 2 * scale + 1 of each half from the 3-bit fields of the 8 scale
// bytes that end the block (half h: little-endian word h / 4, bits 3 (h % 4)).
struct Iq1MSource : Iq1MGrid<false> {
  static void multipliers(const Block* const* rows, int64_t b, __m512i m[16]) {
    static_assert(offsetof(Block, scales) + 8 == sizeof(Block));
    __m512i h[4];  // the block's last 16 bytes: scale words 0, 1 in h[2], 2, 3 in h[3]
    transpose_16_bytes(rows, b, sizeof(Block) - 16, h);
#pragma GCC unroll 16
    for (int half = 0; half < 16; ++half) {
      const __m512i field = _mm512_srli_epi32(h[2 + half / 8], 16 * (half / 4 % 2) + 3 * (half % 4));
      m[half] =
          _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(field, _mm512_set1_epi32(7)), 1), _mm512_set1_epi32(1));
    }
  }
};
using IQ1MRows = SignedGridRows<Iq1MSource>;

template <typename Rows>
constexpr int kMinReg = kScaleReg + Rows::kScaleRegs;
template <typename Rows>
constexpr int kDReg = kMinReg<Rows> + Rows::kMinRegs;
template <typename Rows>
constexpr int kBlockRegs = kDReg<Rows> + 2;

// Re-lays out rows [r0, r0 + 16) (rows past n_rows repeat the last one) into
// dst, kBlockRegs registers per block.
template <typename Rows>
void relayout_group(int64_t nb, const uint8_t* w, uint64_t row_bytes, int64_t r0, int64_t n_rows, __m512i* dst) {
  using Block = typename Rows::Block;
  const Block* rows[kGroupRows];
  group_row_pointers(w, row_bytes, r0, n_rows, rows);
  // The weights come from memory (an expert matrix is read once per call) in
  // 16 row streams, more than the hardware prefetcher follows well: ask for
  // each row's block kPrefetchBlocks ahead (a hint: no result changes). Later
  // groups were mostly asked for by the previous group's passes.
  constexpr int64_t kPrefetchBlocks = 4;
  for (int64_t b = 0; b < nb; ++b) {
    if (b + kPrefetchBlocks < nb) {
#pragma GCC unroll 16
      for (int r = 0; r < kGroupRows; ++r) {
        const auto* p = reinterpret_cast<const char*>(&rows[r][b + kPrefetchBlocks]);
        for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
        _mm_prefetch(p + sizeof(Block) - 1, _MM_HINT_T0);
      }
    }
    Rows::relayout_block(rows, b, dst + b * kBlockRegs<Rows>);
  }
}

// Activations acts[0..n_acts) into dst, block b of activation t at
// (b * n_acts + t) * kActBytes: codes, min operand, d.
template <typename Rows>
void prepare_acts(int64_t nb, const void* const* acts, int n_acts, uint8_t* dst) {
  for (int t = 0; t < n_acts; ++t) {
    const auto* x = static_cast<const BlockQ8_K*>(acts[t]);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = dst + (static_cast<size_t>(b) * static_cast<size_t>(n_acts) + static_cast<size_t>(t)) * kActBytes;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) _mm512_storeu_si512(p + 64 * k, _mm512_loadu_si512(x[b].qs + 64 * k));
      Rows::prepare_min_operand(x[b], p + kActMinOperand);
      std::memcpy(p + kActScale, &x[b].d, 4);
    }
  }
}

// Memory a pass asks for while it computes: `bytes_per_block` bytes from
// `next` per block (the next row group's weights, so that its re-layout does
// not start on 16 cold rows). A hint only: no result changes.
struct Prefetch {
  const char* next = nullptr;
  size_t bytes_per_block = 0;
};

// 16 rows (one re-laid-out group) x T activations (one prepared pass).
template <bool kVnni, typename Rows, int T>
void group_pass(int64_t nb, const __m512i* wg, const uint8_t* xs, float* out, int64_t ldo, __mmask16 rows,
                Prefetch prefetch) {
  __m512 sum[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch.next != nullptr) {
      const char* p = prefetch.next + static_cast<size_t>(b) * prefetch.bytes_per_block;
      for (size_t off = 0; off < prefetch.bytes_per_block; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    }
    const __m512i* wb = wg + b * kBlockRegs<Rows>;
    const uint8_t* xb = xs + static_cast<size_t>(b) * (T * kActBytes);
    __m512i isum[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    // 16-element group g: codes 4g..4g+3 and its scale register. Wide groups
    // that share a scale register (Q5_K's and IQ4_XS's 32-element sub-blocks)
    // are summed before their one vpmulld: 32 * 255 * 128 fits int32.
    constexpr int kGroupsPerScale = Rows::kWideGroups ? 16 / Rows::kScaleRegs : 1;
#pragma GCC unroll 16
    for (int s = 0; s < 16 / kGroupsPerScale; ++s) {
      const __m512i scale = _mm512_load_si512(wb + kScaleReg + s * kGroupsPerScale * Rows::kScaleRegs / 16);
      // Code register i of the scale's groups holds elements 4i..4i+3 of them.
      const int first = 4 * kGroupsPerScale * s;
      __m512i codes[4 * kGroupsPerScale];
#pragma GCC unroll 8
      for (int i = 0; i < 4 * kGroupsPerScale; ++i) codes[i] = _mm512_load_si512(wb + first + i);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const uint8_t* q = xb + t * kActBytes + 4 * first;
        __m512i part = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int i = 0; i < 4 * kGroupsPerScale; ++i)
          part = dot_bytes<kVnni>(part, codes[i], broadcast_dword(q + 4 * i));
        if constexpr (Rows::kWideGroups) {
          isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(part, scale));
        } else {
          isum[t] = dot_words<kVnni>(isum[t], part, scale);
        }
      }
    }
    const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(wb + kDReg<Rows>));
    const __m512 dminw = _mm512_load_ps(reinterpret_cast<const float*>(wb + kDReg<Rows> + 1));
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const uint8_t* side = xb + t * kActBytes;
      __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int p = 0; p < Rows::kMinRegs; ++p) {
        msum = dot_words<kVnni>(msum, _mm512_load_si512(wb + kMinReg<Rows> + p),
                                broadcast_dword(side + kActMinOperand + 4 * p));
      }
      float xd;
      std::memcpy(&xd, side + kActScale, 4);
      const __m512 dall = _mm512_mul_ps(_mm512_set1_ps(xd), dw);
      if constexpr (Rows::kOneTerm) {
        // Q6_K's and Q3_K's one-row term: (d * x.d) * (isum + offset sum);
        // IQ1_M's integer times its block scale first.
        __m512 value = _mm512_cvtepi32_ps(_mm512_add_epi32(isum[t], msum));
        if constexpr (requires { Rows::kBlockScale; }) {
          if constexpr (Rows::kBlockScale != 1.0f) value = _mm512_mul_ps(_mm512_set1_ps(Rows::kBlockScale), value);
        }
        sum[t] = _mm512_add_ps(sum[t], _mm512_mul_ps(dall, value));
      } else {
        // k_block_value lane by lane: (x.d * d) * isum - (x.d * dmin) * msum.
        const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(xd), dminw);
        sum[t] = _mm512_add_ps(sum[t], _mm512_sub_ps(_mm512_mul_ps(dall, _mm512_cvtepi32_ps(isum[t])),
                                                     _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum))));
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    if constexpr (requires { Rows::finish(sum[t]); }) sum[t] = Rows::finish(sum[t]);
    _mm512_mask_storeu_ps(out + t * ldo, rows, sum[t]);
  }
}

template <bool kVnni, typename Rows>
void group_passes(int n_acts, int64_t nb, const __m512i* wg, const uint8_t* xs, float* out, int64_t ldo,
                  __mmask16 rows, Prefetch prefetch) {
  switch (n_acts) {
    case 1: group_pass<kVnni, Rows, 1>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 2: group_pass<kVnni, Rows, 2>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 3: group_pass<kVnni, Rows, 3>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 4: group_pass<kVnni, Rows, 4>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 5: group_pass<kVnni, Rows, 5>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 6: group_pass<kVnni, Rows, 6>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 7: group_pass<kVnni, Rows, 7>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 8: group_pass<kVnni, Rows, 8>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 9: group_pass<kVnni, Rows, 9>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 10: group_pass<kVnni, Rows, 10>(nb, wg, xs, out, ldo, rows, prefetch); break;
    case 11: group_pass<kVnni, Rows, 11>(nb, wg, xs, out, ldo, rows, prefetch); break;
    default: group_pass<kVnni, Rows, kMaxActs>(nb, wg, xs, out, ldo, rows, prefetch); break;
  }
}

// Every activation prepared once (pass p in its own slot), then each 16-row
// group re-laid out once and met by every pass.
template <bool kVnni, typename Rows>
void tile(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
          float* out, int64_t ldo) {
  const int64_t nb = n / kQK_K;
  if (n_rows <= 0 || n_acts <= 0 || nb <= 0) return;
  const int64_t passes = (n_acts + kMaxActs - 1) / kMaxActs;
  const size_t pass_bytes = static_cast<size_t>(nb) * kMaxActs * kActBytes;
  uint8_t* xr = t_acts.get(static_cast<size_t>(passes) * pass_bytes);
  auto pass_acts = [&](int64_t p) { return static_cast<int>(std::min<int64_t>(kMaxActs, n_acts - p * kMaxActs)); };
  for (int64_t p = 0; p < passes; ++p) prepare_acts<Rows>(nb, acts + p * kMaxActs, pass_acts(p), xr + p * pass_bytes);
  auto* wr = reinterpret_cast<__m512i*>(t_weights.get(static_cast<size_t>(nb) * kBlockRegs<Rows> * sizeof(__m512i)));
  for (int64_t r0 = 0; r0 < n_rows; r0 += kGroupRows) {
    relayout_group<Rows>(nb, w, row_bytes, r0, n_rows, wr);
    const int64_t left = n_rows - r0;
    const auto rows = static_cast<__mmask16>(left >= kGroupRows ? 0xffffu : (1u << left) - 1);
    // The first pass asks for the next group's rows (contiguous from its first).
    Prefetch next;
    if (r0 + kGroupRows < n_rows) {
      const int64_t next_rows = std::min<int64_t>(kGroupRows, n_rows - r0 - kGroupRows);
      next.next = reinterpret_cast<const char*>(w + static_cast<uint64_t>(r0 + kGroupRows) * row_bytes);
      next.bytes_per_block = (static_cast<size_t>(next_rows) * row_bytes + static_cast<size_t>(nb) - 1) /
                             static_cast<size_t>(nb);
    }
    for (int64_t p = 0; p < passes; ++p) {
      group_passes<kVnni, Rows>(pass_acts(p), nb, wr, xr + p * pass_bytes, out + p * kMaxActs * ldo + r0, ldo, rows,
                          p == 0 ? next : Prefetch{});
    }
  }
}

// Few activations: the one-row kernels' sums, 16 rows at a time with the rows
// in lanes (dot_rows_avx512.h), one activation after another; else the tile.
template <bool kVnni, typename Rows, int64_t kMin = kMinActs, typename RowsKernel>
void tile_or_rows(RowsKernel rows_kernel, int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                  const void* const* acts, int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts < kMin) {
    for (int64_t t = 0; t < n_acts; ++t) {
      rows_kernel(n, w, row_bytes, n_rows, static_cast<const BlockQ8_K*>(acts[t]), out + t * ldo);
    }
  } else {
    tile<kVnni, Rows>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  }
}

}  // namespace

template <bool kVnni>
void q4_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_or_rows<kVnni, Q4KRows>(q4_K_decode<kVnni>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q4_K_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);
template void q4_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

template <bool kVnni>
void q2_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_or_rows<kVnni, Q2KRows>(avx512_detail::q2_K_rows<kVnni>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q2_K_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);
template void q2_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

// Q6_K below kMinActs: 16 rows in lanes (dot_rows_avx512.h), bit-identical
// to the one-row kernel the avx512 levels use (dot_avx2.cpp's).
template <bool kVnni>
void q6_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_or_rows<kVnni, Q6KRows>(avx512_detail::q6_K_rows<kVnni>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q6_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

template <bool kVnni>
void q5_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_or_rows<kVnni, Q5KRows>(avx512_detail::q5_K_rows<kVnni>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q5_K_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);
template void q5_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

template <bool kVnni>
void q3_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_or_rows<kVnni, Q3KRows>(avx512_detail::q3_K_rows<kVnni>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q3_K_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);
template void q3_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

// IQ4_XS at the VNNI levels (IQ4XSRows).
void iq4_xs_q8_K_vnni(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                      int64_t n_acts, float* out, int64_t ldo) {
  tile_or_rows<true, IQ4XSRows>(avx512_detail::iq4_xs_rows<true>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

namespace {

using RowsFunction = void(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x,
                          float* out);

// Below kMinTile activations a 16-row decode kernel per activation
// (dot_rows_avx512.h), else `tile` (avx2's, for formats without an avx512
// tile at the level); both match the one-row kernel.
template <RowsFunction* kRows, TileFunction* kTile, int64_t kMinTile>
void rows_or_tile(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts >= kMinTile) {
    kTile(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
    return;
  }
  for (int64_t t = 0; t < n_acts; ++t)
    kRows(n, w, row_bytes, n_rows, static_cast<const BlockQ8_K*>(acts[t]), out + t * ldo);
}

}  // namespace

// IQ4_XS at plain avx512 (no vpdpbusd for IQ4XSRows): the avx2 lanes tile
// from 5 activations (Zen 5, 64x4096: the 16-row kernel ~6 us per
// activation, the tile ~14 + 3).
void iq4_xs_q8_K_plain(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                       int64_t n_acts, float* out, int64_t ldo) {
  rows_or_tile<avx512_detail::iq4_xs_rows<false>, tile_avx2::iq4_xs_lanes, 5>(n, w, row_bytes, n_rows, acts, n_acts,
                                                                              out, ldo);
}

// IQ3_XXS, IQ2_XS and IQ2_S: the VNNI levels' tile (Rows) from 2 activations,
// plain avx512 avx2's lanes tile from kMinLanes; below them the 16-row decode
// kernel per activation, which gathers the grid (avx512, avx512vnni) or
// decodes it from registers (avx512vbmi). Plain avx512's thresholds (Zen 5,
// 64x4096): the 16-row kernels ~22 / 15 / 15 us per activation, the lanes
// tiles ~55 / 50 / 50 at 2.
template <bool kVnni, typename Rows, RowsFunction* kRows, TileFunction* kLanes, int64_t kMinLanes>
void grid_tile(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  if constexpr (kVnni) {
    tile_or_rows<true, Rows>(kRows, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  } else {
    rows_or_tile<kRows, kLanes, kMinLanes>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  }
}

#define DS4_GRID_TILE(name, Rows, rows, lanes, min_lanes)                                                             \
  template <bool kVnni, bool kVbmi>                                                                                   \
  void name(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts, \
            float* out, int64_t ldo) {                                                                                \
    grid_tile<kVnni, Rows<kVbmi>, avx512_detail::rows<kVnni, kVbmi>, tile_avx2::lanes, min_lanes>(                    \
        n, w, row_bytes, n_rows, acts, n_acts, out, ldo);                                                             \
  }                                                                                                                   \
  template void name<false, false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,   \
                                   int64_t);                                                                          \
  template void name<true, false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,    \
                                  int64_t);                                                                           \
  template void name<true, true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,     \
                                 int64_t);
DS4_GRID_TILE(iq3_xxs_q8_K, IQ3XXSRows, iq3_xxs_rows, iq3_xxs_lanes, 2)
DS4_GRID_TILE(iq2_xs_q8_K, IQ2XSRows, iq2_xs_rows, iq2_xs_lanes, 3)
DS4_GRID_TILE(iq2_s_q8_K, IQ2SRows, iq2_s_rows, iq2_s_lanes, 3)
#undef DS4_GRID_TILE

// IQ1_M: the VNNI levels' tile (IQ1MRows) from 2 activations; plain avx512
// avx2's lanes tile from 3 (Zen 5, 64x4096: the 16-row kernel ~20 us per
// activation, the lanes tile ~60 at 2, ~70 at 4); below them the 16-row
// decode kernel per activation.
template <bool kVnni>
void iq1_m_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  if constexpr (kVnni) {
    tile_or_rows<true, IQ1MRows>(avx512_detail::iq1_m_rows<true>, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  } else {
    rows_or_tile<avx512_detail::iq1_m_rows<false>, tile_avx2::iq1_m_lanes, 3>(n, w, row_bytes, n_rows, acts, n_acts,
                                                                              out, ldo);
  }
}
template void iq1_m_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                                int64_t);
template void iq1_m_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);

}  // namespace tile_avx512
}  // namespace ds4::quant
