// Tile kernels (dot_tile.h) for Q8_0, MXFP4 and the float formats at the avx512 levels.
//
// Integer formats (Q8_0 x Q8_0, MXFP4 x Q8_0): one register lane per weight
// row. The weights of 16 rows are first re-laid out so that lane r of register
// k holds bytes 4k..4k+3 of row r's block codes (MXFP4 decoded to its doubled
// E2M1 values, the integers the one-row kernel multiplies); the activation's
// matching 4 bytes are broadcast to every lane. Eight multiply-adds then leave
// the exact block sum of 16 (row, activation) pairs in 16 lanes, with no
// horizontal reduction. The float part is the one-row kernel's, lane by lane:
// term = float(isum) * (d_w * d_x), added to a running sum in block order
// starting from 0, so every pair is bit-identical to kDotAvx512[Vnni]
// (dot_avx512.cpp's dot_q8_0_q8_0 / dot_mxfp4_q8_0 form the same products and
// add them one block at a time in the same order).
//   avx512vnni: vpdpbusd takes unsigned bytes on the register side, so the
//     weights are stored + 128 and the 128 * sum(x) this adds is subtracted by
//     starting each block's sum at -128 * sum(x) (exact integers).
//   avx512: no VNNI. Weights and activations are widened to int16 pairs
//     (bytes 0,2 and 1,3 of each dword) and multiplied with vpmaddwd.
// Per call, each 16-row group is re-laid out once and each activation prepared
// once (its codes copied next to the pass's others, its scale and the VNNI
// start sum computed 16 blocks at a time), then every group meets every pass
// of up to 12 activations. Both costs are per call, so larger tiles (more rows
// and more activations per call) amortise them better.
//
// Float formats: each (row, activation) pair sees dot_float's exact FMA
// sequence: four 16-lane accumulators fed the 64-element chunks, acc0 the
// 16-element remainder, acc1 the masked tail, then the same final reduction.
// The four accumulators are independent FMA chains, so a tile computes them in
// four passes (one accumulator per pair at a time), which frees the registers
// for a 4-row x 6-activation tile: each weight vector is loaded (and widened)
// once for 6 activations and each activation vector once for 4 rows. A pass
// of a single activation just runs the one-row kernel.
//
// This file is built with the VNNI/BF16/VBMI flags, so the plain "avx512" kernels
// use explicit intrinsics only (no VNNI), as dot_avx512.cpp does.
#include "core/x86_kernel_prelude.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "core/kernel_scratch.h"
#include "quant/dot_tile.h"
#include "quant/dot_tile_avx512.h"
#include "quant/dot_x86_common.h"
#include "quant/mxfp4.h"

namespace ds4::quant {

extern const DotKernels kDotAvx512;

namespace tile_avx512 {
namespace {

// The re-laid-out weights and per-activation data of one call.
thread_local KernelScratch weight_scratch;
thread_local KernelScratch act_scratch;

// ---- Integer formats: row-interleaved weights ----

constexpr int kGroupRows = 16;  // one register lane per row
constexpr int kMaxActs = 12;    // activations per pass over a row group

// One block of a row group, re-laid out:
//   VNNI:  8 registers, lane r of register k = row r's codes 4k..4k+3, + 128 (u8);
//   plain: 16 registers, lane r of register k (k < 8) = int16 codes (4k, 4k+2),
//          of register 8+k = (4k+1, 4k+3);
// then 16 floats: row r's block scale.
template <bool kVnni>
constexpr size_t kCodeRegs = kVnni ? 8 : 16;
template <bool kVnni>
constexpr size_t kGroupBlockBytes = 64 * kCodeRegs<kVnni> + 64;

// One pass of T activations, prepared: their codes per block b at
// codes + (b * T + t) * kActCodeBytes, in the form the kernel broadcasts (VNNI:
// as stored; plain: 64 bytes of int16 pairs as the weights above); per chunk of
// 16 blocks c, start[(c * T + t) * 16 + j] = -128 * sum of block 16c+j's codes
// (VNNI only: cancels the weights' + 128) and scale[...] = its f32 scale.
template <bool kVnni>
constexpr size_t kActCodeBytes = kVnni ? 32 : 64;
constexpr int kChunkBlocks = 16;

struct PreparedActs {
  uint8_t* codes;
  int32_t* start;
  float* scale;
};

inline int64_t chunk_count(int64_t nb) { return (nb + kChunkBlocks - 1) / kChunkBlocks; }

template <bool kVnni>
size_t prepared_bytes(int64_t nb, int acts) {
  const auto chunk_entries = static_cast<size_t>(chunk_count(nb)) * static_cast<size_t>(acts) * kChunkBlocks;
  return static_cast<size_t>(nb) * static_cast<size_t>(acts) * kActCodeBytes<kVnni> + chunk_entries * 8;
}

template <bool kVnni>
PreparedActs prepared_layout(uint8_t* base, int64_t nb, int acts) {
  const auto chunk_entries = static_cast<size_t>(chunk_count(nb)) * static_cast<size_t>(acts) * kChunkBlocks;
  uint8_t* codes = base;
  auto* start = reinterpret_cast<int32_t*>(codes + static_cast<size_t>(nb) * static_cast<size_t>(acts) *
                                                      kActCodeBytes<kVnni>);
  return {codes, start, reinterpret_cast<float*>(start + chunk_entries)};
}

// int16 pairs of bytes (0, 2) and (1, 3) of every dword: the pairing the
// plain level's weights and activations share.
inline __m512i even_bytes_to_words(__m512i v) { return _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8); }
inline __m512i odd_bytes_to_words(__m512i v) { return _mm512_srai_epi16(v, 8); }
inline __m256i even_bytes_to_words(__m256i v) { return _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8); }
inline __m256i odd_bytes_to_words(__m256i v) { return _mm256_srai_epi16(v, 8); }

// Stores one block of a row group: codes[r] = row r's 32 integer codes,
// lane r of scale = its block scale.
template <bool kVnni>
inline void store_group_block(const __m256i codes[kGroupRows], __m512 scale, uint8_t* dst) {
  __m512i regs[8];
  transpose_rows(codes, regs);
  if constexpr (kVnni) {
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) _mm512_store_si512(dst + 64 * k, _mm512_xor_si512(regs[k], bias));
  } else {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      _mm512_store_si512(dst + 64 * k, even_bytes_to_words(regs[k]));
      _mm512_store_si512(dst + 64 * (8 + k), odd_bytes_to_words(regs[k]));
    }
  }
  _mm512_store_ps(dst + 64 * kCodeRegs<kVnni>, scale);
}

// Q8_0 weights: codes as stored, scale f16.
struct Q8_0Rows {
  using Block = BlockQ8_0;
  static __m256i codes(const BlockQ8_0& b, __m256i) { return load256(b.qs); }
  // The block scales of 16 rows, lane r = row r.
  static __m512 scales(const BlockQ8_0* const* rows, int64_t b) {
    alignas(32) uint16_t d[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) std::memcpy(&d[r], &rows[r][b].d, 2);
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
  }
  static __m256i table() { return _mm256_setzero_si256(); }
};

// ggml's E8M0 half scale 2^(e-128) per lane (a copy of dot_avx512.cpp's).
inline __m512 e8m0_half(__m512i e) {
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
}

// MXFP4 weights: doubled E2M1 values (low nibbles = elements 0..15, high =
// 16..31), scale = the E8M0 half scale, as dot_mxfp4_q8_0.
struct Mxfp4Rows {
  using Block = BlockMXFP4;
  static __m256i codes(const BlockMXFP4& b, __m256i table) {
    const __m128i q = load128(b.qs);
    const __m256i nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(table, nibbles);
  }
  static __m512 scales(const BlockMXFP4* const* rows, int64_t b) {
    alignas(16) uint8_t e[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) e[r] = rows[r][b].e;
    return e8m0_half(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(e))));
  }
  static __m256i table() { return _mm256_broadcastsi128_si256(load128(kMxfp4DoubledValues.data())); }
};

// Re-lays out rows [r0, r0 + 16) (rows past n_rows repeat the last one; their
// lanes are never stored) into dst, block by block.
template <bool kVnni, typename Rows>
void relayout_group(int64_t nb, const uint8_t* w, uint64_t row_bytes, int64_t r0, int64_t n_rows, uint8_t* dst) {
  using Block = typename Rows::Block;
  const Block* rows[kGroupRows];
  group_row_pointers(w, row_bytes, r0, n_rows, rows);
  const __m256i table = Rows::table();
  // 16 row streams at once are more than the hardware prefetcher follows
  // well: ask for each row's block kPrefetchBlocks ahead (decode reads these
  // weights from memory; prefetches do not change any result).
  constexpr int64_t kPrefetchBlocks = 8;
  for (int64_t b = 0; b < nb; ++b) {
    if (b + kPrefetchBlocks < nb) {
#pragma GCC unroll 16
      for (int r = 0; r < kGroupRows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(&rows[r][b + kPrefetchBlocks]), _MM_HINT_T0);
    }
    __m256i codes[kGroupRows];
#pragma GCC unroll 16
    for (int r = 0; r < kGroupRows; ++r) codes[r] = Rows::codes(rows[r][b], table);
    store_group_block<kVnni>(codes, Rows::scales(rows, b), dst + static_cast<size_t>(b) * kGroupBlockBytes<kVnni>);
  }
}

// ---- Block sums of 16 activation blocks at once ----
// Copies of dot_avx512.cpp's load_pair256 / pairs_to_lanes / transpose_sum:
// 16 consecutive blocks' sums in one register (lane 4L+g = block 4g+L).

inline __m512i load_pair256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}

inline __m512i pairs_to_lanes(__m512i b01, __m512i b23) {
  const __m512i even = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i odd = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_add_epi32(even, odd);
}

inline __m512i transpose_sum(__m512i t0, __m512i t1, __m512i t2, __m512i t3) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(t0, t1), _mm512_unpackhi_epi32(t0, t1));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(t2, t3), _mm512_unpackhi_epi32(t2, t3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// vpermd indices taking transpose_sum's lane order back to block order.
alignas(64) constexpr int32_t kBlockOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

// Activations acts[0..n_acts) (Q8_0) in the form the kernel reads.
template <bool kVnni>
void prepare_acts(int64_t nb, const void* const* acts, int n_acts, const PreparedActs& dst) {
  const size_t block_stride = static_cast<size_t>(n_acts) * kActCodeBytes<kVnni>;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int t = 0; t < n_acts; ++t) {
    const auto* x = static_cast<const BlockQ8_0*>(acts[t]);
    uint8_t* codes = dst.codes + static_cast<size_t>(t) * kActCodeBytes<kVnni>;
    auto store_codes = [&](int64_t b, __m256i v) {
      uint8_t* p = codes + static_cast<size_t>(b) * block_stride;
      if constexpr (kVnni) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), even_bytes_to_words(v));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 32), odd_bytes_to_words(v));
      }
    };
    for (int64_t c = 0; c < chunk_count(nb); ++c) {
      const int64_t b0 = c * kChunkBlocks;
      const int count = static_cast<int>(std::min<int64_t>(kChunkBlocks, nb - b0));
      const size_t entry =
          (static_cast<size_t>(c) * static_cast<size_t>(n_acts) + static_cast<size_t>(t)) * kChunkBlocks;
      alignas(32) uint16_t d[kChunkBlocks] = {};
      for (int j = 0; j < count; ++j) std::memcpy(&d[j], &x[b0 + j].d, 2);
      _mm512_storeu_ps(dst.scale + entry, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d))));
      if (count == kChunkBlocks) {
        // Codes copied pair by pair; with VNNI, 128 * the block sums from
        // vpdpbusd(128, x) reduced 16 blocks at once.
        __m512i quads[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          __m512i pair_sums[2];
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const int64_t b = b0 + 4 * g + 2 * h;
            const __m512i v = load_pair256(x[b].qs, x[b + 1].qs);
            store_codes(b, _mm512_castsi512_si256(v));
            store_codes(b + 1, _mm512_extracti64x4_epi64(v, 1));
            if constexpr (kVnni) pair_sums[h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, v);
          }
          if constexpr (kVnni) quads[g] = pairs_to_lanes(pair_sums[0], pair_sums[1]);
        }
        if constexpr (kVnni) {
          const __m512i sums = _mm512_permutexvar_epi32(_mm512_load_si512(kBlockOrder),
                                                        transpose_sum(quads[0], quads[1], quads[2], quads[3]));
          _mm512_storeu_si512(dst.start + entry, _mm512_sub_epi32(_mm512_setzero_si512(), sums));
        }
      } else {
        for (int j = 0; j < count; ++j) {
          const __m256i v = load256(x[b0 + j].qs);
          store_codes(b0 + j, v);
          if constexpr (kVnni) {
            // sum(x) from the byte sums of x + 128 (unsigned, exact).
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, _mm512_castsi512_si256(bias)),
                                                _mm256_setzero_si256());
            const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
            const int32_t sum = _mm_cvtsi128_si32(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))) - 32 * 128;
            dst.start[entry + static_cast<size_t>(j)] = -128 * sum;
          }
        }
      }
    }
  }
}

inline __m512i broadcast_dword(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// 16 rows (one re-laid-out group) x T activations (one prepared pass).
template <bool kVnni, int T>
void int_group_pass(int64_t nb, const uint8_t* wg, const PreparedActs& xs, float* out, int64_t ldo,
                    __mmask16 rows) {
  __m512 acc[T];
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wg + static_cast<size_t>(b) * kGroupBlockBytes<kVnni>;
    const uint8_t* xb = xs.codes + static_cast<size_t>(b) * (T * kActCodeBytes<kVnni>);
    const size_t entry = static_cast<size_t>(b >> 4) * (T * kChunkBlocks) + static_cast<size_t>(b & 15);
    const int32_t* start = xs.start + entry;
    const float* scale = xs.scale + entry;
    __m512i isum[T];
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) isum[t] = kVnni ? _mm512_set1_epi32(start[kChunkBlocks * t]) : _mm512_setzero_si512();
    if constexpr (kVnni) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i wv = _mm512_load_si512(wb + 64 * k);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) isum[t] = _mm512_dpbusd_epi32(isum[t], wv, broadcast_dword(xb + 32 * t + 4 * k));
      }
    } else {
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        const __m512i wv = _mm512_load_si512(wb + 64 * k);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm512_add_epi32(isum[t], _mm512_madd_epi16(wv, broadcast_dword(xb + 64 * t + 4 * k)));
        }
      }
    }
    // As the one-row kernels: float(isum) * (d_w * d_x), then the running sum.
    const __m512 dw = _mm512_load_ps(wb + 64 * kCodeRegs<kVnni>);
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(scale[kChunkBlocks * t]));
      acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), d));
    }
  }
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(out + t * ldo, rows, acc[t]);
}

template <bool kVnni>
void int_groups_pass(int n_acts, int64_t nb, const uint8_t* wg, const PreparedActs& xg, float* out, int64_t ldo,
                     __mmask16 rows) {
  switch (n_acts) {
    case 1: int_group_pass<kVnni, 1>(nb, wg, xg, out, ldo, rows); break;
    case 2: int_group_pass<kVnni, 2>(nb, wg, xg, out, ldo, rows); break;
    case 3: int_group_pass<kVnni, 3>(nb, wg, xg, out, ldo, rows); break;
    case 4: int_group_pass<kVnni, 4>(nb, wg, xg, out, ldo, rows); break;
    case 5: int_group_pass<kVnni, 5>(nb, wg, xg, out, ldo, rows); break;
    case 6: int_group_pass<kVnni, 6>(nb, wg, xg, out, ldo, rows); break;
    case 7: int_group_pass<kVnni, 7>(nb, wg, xg, out, ldo, rows); break;
    case 8: int_group_pass<kVnni, 8>(nb, wg, xg, out, ldo, rows); break;
    case 9: int_group_pass<kVnni, 9>(nb, wg, xg, out, ldo, rows); break;
    case 10: int_group_pass<kVnni, 10>(nb, wg, xg, out, ldo, rows); break;
    case 11: int_group_pass<kVnni, 11>(nb, wg, xg, out, ldo, rows); break;
    default: int_group_pass<kVnni, 12>(nb, wg, xg, out, ldo, rows); break;
  }
}

// Few activations (decode, batched decode): 16 rows at a time straight from
// the weights, the re-lay-out kept in registers instead of a scratch copy
// (same operations as relayout_group + int_group_pass<T>, so the same bits),
// half the memory traffic per block and no store-to-load round trip. T
// activations share each block's transpose.
template <bool kVnni, typename Rows, int T>
void int_group_direct(int64_t nb, const uint8_t* w, uint64_t row_bytes, int64_t r0, int64_t n_rows,
                      const PreparedActs& x, float* out, int64_t ldo, __mmask16 lanes) {
  using Block = typename Rows::Block;
  const Block* rows[kGroupRows];
  group_row_pointers(w, row_bytes, r0, n_rows, rows);
  // The next group's rows: its first blocks are asked for during this
  // group's last ones, so no group starts on 16 cold rows.
  const bool has_next = r0 + kGroupRows < n_rows;
  const Block* next[kGroupRows];
  group_row_pointers(w, row_bytes, r0 + kGroupRows, n_rows, next);
  const __m256i table = Rows::table();
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  // Measured (ds4-bench-matvec q8_0, 2 threads, weights in 2 MiB pages, AMD
  // EPYC): 8 blocks ahead without the next group 37-40 GB/s, with it 45-56;
  // 24 ahead 50-62, 32 ahead 63-65, 48 ahead 54-62.
  // Into L2 (prefetcht1), not L1: on AMD Zen 4 (3 alternating rounds)
  // 23-29 -> 29-32 GB/s.
  constexpr int64_t kPrefetchBlocks = 32;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (b + kPrefetchBlocks < nb) {
#pragma GCC unroll 16
      for (int r = 0; r < kGroupRows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(&rows[r][b + kPrefetchBlocks]), _MM_HINT_T1);
    } else if (has_next && b + kPrefetchBlocks - nb < nb) {
#pragma GCC unroll 16
      for (int r = 0; r < kGroupRows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(&next[r][b + kPrefetchBlocks - nb]), _MM_HINT_T1);
    }
    __m256i codes[kGroupRows];
#pragma GCC unroll 16
    for (int r = 0; r < kGroupRows; ++r) codes[r] = Rows::codes(rows[r][b], table);
    __m512i regs[8];
    transpose_rows(codes, regs);
    // Activation t's codes, start and scale for block b (prepared_layout).
    const uint8_t* xb = x.codes + static_cast<size_t>(b) * (T * kActCodeBytes<kVnni>);
    const size_t entry = static_cast<size_t>(b >> 4) * (T * kChunkBlocks) + static_cast<size_t>(b & 15);
    __m512i isum[T];
    if constexpr (kVnni) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[t] = _mm512_set1_epi32(x.start[entry + kChunkBlocks * t]);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i wv = _mm512_xor_si512(regs[k], bias);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm512_dpbusd_epi32(isum[t], wv, broadcast_dword(xb + kActCodeBytes<kVnni> * t + 4 * k));
        }
      }
    } else {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i wv = even_bytes_to_words(regs[k]);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm512_add_epi32(isum[t],
                                     _mm512_madd_epi16(wv, broadcast_dword(xb + kActCodeBytes<kVnni> * t + 4 * k)));
        }
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i wv = odd_bytes_to_words(regs[k]);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          isum[t] = _mm512_add_epi32(
              isum[t], _mm512_madd_epi16(wv, broadcast_dword(xb + kActCodeBytes<kVnni> * t + 32 + 4 * k)));
        }
      }
    }
    const __m512 dw = Rows::scales(rows, b);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(x.scale[entry + kChunkBlocks * t]));
      acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), d));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(out + t * ldo, lanes, acc[t]);
}

// Activations at most this many go through int_group_direct.
constexpr int kDirectActs = 8;

template <bool kVnni, typename Rows>
void int_group_direct_n(int n_acts, int64_t nb, const uint8_t* w, uint64_t row_bytes, int64_t r0, int64_t n_rows,
                        const PreparedActs& x, float* out, int64_t ldo, __mmask16 lanes) {
  switch (n_acts) {
    case 1: int_group_direct<kVnni, Rows, 1>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    case 2: int_group_direct<kVnni, Rows, 2>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    case 3: int_group_direct<kVnni, Rows, 3>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    case 4: int_group_direct<kVnni, Rows, 4>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    case 5: int_group_direct<kVnni, Rows, 5>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    case 6: int_group_direct<kVnni, Rows, 6>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    case 7: int_group_direct<kVnni, Rows, 7>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
    default: int_group_direct<kVnni, Rows, 8>(nb, w, row_bytes, r0, n_rows, x, out, ldo, lanes); break;
  }
}

// The whole tile: rows in blocks of up to 4 groups (64 rows: the re-laid-out
// copy stays in L2 and its size does not grow with n_rows), each re-laid out
// once and met by every pass of up to 12 activations; each activation is
// prepared once, during the first row block.
template <bool kVnni, typename Rows>
void int_tile(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
              int64_t n_acts, float* out, int64_t ldo) {
  static_assert(kQK8_0 == kQKMxfp4);
  constexpr int64_t kBlockGroups = 4;
  const int64_t nb = n / kQK8_0;
  if (n_rows <= 0 || n_acts <= 0) return;
  const int64_t passes = (n_acts + kMaxActs - 1) / kMaxActs;
  const size_t pass_bytes = prepared_bytes<kVnni>(nb, kMaxActs);
  // With one row block, every pass reuses one small (cache-hot) slot; with
  // more, each pass keeps its own slot for the later blocks.
  const bool keep_passes = n_rows > kBlockGroups * kGroupRows;
  uint8_t* xr = act_scratch.get(static_cast<size_t>(keep_passes ? passes : 1) * pass_bytes);
  auto pass_layout = [&](int64_t p) {
    const int acts_in_pass = static_cast<int>(std::min<int64_t>(kMaxActs, n_acts - p * kMaxActs));
    uint8_t* slot = xr + static_cast<size_t>(keep_passes ? p : 0) * pass_bytes;
    return std::pair{acts_in_pass, prepared_layout<kVnni>(slot, nb, acts_in_pass)};
  };
  if (n_acts <= kDirectActs) {
    const int acts_n = static_cast<int>(n_acts);
    const PreparedActs layout = prepared_layout<kVnni>(act_scratch.get(pass_bytes), nb, acts_n);
    prepare_acts<kVnni>(nb, acts, acts_n, layout);
    for (int64_t r0 = 0; r0 < n_rows; r0 += kGroupRows) {
      const int64_t left = n_rows - r0;
      const auto lanes = static_cast<__mmask16>(left >= kGroupRows ? 0xffffu : (1u << left) - 1);
      int_group_direct_n<kVnni, Rows>(acts_n, nb, w, row_bytes, r0, n_rows, layout, out + r0, ldo, lanes);
    }
    return;
  }
  const size_t group_bytes = static_cast<size_t>(nb) * kGroupBlockBytes<kVnni>;
  uint8_t* wr = weight_scratch.get(static_cast<size_t>(kBlockGroups) * group_bytes);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kBlockGroups * kGroupRows) {
    const int64_t groups = std::min<int64_t>(kBlockGroups, (n_rows - r0 + kGroupRows - 1) / kGroupRows);
    for (int64_t g = 0; g < groups; ++g) {
      relayout_group<kVnni, Rows>(nb, w, row_bytes, r0 + g * kGroupRows, n_rows,
                                  wr + static_cast<size_t>(g) * group_bytes);
    }
    for (int64_t p = 0; p < passes; ++p) {
      const auto [acts_in_pass, layout] = pass_layout(p);
      // Prepared when first needed, so it is still in L1 for the first row block.
      if (r0 == 0) prepare_acts<kVnni>(nb, acts + p * kMaxActs, acts_in_pass, layout);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t left = n_rows - r0 - g * kGroupRows;
        const auto rows = static_cast<__mmask16>(left >= kGroupRows ? 0xffffu : (1u << left) - 1);
        int_groups_pass<kVnni>(acts_in_pass, nb, wr + static_cast<size_t>(g) * group_bytes, layout,
                               out + p * kMaxActs * ldo + r0 + g * kGroupRows, ldo, rows);
      }
    }
  }
}

// ---- Float formats ----
// Weight loaders: copies of dot_avx512.cpp's (same widening, same lane order).

struct F32Weights {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_first(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16Weights {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static __m512 load_first(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct BF16Weights {
  using T = uint16_t;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint16_t* p) { return widen(load256(p)); }
  static __m512 load_first(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

constexpr int kFloatRows = 4;
constexpr int kFloatActs = 6;

// dot_float's accumulator kAcc (0..3) for 4 rows x T activations: the 64-element
// chunks' FMAs at offset 16 * kAcc, then acc0's 16-element remainder or acc1's
// masked tail, in dot_float's order. Results to part[r][t].
template <typename Weights, int T, int kAcc>
inline void float_acc_pass(int64_t n, const typename Weights::T* const* w, const float* const* x,
                           __m512 (&part)[kFloatRows][T]) {
  __m512 acc[kFloatRows][T];
#pragma GCC unroll 4
  for (int r = 0; r < kFloatRows; ++r) {
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  auto step = [&](int64_t i) {
    __m512 wv[kFloatRows];
#pragma GCC unroll 4
    for (int r = 0; r < kFloatRows; ++r) wv[r] = Weights::load(w[r] + i);
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x[t] + i);
#pragma GCC unroll 4
      for (int r = 0; r < kFloatRows; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) step(i + 16 * kAcc);
  if constexpr (kAcc == 0) {
    for (; i + 16 <= n; i += 16) step(i);
  }
  if constexpr (kAcc == 1) {
    i += (n - i) / 16 * 16;  // past acc0's remainder
    if (i < n) {
      const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
      __m512 wv[kFloatRows];
#pragma GCC unroll 4
      for (int r = 0; r < kFloatRows; ++r) wv[r] = Weights::load_first(w[r] + i, m);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + i);
#pragma GCC unroll 4
        for (int r = 0; r < kFloatRows; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kFloatRows; ++r) {
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) part[r][t] = acc[r][t];
  }
}

template <typename Weights, int T>
void float_quad(int64_t n, const typename Weights::T* const* w, const float* const* x, int rows, float* out,
                int64_t ldo) {
  __m512 part[4][kFloatRows][T];
  float_acc_pass<Weights, T, 0>(n, w, x, part[0]);
  float_acc_pass<Weights, T, 1>(n, w, x, part[1]);
  float_acc_pass<Weights, T, 2>(n, w, x, part[2]);
  float_acc_pass<Weights, T, 3>(n, w, x, part[3]);
  for (int r = 0; r < rows; ++r) {
    for (int t = 0; t < T; ++t) {
      // dot_float's final reduction.
      out[t * ldo + r] = _mm512_reduce_add_ps(
          _mm512_add_ps(_mm512_add_ps(part[0][r][t], part[1][r][t]), _mm512_add_ps(part[2][r][t], part[3][r][t])));
    }
  }
}

// `dot` is the level's one-row kernel: a pass of one activation gains nothing
// from a tile (each weight vector meets one activation), and the one-row
// kernel keeps more independent FMA chains in flight.
template <typename Weights>
void float_tile(float (*dot)(int64_t, const typename Weights::T*, const float*), int64_t n, const uint8_t* w,
                uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts, float* out,
                int64_t ldo) {
  using W = typename Weights::T;
  // Activation passes outer: a pass's activations stay in cache while every
  // row (a few hundred KiB at most per call) streams past them.
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
        // Rows past the end repeat the last one; their results are dropped.
        const int64_t row = r0 + std::min(r, rows - 1);
        wr[r] = reinterpret_cast<const W*>(w + static_cast<uint64_t>(row) * row_bytes);
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

template <bool kVnni>
void q8_0_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo) {
  int_tile<kVnni, Q8_0Rows>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q8_0_q8_0<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);
template void q8_0_q8_0<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                              int64_t);

template <bool kVnni>
void mxfp4_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo) {
  int_tile<kVnni, Mxfp4Rows>(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void mxfp4_q8_0<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                                int64_t);
template void mxfp4_q8_0<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*,
                               int64_t);

void f16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
             float* out, int64_t ldo) {
  float_tile<F16Weights>(kDotAvx512.f16_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void bf16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
              float* out, int64_t ldo) {
  float_tile<BF16Weights>(kDotAvx512.bf16_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void f32_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
             float* out, int64_t ldo) {
  float_tile<F32Weights>(kDotAvx512.f32_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

}  // namespace tile_avx512
}  // namespace ds4::quant
