// The data of glibc's expf (the optimized-routines algorithm glibc has used
// since 2.27, its FMA build __expf_fma), for the SIMD SwiGLU copies
// (ops_moe_avx2.cpp, ops_moe_avx512.cpp) that reproduce it bit for bit:
// __exp2f_data's table tab[i] = bits(2^(i/32)) - (i << 47), the scaled
// constants of its cubic (poly / 32^3, / 32^2, / 32) and of x * 32/ln2, and the
// 1.5 * 2^52 shift that rounds to an integer.
#pragma once

#include <cstdint>

namespace ds4::cpu::glibc_expf {

alignas(64) inline constexpr uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
inline constexpr double kInvLn2N = 0x1.71547652b82fep+5;
inline constexpr double kShift = 0x1.8p+52;
inline constexpr double kC0 = 0x1.c6af84b912394p-20;
inline constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
inline constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
// Arguments whose top 12 bits of magnitude exceed this (|x| >= 88, inf, NaN)
// glibc treats apart.
inline constexpr uint32_t kSpecialTop = 0x42a;

}  // namespace ds4::cpu::glibc_expf
