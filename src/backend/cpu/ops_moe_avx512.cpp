// AVX-512 SwiGLU of Default numerics (swiglu_clamp): 16 elements at a time,
// bit-identical to the scalar loop over ops_activation.h's silu, whose cost is
// almost all in expf (one per element; ~8 % of a 512-token prefill).
//
// The exponential is glibc's expf (the optimized-routines algorithm glibc has
// used since 2.27) evaluated in 8 double lanes with the operations of its FMA
// build, __expf_fma: x * 32/ln2 rounded to an integer k by the 1.5 * 2^52
// shift (one FMA), r = x * 32/ln2 - k (one FMA), 2^(k/32) from a 32-entry table
// with k/32 added to the exponent, and a cubic in r evaluated with three FMAs;
// then one rounding to float. Each step is the same IEEE operation as glibc's,
// so each result is the same float. Arguments glibc treats apart (|x| >= 88,
// infinities, NaN) go to std::exp itself, lane by lane.
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

// expf of 8 floats widened to double (|x| < 88, so no special case).
inline __m512d exp_lanes(__m512d xd) {
  const __m512d inv_ln2n = _mm512_set1_pd(kInvLn2N);
  const __m512d shift = _mm512_set1_pd(kShift);
  const __m512d z = _mm512_fmadd_pd(inv_ln2n, xd, shift);
  const __m512i ki = _mm512_castpd_si512(z);
  const __m512d kd = _mm512_sub_pd(z, shift);
  const __m512d r = _mm512_fmsub_pd(inv_ln2n, xd, kd);
  // tab[k % 32] + (k << 47): the low 5 bits pick the entry (bit 4: which pair
  // of table registers), the rest lands in the exponent.
  const __m512i t0 = _mm512_load_si512(kExp2Table), t1 = _mm512_load_si512(kExp2Table + 8);
  const __m512i t2 = _mm512_load_si512(kExp2Table + 16), t3 = _mm512_load_si512(kExp2Table + 24);
  const __m512i low = _mm512_permutex2var_epi64(t0, ki, t1);
  const __m512i high = _mm512_permutex2var_epi64(t2, ki, t3);
  const __m512i tab = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), low, high);
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(tab, _mm512_slli_epi64(ki, 47)));
  const __m512d zc = _mm512_fmadd_pd(r, _mm512_set1_pd(kC0), _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(zc, r2, y);
  return _mm512_mul_pd(y, s);
}

// expf of 16 floats, each as std::exp gives it.
inline __m512 exp16(__m512 x) {
  const __m256 lo = _mm512_cvtpd_ps(exp_lanes(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
  const __m256 hi = _mm512_cvtpd_ps(
      exp_lanes(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
  __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  // glibc's special cases: |x| >= 88 (top 12 bits of the magnitude above
  // 0x42a), infinities and NaN.
  const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
  const __mmask16 special = _mm512_cmpgt_epu32_mask(top, _mm512_set1_epi32(kSpecialTop));
  if (special != 0) {
    alignas(64) float xs[16], es[16];
    _mm512_store_ps(xs, x);
    _mm512_store_ps(es, e);
    for (int i = 0; i < 16; ++i)
      if ((special >> i) & 1) es[i] = std::exp(xs[i]);
    e = _mm512_load_ps(es);
  }
  return e;
}

// silu of ops_activation.h (Default): x * sigmoid_two_branch(x), whose
// exponent is -|x|: x >= 0 gives 1 / (1 + exp(-x)), else exp(x) / (1 + exp(x)).
inline __m512 silu16(__m512 x) {
  const __mmask16 nonneg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  const __m512 neg_x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  const __m512 e = exp16(_mm512_mask_blend_ps(nonneg, x, neg_x));
  const __m512 num = _mm512_mask_blend_ps(nonneg, e, _mm512_set1_ps(1.0f));
  return _mm512_mul_ps(x, _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
}

}  // namespace

void swiglu_clamp_default_avx512(const float* gate, const float* up, size_t n, float limit, float weight, float* out) {
  const bool clamp = limit > 1.0e-6f;
  const __m512 hi = _mm512_set1_ps(limit), lo = _mm512_set1_ps(-limit), w = _mm512_set1_ps(weight);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    if (clamp) {
      // std::min(g, limit) = limit < g ? limit : g; std::clamp(u, -limit,
      // limit): below -limit -> -limit, then above limit -> limit (a NaN
      // stays NaN in both, as with the scalar comparisons).
      g = _mm512_min_ps(hi, g);
      u = _mm512_min_ps(hi, _mm512_max_ps(lo, u));
    }
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(silu16(g), u), w));
  }
}

}  // namespace ds4::cpu
