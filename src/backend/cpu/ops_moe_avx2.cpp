// AVX2 SwiGLU of Default numerics (swiglu_clamp): 8 elements at a time,
// bit-identical to the scalar loop over ops_activation.h's silu, as the AVX-512
// copy (ops_moe_avx512.cpp, which describes the method): glibc's expf
// evaluated in double lanes with the operations of its FMA build, then one
// rounding to float; arguments glibc treats apart (|x| >= 88, infinities, NaN)
// go to std::exp itself. The 32-entry table is read with scalar loads, not a
// gather (microcoded and slow on AMD Zen 1 and 2).
#include "core/x86_kernel_prelude.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/ops_moe.h"

namespace ds4::cpu {
namespace {

// glibc's __exp2f_data: tab[i] = bits(2^(i/32)) - (i << 47), and the scaled
// constants of the cubic and of x * 32/ln2 (as ops_moe_avx512.cpp).
alignas(64) constexpr uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
constexpr double kInvLn2N = 0x1.71547652b82fep+5;
constexpr double kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-20;
constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
constexpr double kC2 = 0x1.62e42ff0c52d6p-6;

// expf of 4 floats widened to double (|x| < 88, so no special case).
inline __m256d exp_lanes(__m256d xd) {
  const __m256d inv_ln2n = _mm256_set1_pd(kInvLn2N);
  const __m256d shift = _mm256_set1_pd(kShift);
  const __m256d z = _mm256_fmadd_pd(inv_ln2n, xd, shift);
  const __m256i ki = _mm256_castpd_si256(z);
  const __m256d kd = _mm256_sub_pd(z, shift);
  const __m256d r = _mm256_fmsub_pd(inv_ln2n, xd, kd);
  alignas(32) uint64_t k[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(k), ki);
  const __m256i tab = _mm256_set_epi64x(
      static_cast<int64_t>(kExp2Table[k[3] & 31]), static_cast<int64_t>(kExp2Table[k[2] & 31]),
      static_cast<int64_t>(kExp2Table[k[1] & 31]), static_cast<int64_t>(kExp2Table[k[0] & 31]));
  const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(tab, _mm256_slli_epi64(ki, 47)));
  const __m256d zc = _mm256_fmadd_pd(r, _mm256_set1_pd(kC0), _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(zc, r2, y);
  return _mm256_mul_pd(y, s);
}

// expf of 8 floats, each as std::exp gives it.
inline __m256 exp8(__m256 x) {
  const __m128 lo = _mm256_cvtpd_ps(exp_lanes(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m128 hi = _mm256_cvtpd_ps(exp_lanes(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  __m256 e = _mm256_set_m128(hi, lo);
  // glibc's special cases: |x| >= 88 (top 12 bits of the magnitude above
  // 0x42a), infinities and NaN.
  const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  const int special = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))));
  if (special != 0) {
    alignas(32) float xs[8], es[8];
    _mm256_store_ps(xs, x);
    _mm256_store_ps(es, e);
    for (int i = 0; i < 8; ++i)
      if ((special >> i) & 1) es[i] = std::exp(xs[i]);
    e = _mm256_load_ps(es);
  }
  return e;
}

// silu of ops_activation.h (Default): x * sigmoid_two_branch(x), whose
// exponent is -|x|: x >= 0 gives 1 / (1 + exp(-x)), else exp(x) / (1 + exp(x)).
inline __m256 silu8(__m256 x) {
  const __m256 nonneg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 neg_x = _mm256_xor_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 e = exp8(_mm256_blendv_ps(x, neg_x, nonneg));
  const __m256 num = _mm256_blendv_ps(e, _mm256_set1_ps(1.0f), nonneg);
  return _mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
}

}  // namespace

void swiglu_clamp_default_avx2(const float* gate, const float* up, size_t n, float limit, float weight, float* out) {
  const bool clamp = limit > 1.0e-6f;
  const __m256 hi = _mm256_set1_ps(limit), lo = _mm256_set1_ps(-limit), w = _mm256_set1_ps(weight);
  for (size_t i = 0; i < n; i += 8) {
    const size_t count = n - i >= 8 ? 8 : n - i;
    alignas(32) float g_in[8] = {}, u_in[8] = {};
    __m256 g, u;
    if (count == 8) {
      g = _mm256_loadu_ps(gate + i);
      u = _mm256_loadu_ps(up + i);
    } else {
      std::memcpy(g_in, gate + i, count * sizeof(float));
      std::memcpy(u_in, up + i, count * sizeof(float));
      g = _mm256_load_ps(g_in);
      u = _mm256_load_ps(u_in);
    }
    if (clamp) {
      // std::min(g, limit) = limit < g ? limit : g; std::clamp(u, -limit,
      // limit): below -limit -> -limit, then above limit -> limit (a NaN
      // stays NaN in both, as with the scalar comparisons).
      g = _mm256_min_ps(hi, g);
      u = _mm256_min_ps(hi, _mm256_max_ps(lo, u));
    }
    const __m256 r = _mm256_mul_ps(_mm256_mul_ps(silu8(g), u), w);
    if (count == 8) {
      _mm256_storeu_ps(out + i, r);
    } else {
      alignas(32) float o[8];
      _mm256_store_ps(o, r);
      std::memcpy(out + i, o, count * sizeof(float));
    }
  }
}

}  // namespace ds4::cpu
