// Internal to the AVX-512 kernel files (dot_avx512.cpp and the tiles through
// dot_tile_avx512.h): the int16-pair multiply-add both avx512 levels use.
// Include after core/x86_kernel_prelude.h; it is in an anonymous namespace, so
// each file gets its own copy built with its own flags (as dot_x86_common.h).
#pragma once

#include "core/x86_intrinsics.h"

namespace ds4::quant {
namespace {

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
