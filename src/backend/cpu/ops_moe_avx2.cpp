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

#include "backend/cpu/expf_glibc_data.h"
#include "backend/cpu/ops_moe.h"

namespace ds4::cpu {
namespace {

using namespace glibc_expf;

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
  const int special = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(kSpecialTop))));
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
