// The first include of every per-ISA kernel file (*_avx2.cpp, *_avx512.cpp):
// no a*b+c -> FMA contraction for the rest of the file (the kernels must round
// as the scalar references, compiled without FMA, whatever flags a user adds;
// the FMAs a kernel wants are written as intrinsics), then <immintrin.h>.
// The pragmas apply from here to the end of the including file, so include
// this before anything else.
#pragma once

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "core/x86_intrinsics.h"
