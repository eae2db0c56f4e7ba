// Tile kernels (dot_tile.h) for IQ2_XXS at the avx512 levels (the K-quants:
// dot_tile_kquant_avx512.cpp).
//
// Layout: activations in int32 lanes, weights broadcast. The activations are
// repacked once per call so that one register holds the same byte quad of 16
// activations (stored x + 128, for vpdpbusd's unsigned operand); each weight
// block of a row is decoded once per call into int8 quads (sign * grid) and
// one vpdpbusd with the weight quad broadcast adds that quad for all lanes;
// 128 * sum(weights) is taken off per block, and each 32-element sub-block's
// sum is multiplied by its scale ls. Rows go 8 at a time, so each activation register serves 8 rows.
// With 8 or fewer activations each block is split in 2 or 4 parts that take
// separate lanes (and are added at the block's end), so the 16 lanes stay
// busy.
//
// Every lane ends each block with exactly the integer sums the scalar
// reference forms, and the float combination per block is the scalar one,
// lane by lane, so each output equals the one-row kernels (themselves
// bit-identical to scalar) bit for bit.
//
// Few activations (< kMinActsIq2Xxs) go through the one-row kernels instead
// (at the avx512vbmi level: 16 rows at a time against an interleaved copy of
// each activation, dot_rows_avx512.h).
#include "core/x86_kernel_prelude.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "core/kernel_scratch.h"
#include "quant/dot_rows_avx512.h"
#include "quant/dot_tile.h"
#include "quant/dot_tile_avx512.h"
#include "quant/dot_tile_loop.h"
#include "quant/dot_x86_common.h"
#include "quant/iq2_xxs_avx512.h"
#include "quant/iq2_xxs_tables.h"

namespace ds4::quant {

extern const DotKernels kDotAvx512;
extern const DotKernels kDotAvx512Vnni;
namespace tile_avx512 {
namespace {

template <bool kVnni>
const DotKernels& level() { return kVnni ? kDotAvx512Vnni : kDotAvx512; }

constexpr int kLanes = 16;    // int32 lanes per register: 16 / S activations x S block parts
constexpr int kRowTile = 8;   // rows sharing each activation register
// Fewest activations for which a tile beats looping the one-row kernel
// (measured, 64 rows x 4096, avx512vnni): decoding a block costs about as much
// as one one-row block dot, and groups of 4 or 8 activations split each block
// in 4 or 2 parts to fill the 16 lanes.
constexpr int64_t kMinActsIq2Xxs = 3;

// The decoded weights and packed activations of one call.
thread_local KernelScratch t_acts;
thread_local KernelScratch t_weights;
thread_local KernelScratch t_stage;  // one group's activation dwords before the transpose

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

inline float f16_value(uint16_t h) { return _cvtsh_ss(h); }

// dot_bytes (dot_tile_avx512.h) is exact here: (x + 128) * 43 * 2 < 32768.

// 16 x 16 transpose of dwords: row r of src (stride src_stride dwords) becomes
// register r of dst (16 lanes = the 16 rows).
inline void transpose16(const uint32_t* src, int64_t src_stride, __m512i* dst) {
  __m512i r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = load512(src + i * src_stride);
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // r[4i + j]: rows 4i..4i+3, dword column j of each 128-bit lane k.
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i a0 = _mm512_shuffle_i32x4(r[j], r[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i a1 = _mm512_shuffle_i32x4(r[j], r[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i b0 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i b1 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], _MM_SHUFFLE(3, 1, 3, 1));
    // Column 4k + j of every row: lanes ordered rows 0-3, 4-7, 8-11, 12-15.
    dst[j] = _mm512_shuffle_i32x4(a0, b0, _MM_SHUFFLE(2, 0, 2, 0));
    dst[8 + j] = _mm512_shuffle_i32x4(a0, b0, _MM_SHUFFLE(3, 1, 3, 1));
    dst[4 + j] = _mm512_shuffle_i32x4(a1, b1, _MM_SHUFFLE(2, 0, 2, 0));
    dst[12 + j] = _mm512_shuffle_i32x4(a1, b1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// ---- Activations ----
//
// A group holds 16 / S activations; lane a * S + h of every register belongs
// to activation a and to part h of the block's 64 byte quads (S = 1, 2 or 4
// parts, so that few activations still fill the lanes; the parts' integer
// sums are added at the end of the block). Per block: 64 / S registers of
// quads (step q, part h: quad h * 64 / S + q), then one register of the
// f32 scales (d of activation a in all its lanes). Missing activations of a
// short group are zero.

struct ActLayout {
  int split;  // S
  int steps() const { return 64 / split; }
  int per_block() const { return steps() + 1; }
};

// One activation block as dwords: byte quads x[4q .. 4q+3] + 128 at dword q.
inline void act_block_dwords(const BlockQ8_K& x, uint32_t* out) {
  for (int c = 0; c < 4; ++c) {
    const __m512i xv = load512(x.qs + 64 * c);
    _mm512_storeu_si512(out + 16 * c, _mm512_xor_si512(xv, _mm512_set1_epi8(static_cast<char>(0x80))));
  }
}

void pack_acts(const void* const* acts, int64_t n_acts, int64_t nb, const ActLayout& layout, __m512i* dst) {
  const int split = layout.split;
  const int64_t per_group = kLanes / split;
  const int64_t groups = (n_acts + per_group - 1) / per_group;
  const int steps = layout.steps();
  const int row_dwords = steps;
  uint32_t* stage = t_stage.get_as<uint32_t>(static_cast<size_t>(kLanes * row_dwords));
  alignas(64) uint32_t act_dwords[64];
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < nb; ++i) {
      __m512i* out = dst + (g * nb + i) * layout.per_block();
      alignas(64) float d[kLanes] = {};
      for (int64_t a = 0; a < per_group; ++a) {
        if (g * per_group + a >= n_acts) {
          // A short group's missing activations: zero codes (and scale).
          std::memset(stage + a * split * row_dwords, 0, sizeof(uint32_t) * split * row_dwords);
          continue;
        }
        const BlockQ8_K& x = static_cast<const BlockQ8_K*>(acts[g * per_group + a])[i];
        if (split == 1) {
          // Straight into the lane's row.
          act_block_dwords(x, stage + a * row_dwords);
          d[a] = x.d;
          continue;
        }
        act_block_dwords(x, act_dwords);
        for (int h = 0; h < split; ++h) {
          uint32_t* row = stage + (a * split + h) * row_dwords;
          std::memcpy(row, act_dwords + h * steps, sizeof(uint32_t) * steps);
          d[a * split + h] = x.d;
        }
      }
      for (int u = 0; u < steps; u += 16) transpose16(stage + u, row_dwords, out + u);
      out[layout.per_block() - 1] = _mm512_castps_si512(_mm512_load_ps(d));
    }
  }
}

// Reorders a decoded block's kCount units for S parts (unit h * kCount / S + q
// to index q * S + h), so the S units one broadcast puts in lanes h = 0..S-1
// of step q are adjacent. Done in registers: the units were just stored.
alignas(64) constexpr int32_t kPick2[2][16] = {{0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23},
                                               {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
alignas(64) constexpr int32_t kPick4[4][16] = {{0, 16, 1, 17, 2, 18, 3, 19, 0, 0, 0, 0, 0, 0, 0, 0},
                                               {4, 20, 5, 21, 6, 22, 7, 23, 0, 0, 0, 0, 0, 0, 0, 0},
                                               {8, 24, 9, 25, 10, 26, 11, 27, 0, 0, 0, 0, 0, 0, 0, 0},
                                               {12, 28, 13, 29, 14, 30, 15, 31, 0, 0, 0, 0, 0, 0, 0, 0}};
alignas(64) constexpr int64_t kInterleaveQwords[8] = {0, 8, 1, 9, 2, 10, 3, 11};

template <int S, int kCount>
inline void split_units(uint32_t* units) {
  if constexpr (S > 1) {
    constexpr int kPerPart = kCount / S / 16;  // registers per part
    __m512i r[kCount / 16];
#pragma GCC unroll 8
    for (int k = 0; k < kCount / 16; ++k) r[k] = load512(units + 16 * k);
#pragma GCC unroll 8
    for (int k = 0; k < kPerPart; ++k) {
      if constexpr (S == 2) {
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          _mm512_storeu_si512(units + 2 * (16 * k + 8 * half),
                              _mm512_permutex2var_epi32(r[k], load512(kPick2[half]), r[kPerPart + k]));
        }
      } else {
#pragma GCC unroll 4
        for (int sub = 0; sub < 4; ++sub) {
          const __m512i p01 = _mm512_permutex2var_epi32(r[k], load512(kPick4[sub]), r[kPerPart + k]);
          const __m512i p23 = _mm512_permutex2var_epi32(r[2 * kPerPart + k], load512(kPick4[sub]), r[3 * kPerPart + k]);
          _mm512_storeu_si512(units + 4 * (16 * k + 4 * sub),
                              _mm512_permutex2var_epi64(p01, load512(kInterleaveQwords), p23));
        }
      }
    }
  }
}

// Where unit u of kCount ends up after split_units<S, kCount>.
template <int S, int kCount>
constexpr int split_index(int u) {
  return (u % (kCount / S)) * S + u / (kCount / S);
}

// ---- IQ2_XXS weights ----
//
// Decoded block: 64 dwords of int8 quads sign * grid in element order, the
// 8 sub-block multipliers ls = 2 * scale + 1 (split order), the int32
// 128 * sum over sub-blocks of ls * sum(sign * grid), then d as f32. The
// tile adds each sub-block's 32 products with vpdpbusd (x + 128 against the
// signed grid bytes) and multiplies the sub-block sum by ls.

constexpr int kIq2Dwords = 64 + 8 + 2;

// Sub-block s's multiplier (the odd dword 2s + 1 of the block's ls vector)
// placed at dword split_index<S, 8>(s), for one 256-bit store.
template <int S>
constexpr std::array<int32_t, 16> ls_store_order() {
  std::array<int32_t, 16> idx{};
  for (int s = 0; s < 8; ++s) idx[static_cast<size_t>(split_index<S, 8>(s))] = 2 * s + 1;
  return idx;
}
template <int S>
alignas(64) constexpr std::array<int32_t, 16> kLsStoreOrder = ls_store_order<S>();
// For chunk c (sub-blocks 2c, 2c+1; qword j = group j of the chunk): qword j's
// low dword takes the multiplier of sub-block 2c + j / 4.
alignas(64) constexpr int32_t kLsQwords[4][16] = {
#define DS4_LSQ(c)                                                                                        \
  {4 * (c) + 1, 0, 4 * (c) + 1, 0, 4 * (c) + 1, 0, 4 * (c) + 1, 0, 4 * (c) + 3, 0, 4 * (c) + 3, 0, \
   4 * (c) + 3, 0, 4 * (c) + 3, 0}
    DS4_LSQ(0), DS4_LSQ(1), DS4_LSQ(2), DS4_LSQ(3),
#undef DS4_LSQ
};

// The decoded block's tail: the sub-block multipliers in split order, the
// weighted sum times 128, d.
template <int S>
inline void store_iq2_xxs_tail(const BlockIQ2_XXS& w, __m512i ls, int32_t weighted, uint32_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64),
                      _mm512_castsi512_si256(_mm512_permutexvar_epi32(load512(kLsStoreOrder<S>.data()), ls)));
  out[72] = static_cast<uint32_t>(128 * weighted);
  const float d = f16_value(w.d);
  std::memcpy(out + 73, &d, 4);
}

// Odd dwords (sign words): ls = 2 * (top 4 bits) + 1; the even ones are unused.
inline __m512i iq2_xxs_ls(__m512i q) {
  return _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(q, 28), 1), _mm512_set1_epi32(1));
}

// The decoded block from each 64-element chunk's signed grid bytes
// (chunk(c), c = 0..3): the bytes, the sub-block scales, the weighted sum, d.
template <int S, typename Chunk>
inline void store_iq2_xxs_block(const BlockIQ2_XXS& w, __m512i q, uint32_t* out, Chunk chunk) {
  const __m512i ls = iq2_xxs_ls(q);
  // Sum over groups of ls * (sum of the group's 8 values), via psadbw of
  // value + 128 less 8 * 128 (signed, so the product is a signed multiply).
  __m512i weighted = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i gs = chunk(c);
    _mm512_storeu_si512(out + 16 * c, gs);
    const __m512i sums = _mm512_sub_epi64(
        _mm512_sad_epu8(_mm512_xor_si512(gs, _mm512_set1_epi8(static_cast<char>(0x80))), _mm512_setzero_si512()),
        _mm512_set1_epi64(8 * 128));
    weighted = _mm512_add_epi64(weighted, _mm512_mul_epi32(sums, _mm512_permutexvar_epi32(load512(kLsQwords[c]), ls)));
  }
  store_iq2_xxs_tail<S>(w, ls, static_cast<int32_t>(_mm512_reduce_add_epi64(weighted)), out);
}

template <int S>
void decode_iq2_xxs(const BlockIQ2_XXS& w, uint32_t* out) {
  const __m512i q = load512(w.qs);
  const __m512i flags = _mm512_mask_blend_epi32(0x5555, q, _mm512_srli_epi64(field7_parity(q), 32));
  const __m512i idx = _mm512_shuffle_epi8(q, load512(kGridIndexWords));
  const auto* grid = reinterpret_cast<const long long*>(kIq2xxsGrid.data());
  store_iq2_xxs_block<S>(w, q, out, [&](int c) {
    const __m512i g = _mm512_i64gather_epi64(
        _mm512_maskz_permutexvar_epi16(kQwordLowWords, load512(kGridIndexQwords[c]), idx), grid, 8);
    const __m512i lane = _mm512_permutexvar_epi32(load512(kLaneDwords[c]), flags);
    const __mmask64 neg = _mm512_test_epi8_mask(_mm512_shuffle_epi8(lane, load512(kIq2SignPattern.byte)),
                                                load512(kIq2SignPattern.bit));
    return _mm512_mask_sub_epi8(g, neg, _mm512_setzero_si512(), g);
  });
}

// The same decoded block with the grid from registers (avx512vbmi level).
// Each group's sign byte comes from ksigns by vpermi2b and is spread over its
// 8 bytes by vpermb (no round trip through general registers); the weighted
// sum is one vpdpbusd per chunk of the multipliers (as bytes) with the signed
// grid bytes.

// vpermb indices for chunk c: byte 8j + i = the sign byte of group 8c + j
// (byte 8s + k of the sign register holds sub-block s's group k).
constexpr std::array<std::array<int8_t, 64>, 4> make_chunk_sign_bytes() {
  std::array<std::array<int8_t, 64>, 4> a{};
  for (int c = 0; c < 4; ++c) {
    for (int b = 0; b < 64; ++b) {
      const int j = b / 8;
      a[static_cast<size_t>(c)][static_cast<size_t>(b)] = static_cast<int8_t>(16 * c + 8 * (j / 4) + j % 4);
    }
  }
  return a;
}
alignas(64) constexpr std::array<std::array<int8_t, 64>, 4> kChunkSignBytes = make_chunk_sign_bytes();
// Byte 8j + i: bit i (element i of a group).
constexpr std::array<uint8_t, 64> make_group_bits() {
  std::array<uint8_t, 64> a{};
  for (int b = 0; b < 64; ++b) a[static_cast<size_t>(b)] = static_cast<uint8_t>(1u << (b % 8));
  return a;
}
alignas(64) constexpr std::array<uint8_t, 64> kGroupBits = make_group_bits();
// vpermb indices for chunk c: byte e = sub-block 2c + e / 32's multiplier
// (byte 8s of the multiplier register).
constexpr std::array<std::array<int8_t, 64>, 4> make_chunk_ls_bytes() {
  std::array<std::array<int8_t, 64>, 4> a{};
  for (int c = 0; c < 4; ++c) {
    for (int b = 0; b < 64; ++b) a[static_cast<size_t>(c)][static_cast<size_t>(b)] = static_cast<int8_t>(16 * c + 8 * (b / 32));
  }
  return a;
}
alignas(64) constexpr std::array<std::array<int8_t, 64>, 4> kChunkLsBytes = make_chunk_ls_bytes();

template <int S>
void decode_iq2_xxs_vbmi(const BlockIQ2_XXS& w, uint32_t* out, const Iq2CompactGrid& grid, __m512i signs_lo,
                         __m512i signs_hi) {
  const __m512i q = load512(w.qs);
  const __m512i codes = iq2_xxs_chunk_codes(q, grid);
  // Byte 8s + k: ksigns of sub-block s's 7-bit field k (vpermi2b reads index bits 0..6).
  const __m512i signs =
      _mm512_permutex2var_epi8(signs_lo, _mm512_multishift_epi64_epi8(load512(kIq2SignFieldShifts), q), signs_hi);
  // Byte 8s: sub-block s's multiplier 2 * (W1 >> 28) + 1 (bit 59 is W1's bit 27).
  const __m512i ls_bytes = _mm512_or_si512(_mm512_srli_epi64(q, 59), _mm512_set1_epi64(1));
  __m512i weighted = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i g = iq2_xxs_chunk_magnitudes(codes, c);
    const __mmask64 neg = _mm512_test_epi8_mask(
        _mm512_permutexvar_epi8(load512(kChunkSignBytes[static_cast<size_t>(c)].data()), signs),
        load512(kGroupBits.data()));
    const __m512i gs = _mm512_mask_sub_epi8(g, neg, _mm512_setzero_si512(), g);
    _mm512_storeu_si512(out + 16 * c, gs);
    weighted = _mm512_dpbusd_epi32(
        weighted, _mm512_permutexvar_epi8(load512(kChunkLsBytes[static_cast<size_t>(c)].data()), ls_bytes), gs);
  }
  store_iq2_xxs_tail<S>(w, iq2_xxs_ls(q), _mm512_reduce_add_epi32(weighted), out);
}

// ---- Per-group compute ----

// The S weight units of one step in lanes h = 0..S-1, repeated.
template <int S>
inline __m512i bcast(const uint32_t* p) {
  if constexpr (S == 1) {
    return _mm512_set1_epi32(static_cast<int>(*p));
  } else if constexpr (S == 2) {
    long long v;
    std::memcpy(&v, p, 8);
    return _mm512_set1_epi64(v);
  } else {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

inline __m512 bcast_f32(const uint32_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return _mm512_set1_ps(f);
}

// Lane a * S gets the sum of lanes a * S .. a * S + S - 1 (exact integers).
template <int S>
inline __m512i sum_parts(__m512i v) {
  if constexpr (S >= 2) v = _mm512_add_epi32(v, _mm512_srli_epi64(v, 32));
  if constexpr (S == 4) v = _mm512_add_epi32(v, _mm512_bsrli_epi128(v, 8));
  return v;
}

// Lanes h = 0 of each activation set to v, the others 0 (a per-block bias
// counted once per activation).
template <int S>
inline __m512i first_part(int32_t v) {
  constexpr __mmask16 kMask = S == 1 ? 0xffff : S == 2 ? 0x5555 : 0x1111;
  return _mm512_maskz_set1_epi32(kMask, v);
}

template <int S>
inline void store_lanes(__m512 v, float* out, int64_t ldo, int64_t acts) {
  alignas(64) float t[kLanes];
  _mm512_store_ps(t, v);
  for (int64_t a = 0; a < acts; ++a) out[a * ldo] = t[a * S];
}

// acc[r] += the block's sum over its 8 sub-blocks of scale * (the
// sub-block's byte products), for weights laid out as IQ2_XXS's
// decoded blocks (64 quads, then 8 scales in split order): row r's block at
// w + r * kRowStride, the activation block at xb.
template <bool kVnni, int S, int R, int kRowStride>
inline void windowed_sums(const uint32_t* w, const __m512i* xb, __m512i* acc) {
  constexpr int kSteps = 64 / S;
  // 8 quads (one sub-block per part) per sub-block step.
#pragma GCC unroll 8
  for (int j = 0; j < kSteps / 8; ++j) {
    __m512i sub[R];
    for (int r = 0; r < R; ++r) sub[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int q = 8 * j; q < 8 * j + 8; ++q) {
      const __m512i xv = xb[q];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sub[r] = dot_bytes<kVnni>(sub[r], xv, bcast<S>(w + r * kRowStride + q * S));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_add_epi32(acc[r], _mm512_mullo_epi32(sub[r], bcast<S>(w + r * kRowStride + 64 + j * S)));
  }
}

template <bool kVnni, int S, int R>
void iq2_group(const uint32_t* wdec, int64_t nb, const __m512i* xg, float* out, int64_t ldo, int64_t acts) {
  constexpr int kSteps = 64 / S;
  __m512 sum[R];
  for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m512i* xb = xg + i * (kSteps + 1);
    const uint32_t* wb = wdec + i * kRowTile * kIq2Dwords;
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = first_part<S>(-static_cast<int32_t>(wb[r * kIq2Dwords + 72]));
    windowed_sums<kVnni, S, R, kIq2Dwords>(wb, xb, acc);
    const __m512 xd = _mm512_castsi512_ps(xb[kSteps]);
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_mul_ps(bcast_f32(wb + r * kIq2Dwords + 73), xd);
      sum[r] = _mm512_add_ps(sum[r], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum_parts<S>(acc[r]))));
    }
  }
  for (int r = 0; r < R; ++r) store_lanes<S>(_mm512_mul_ps(_mm512_set1_ps(0.125f), sum[r]), out + r, ldo, acts);
}

// ---- Driver ----

// kIq2XxsVbmi: IQ2_XXS with the grid decoded from registers (avx512vbmi).
enum class Kind { kIq2Xxs, kIq2XxsVbmi };

template <bool kVnni, Kind kKind, int S, int R>
void group_rows(const uint32_t* wdec, int64_t nb, const __m512i* xg, float* out, int64_t ldo, int64_t acts) {
  iq2_group<kVnni, S, R>(wdec, nb, xg, out, ldo, acts);
}

template <bool kVnni, Kind kKind, int S>
void run_group_rows(int rows, const uint32_t* wdec, int64_t nb, const __m512i* xg, float* out, int64_t ldo,
                    int64_t acts) {
  switch (rows) {
    case 8: group_rows<kVnni, kKind, S, 8>(wdec, nb, xg, out, ldo, acts); break;
    case 7: group_rows<kVnni, kKind, S, 7>(wdec, nb, xg, out, ldo, acts); break;
    case 6: group_rows<kVnni, kKind, S, 6>(wdec, nb, xg, out, ldo, acts); break;
    case 5: group_rows<kVnni, kKind, S, 5>(wdec, nb, xg, out, ldo, acts); break;
    case 4: group_rows<kVnni, kKind, S, 4>(wdec, nb, xg, out, ldo, acts); break;
    case 3: group_rows<kVnni, kKind, S, 3>(wdec, nb, xg, out, ldo, acts); break;
    case 2: group_rows<kVnni, kKind, S, 2>(wdec, nb, xg, out, ldo, acts); break;
    default: group_rows<kVnni, kKind, S, 1>(wdec, nb, xg, out, ldo, acts); break;
  }
}

template <bool kVnni, Kind kKind, typename Block, int S>
void tile_split(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  const int64_t nb = n / kQK_K;
  constexpr ActLayout layout{S};
  constexpr int kDwords = kIq2Dwords;
  constexpr int64_t kPerGroup = kLanes / S;
  const int64_t groups = (n_acts + kPerGroup - 1) / kPerGroup;
  // Up to kRowsPerPass rows are decoded at once and meet every activation;
  // the activations are packed kGroupsPerPass groups at a time, which stay in
  // cache while every row tile of the pass reads them.
  constexpr int64_t kRowsPerPass = 64;
  constexpr int64_t kGroupsPerPass = 4;
  constexpr uint64_t kPrefetchRows = 6;
  const int64_t pass_rows_max = n_rows < kRowsPerPass ? n_rows : kRowsPerPass;
  const int64_t pass_groups_max = groups < kGroupsPerPass ? groups : kGroupsPerPass;
  // Decoded blocks go row tile by row tile, and within a tile block by block
  // with the tile's kRowTile rows side by side: a group reads each block's rows
  // at fixed offsets from one pointer (with per-row streams GCC kept hundreds of
  // strength-reduced addresses on the stack).
  const int64_t pass_tiles_max = (pass_rows_max + kRowTile - 1) / kRowTile;
  auto* wdec = reinterpret_cast<uint32_t*>(
      t_weights.get(static_cast<size_t>(pass_tiles_max * kRowTile * nb * kDwords) * sizeof(uint32_t)));
  auto* xpack = reinterpret_cast<__m512i*>(
      t_acts.get(static_cast<size_t>(pass_groups_max * nb * layout.per_block()) * sizeof(__m512i)));
  [[maybe_unused]] Iq2CompactGrid grid{};
  [[maybe_unused]] __m512i signs_lo{}, signs_hi{};
  if constexpr (kKind == Kind::kIq2XxsVbmi) {
    grid = load_iq2_compact_grid();
    signs_lo = load512(kIq2xsSigns.data());
    signs_hi = load512(kIq2xsSigns.data() + 64);
  }
  for (int64_t p0 = 0; p0 < n_rows; p0 += kRowsPerPass) {
    const int64_t pass_rows = n_rows - p0 < kRowsPerPass ? n_rows - p0 : kRowsPerPass;
    for (int64_t r = 0; r < pass_rows; ++r) {
      const auto* row = reinterpret_cast<const Block*>(w + static_cast<uint64_t>(p0 + r) * row_bytes);
      // The weights come from memory (each expert matrix is read once per
      // pass): ask for the row kPrefetchRows ahead while this one is decoded.
      const auto* ahead = reinterpret_cast<const char*>(row) + kPrefetchRows * row_bytes;
      for (uint64_t off = 0; off < row_bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
      for (int64_t i = 0; i < nb; ++i) {
        uint32_t* dst = wdec + ((r / kRowTile * nb + i) * kRowTile + r % kRowTile) * kDwords;
        if constexpr (kKind == Kind::kIq2Xxs) {
          decode_iq2_xxs<S>(row[i], dst);
        } else {
          decode_iq2_xxs_vbmi<S>(row[i], dst, grid, signs_lo, signs_hi);
        }
        split_units<S, 64>(dst);  // the scales are decoded in split order
      }
    }
    for (int64_t g0 = 0; g0 < groups; g0 += kGroupsPerPass) {
      const int64_t pass_groups = groups - g0 < kGroupsPerPass ? groups - g0 : kGroupsPerPass;
      const int64_t first_act = g0 * kPerGroup;
      const int64_t pass_acts =
          n_acts - first_act < pass_groups * kPerGroup ? n_acts - first_act : pass_groups * kPerGroup;
      // With one activation pass, its packing serves every row pass.
      if (p0 == 0 || groups > kGroupsPerPass) pack_acts(acts + first_act, pass_acts, nb, layout, xpack);
      for (int64_t r0 = 0; r0 < pass_rows; r0 += kRowTile) {
        const int rows = static_cast<int>(pass_rows - r0 < kRowTile ? pass_rows - r0 : kRowTile);
        for (int64_t g = 0; g < pass_groups; ++g) {
          const int64_t group_acts = pass_acts - g * kPerGroup < kPerGroup ? pass_acts - g * kPerGroup : kPerGroup;
          run_group_rows<kVnni, kKind, S>(rows, wdec + r0 * nb * kDwords, nb, xpack + g * nb * layout.per_block(),
                                          out + (first_act + g * kPerGroup) * ldo + p0 + r0, ldo, group_acts);
        }
      }
    }
  }
}

// Splits each block into 4 parts for up to 4 activations, 2 for up to 8.
template <bool kVnni, Kind kKind, typename Block>
void tile(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
          float* out, int64_t ldo) {
  if (n_acts <= 4) {
    tile_split<kVnni, kKind, Block, 4>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  } else if (n_acts <= 8) {
    tile_split<kVnni, kKind, Block, 2>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  } else {
    tile_split<kVnni, kKind, Block, 1>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
  }
}

// Few activations at the avx512vbmi level (decode): each activation is
// interleaved once for the call's rows, then the rows are dotted with it 16 at
// a time (dot_rows_avx512.h).
void rows_interleaved(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                      int64_t n_acts, float* out, int64_t ldo) {
  const int64_t nb = n / kQK_K;
  // Each activation's slot 64-byte aligned (BlockQ8_K needs 4).
  const size_t act_bytes = (static_cast<size_t>(nb) * (sizeof(BlockQ8_K) + 1) + 63) & ~size_t{63};
  uint8_t* scratch = t_acts.get(act_bytes * static_cast<size_t>(n_acts));
  // Per activation: its nb interleaved blocks, then nb exact-path flags.
  const auto interleaved = [&](int64_t t) {
    return reinterpret_cast<BlockQ8_K*>(scratch + act_bytes * static_cast<size_t>(t));
  };
  const auto exact = [&](int64_t t) { return reinterpret_cast<uint8_t*>(interleaved(t) + nb); };
  for (int64_t t = 0; t < n_acts; ++t) {
    avx512_detail::iq2_xxs_interleave_act(nb, static_cast<const BlockQ8_K*>(acts[t]), interleaved(t), exact(t));
  }
  for (int64_t t = 0; t < n_acts; ++t) {
    avx512_detail::iq2_xxs_rows_interleaved(n, w, row_bytes, n_rows, static_cast<const BlockQ8_K*>(acts[t]),
                                            interleaved(t), exact(t), out + t * ldo);
  }
}

}  // namespace

template <bool kVnni>
void iq2_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts < kMinActsIq2Xxs) {
    tile_detail::loop_dots<BlockIQ2_XXS, BlockQ8_K>(level<kVnni>().iq2_xxs_q8_K, n, w, row_bytes, n_rows, acts, n_acts,
                                                    out, ldo);
    return;
  }
  tile<kVnni, Kind::kIq2Xxs, BlockIQ2_XXS>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void iq2_xxs_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                                  int64_t);
template void iq2_xxs_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                                 int64_t);

void iq2_xxs_q8_K_vbmi(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                       int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts < kMinActsIq2Xxs) {
    rows_interleaved(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
    return;
  }
  tile<true, Kind::kIq2XxsVbmi, BlockIQ2_XXS>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

}  // namespace tile_avx512
}  // namespace ds4::quant
