// Internal to the AVX-512 kernel files (dot_avx512.cpp and the tiles through
// dot_tile_avx512.h): the int16-pair multiply-add both avx512 levels use.
// Include after core/x86_kernel_prelude.h; it is in an anonymous namespace, so
// each file gets its own copy built with its own flags (as dot_x86_common.h).
#pragma once

#include <array>
#include <cstdint>

#include "core/x86_intrinsics.h"

namespace ds4::quant {
namespace {

// permutexvar_epi16 indices spreading per-group words over the multiply-add
// pairs of 64-element chunks: the four registers cover chunks 0..3, a group's
// `per` pair words (16: 32 elements, 8: 16 elements) each taking word
// stride * group + offset of the source register.
using WordSpread = std::array<std::array<int16_t, 32>, 4>;
constexpr WordSpread word_spread(int per, int stride, int offset) {
  WordSpread a{};
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 32; ++i) {
      const int group = c * (32 / per) + i / per;
      a[static_cast<size_t>(c)][static_cast<size_t>(i)] = static_cast<int16_t>(stride * group + offset);
    }
  }
  return a;
}

// acc + sum of the two int16 products per int32 lane (plain avx512: vpmaddwd
// and an add, the same integers).
template <bool kVnni>
inline __m512i dot_words(__m512i acc, __m512i a, __m512i b) {
  if constexpr (kVnni) {
    return _mm512_dpwssd_epi32(acc, a, b);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
  }
}

}  // namespace
}  // namespace ds4::quant
