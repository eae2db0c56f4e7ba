// Tile kernel (dot_tile.h) for Q6_K x Q8_K at the plain avx512 level (no
// VNNI), for prefill of Q6_K matrices (llama-quantize's K presets put Q6_K on
// some routed down experts and the output head), 2 to 11 activations; more
// go to avx2's lanes tile. The VNNI levels use the lane-per-row tile of
// dot_tile_kquant_avx512.cpp instead: without vpdpbusd its multiply-adds
// cost three instructions each and this one is faster (ds4-bench-kernels
// tile/q6_K/64x4096x12, Zen 4: 61 against 98 us).
//
// Each weight block is decoded once per call and activation chunk: its 256
// unsigned 6-bit codes in element order (four registers of 64) and, per
// register, the words of its sub-block scales (word j of register m: scale
// 4m + j/8, the sub-block of the element pair vpmaddubsw sums there). Every
// activation then takes four vpmaddubsw (code x activation pairs, at most
// 2 * 63 * 128 in magnitude: no saturation), four vpdpwssd against the scale
// words (vpmaddwd + add without VNNI) and one more for the offset: the code
// is value + 32, so -32 * scale against the activation's 16-sums in the same
// accumulator. One horizontal sum gives the exact integer the one-row kernel
// (dot_avx2.cpp's dot_q6_K_q8_K, which the avx512 levels use) forms; its
// float term (d_w * d_x) * isum is added in block order from 0, so every
// output equals the one-row kernel bit for bit.
#include "core/x86_kernel_prelude.h"

#include <cstdint>

#include "quant/dot.h"
#include "quant/dot_rows_avx512.h"
#include "quant/dot_tile.h"
#include "quant/dot_tile_lanes_avx2.h"
#include "quant/dot_words_avx512.h"
#include "quant/dot_x86_common.h"

namespace ds4::quant::tile_avx512 {
namespace {

constexpr int64_t kActChunk = 64;  // activations whose sums one pass keeps
// Fewest activations for which decoding a block once pays (below: the
// one-row kernel per activation).
constexpr int64_t kMinTile = 2;
// From here avx2's lanes tile (8 rows, int16 pair sums, one vpmaddwd per
// half sub-block) is faster than decoding once with three-instruction
// multiply-adds (Zen 5, 64x4096: 12 activations ~45 us each, 64: 163
// against 230).
constexpr int64_t kMinLanes = 12;

// One weight block, ready for any number of activations.
struct Q6Decoded {
  __m512i codes[4];  // elements 64m .. 64m + 63
  __m512i scale_words[4];
  __m512i offset_words;  // -32 * scale of sub-block s in word s (s < 16), 0 above
  float d;
};

// vpermw indices: word j of register m takes scale word 4m + j / 8.
constexpr auto kScaleIndex = [] {
  struct {
    alignas(64) int16_t v[4][32];
  } p{};
  for (int m = 0; m < 4; ++m)
    for (int j = 0; j < 32; ++j) p.v[m][j] = static_cast<int16_t>(4 * m + j / 8);
  return p;
}();

inline Q6Decoded decode(const BlockQ6_K& b) {
  Q6Decoded out;
  const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(3);
  // Per 256-bit half: shift qh by 0 / 2 (codes of the A register) and 4 / 6 (B).
  const __m512i shift_a = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(0), 0);
  const __m512i shift_a_hi = _mm512_inserti64x4(shift_a, _mm256_set1_epi16(2), 1);
  const __m512i shift_b = _mm512_add_epi16(shift_a_hi, _mm512_set1_epi16(4));
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    // ql bytes 64h .. 64h + 63 hold the low nibbles of elements 128h + l
    // (low half: l < 32, k = 0; high half: k = 1) and, above them, of
    // elements 128h + 64 + l (k = 2, 3); qh bytes 32h .. 32h + 31, two bits
    // for each k.
    const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(load256(b.qh + 32 * h));
    const __m512i hi_a = _mm512_and_si512(_mm512_srlv_epi16(qh, shift_a_hi), low2);
    const __m512i hi_b = _mm512_and_si512(_mm512_srlv_epi16(qh, shift_b), low2);
    out.codes[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_slli_epi16(hi_a, 4));
    out.codes[2 * h + 1] =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), _mm512_slli_epi16(hi_b, 4));
  }
  const __m256i scales = _mm256_cvtepi8_epi16(load128(b.scales));
  const __m512i scales_z = _mm512_zextsi256_si512(scales);
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m)
    out.scale_words[m] = _mm512_permutexvar_epi16(_mm512_load_si512(kScaleIndex.v[m]), scales_z);
  out.offset_words =
      _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_mullo_epi16(scales, _mm256_set1_epi16(-32)), 0);
  out.d = f16_value(b.d);
  return out;
}

inline int32_t block_isum(const Q6Decoded& w, const BlockQ8_K& x) {
  __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512i pairs = _mm512_maddubs_epi16(w.codes[m], _mm512_loadu_si512(x.qs + 64 * m));
    acc = dot_words<false>(acc, pairs, w.scale_words[m]);
  }
  const __m512i bsums = _mm512_inserti64x4(_mm512_setzero_si512(), load256(x.bsums), 0);
  acc = dot_words<false>(acc, bsums, w.offset_words);
  return _mm512_reduce_add_epi32(acc);
}

}  // namespace

void q6_K_q8_K_plain(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                     int64_t n_acts, float* out, int64_t ldo) {
  if (n_acts < kMinTile) {
    // Decode: 16 rows in lanes (dot_rows_avx512.h), bit-identical to the
    // one-row kernel.
    for (int64_t t = 0; t < n_acts; ++t)
      avx512_detail::q6_K_rows<false>(n, w, row_bytes, n_rows, static_cast<const BlockQ8_K*>(acts[t]), out + t * ldo);
    return;
  }
  if (n_acts >= kMinLanes) {
    tile_avx2::q6_K_lanes(n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
    return;
  }
  const int64_t nb = n / kQK_K;
  float sums[kActChunk];
  for (int64_t t0 = 0; t0 < n_acts; t0 += kActChunk) {
    // No std:: templates in a per-ISA file: a weak copy compiled for AVX-512
    // could be the one every caller links (tests/cli/check_isa_objects.sh).
    const int64_t na = n_acts - t0 < kActChunk ? n_acts - t0 : kActChunk;
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* row = reinterpret_cast<const BlockQ6_K*>(w + static_cast<uint64_t>(r) * row_bytes);
      for (int64_t t = 0; t < na; ++t) sums[t] = 0.0f;
      for (int64_t i = 0; i < nb; ++i) {
        const Q6Decoded block = decode(row[i]);
        for (int64_t t = 0; t < na; ++t) {
          const BlockQ8_K& x = static_cast<const BlockQ8_K*>(acts[t0 + t])[i];
          sums[t] += (block.d * x.d) * static_cast<float>(block_isum(block, x));
        }
      }
      for (int64_t t = 0; t < na; ++t) out[(t0 + t) * ldo + r] = sums[t];
    }
  }
}

}  // namespace ds4::quant::tile_avx512
