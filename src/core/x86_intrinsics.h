// <immintrin.h> for the per-ISA kernel files (*_avx2.cpp, *_avx512.cpp).
// GCC 12 reports its own _mm512_undefined_* placeholders inside these headers
// as uninitialized (GCC bug 105593); the warnings are silenced for the header
// only, so -Werror still covers the kernels themselves.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
