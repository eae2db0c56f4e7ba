// Tile kernel (dot_tile.h) for Q6_K x Q8_K at the avx2 level, for prefill of
// Q6_K matrices (llama-quantize's K presets put Q6_K on some routed down
// experts and the output head). Decode's few activations go one by one to
// the 8-row decode kernel (dot_rows_avx2.h).
//
// Each weight block is decoded once per row and activation chunk: its 256
// unsigned 6-bit codes in eight registers of 32 (register m = 4h + k holds
// elements 128h + 32k .. + 31, as the one-row kernel forms them), the int16
// scale words of each register (low half: sub-block 2m, high half: 2m + 1)
// and -32 times the sixteen scales for the offset (the code is value + 32:
// -32 * scale against the activation's 16-sums). Every activation then takes
// eight vpmaddubsw (at most 2 * 63 * 128 in magnitude: no saturation) and
// nine vpmaddwd; the lane totals of eight activations come from one
// hsum8_i32. That is the exact integer the one-row kernel (dot_avx2.cpp's
// dot_q6_K_q8_K) forms; its float term (d_w * d_x) * isum is added in block
// order from 0, so every output equals the one-row kernel bit for bit.
#include "core/x86_kernel_prelude.h"

#include <cstdint>

#include "quant/dot.h"
#include "quant/dot_rows_avx2.h"
#include "quant/dot_tile.h"
#include "quant/dot_x86_common.h"

namespace ds4::quant::tile_avx2 {
namespace {

constexpr int64_t kActChunk = 64;  // activations whose sums one pass keeps
// Fewest activations for which decoding a block once pays (below: the
// one-row kernel per activation).
constexpr int64_t kMinTile = 4;

struct Q6Decoded {
  __m256i codes[8];
  __m256i scale_words[8];
  __m256i offset_words;
  float d;
};

// vpshufb patterns over the 16 scale bytes (in both halves): register m's
// scale byte (2m low half, 2m + 1 high half) into the high byte of each
// word, which an arithmetic shift by 8 then sign-extends.
constexpr auto kScaleSpread = [] {
  struct {
    alignas(32) int8_t v[8][32];
  } p{};
  for (int m = 0; m < 8; ++m)
    for (int j = 0; j < 32; ++j) p.v[m][j] = static_cast<int8_t>(j % 2 == 0 ? -1 : 2 * m + j / 16);
  return p;
}();

inline void decode(const BlockQ6_K& b, Q6Decoded& out) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(b.ql + 64 * h), ql1 = load256(b.ql + 64 * h + 32);
    const __m256i qh = load256(b.qh + 32 * h);
    // Elements 128h + 32k + l: the low nibble from ql0 / ql1, the top bits
    // from qh at 2k.
    out.codes[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4));
    out.codes[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4));
    out.codes[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4));
    out.codes[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4));
  }
  const __m256i scales = _mm256_broadcastsi128_si256(load128(b.scales));
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m)
    out.scale_words[m] = _mm256_srai_epi16(_mm256_shuffle_epi8(scales, load256(kScaleSpread.v[m])), 8);
  out.offset_words = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(load128(b.scales)), _mm256_set1_epi16(-32));
  out.d = f16_value(b.d);
}

// The block's integer dot product with x over 8 lanes.
inline __m256i block_acc(const Q6Decoded& w, const BlockQ8_K& x) {
  __m256i acc = _mm256_madd_epi16(w.offset_words, load256(x.bsums));
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    const __m256i pairs = _mm256_maddubs_epi16(w.codes[m], load256(x.qs + 32 * m));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, w.scale_words[m]));
  }
  return acc;
}

inline const BlockQ8_K& act_block(const void* const* acts, int64_t t, int64_t i) {
  return static_cast<const BlockQ8_K*>(acts[t])[i];
}

void tile(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
          float* out, int64_t ldo) {
  const int64_t nb = n / kQK_K;
  float sums[kActChunk];
  Q6Decoded block;
  for (int64_t t0 = 0; t0 < n_acts; t0 += kActChunk) {
    const int64_t na = n_acts - t0 < kActChunk ? n_acts - t0 : kActChunk;
    const void* const* chunk = acts + t0;
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* row = reinterpret_cast<const BlockQ6_K*>(w + static_cast<uint64_t>(r) * row_bytes);
      for (int64_t t = 0; t < na; ++t) sums[t] = 0.0f;
      for (int64_t i = 0; i < nb; ++i) {
        decode(row[i], block);
        int64_t t = 0;
        for (; t + 8 <= na; t += 8) {
          __m256i accs[8];
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) accs[k] = block_acc(block, act_block(chunk, t + k, i));
          alignas(32) int32_t isum[8];
          _mm256_store_si256(reinterpret_cast<__m256i*>(isum), hsum8_i32(accs));
          for (int k = 0; k < 8; ++k)
            sums[t + k] += (block.d * act_block(chunk, t + k, i).d) * static_cast<float>(isum[k]);
        }
        for (; t < na; ++t) {
          const BlockQ8_K& x = act_block(chunk, t, i);
          sums[t] += (block.d * x.d) * static_cast<float>(hsum_i32(block_acc(block, x)));
        }
      }
      for (int64_t t = 0; t < na; ++t) out[(t0 + t) * ldo + r] = sums[t];
    }
  }
}

}  // namespace

void q6_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts >= kMinTile) {
    tile(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
    return;
  }
  // Decode: 8 rows in lanes (dot_rows_avx2.h), bit-identical to the one-row kernel.
  for (int64_t t = 0; t < n_acts; ++t)
    avx2_detail::q6_K_rows(n, w, row_bytes, n_rows, static_cast<const BlockQ8_K*>(acts[t]), out + t * ldo);
}

}  // namespace ds4::quant::tile_avx2
