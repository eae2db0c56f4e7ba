#include "quant/dot_ggml_bf16_avx512.h"

#include <immintrin.h>

#include <cstring>

namespace ds4::quant::ggml_avx512bf16 {

namespace {

// ggml_order::reduce_add16's order, kept local: no inline function of a
// shared header may be compiled at this ISA level (check_isa_objects.sh).
float reduce16(__m512 v) {
  float a[16];
  _mm512_storeu_ps(a, v);
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = a[8 + i] + a[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// 32 weights and 32 bf16-rounded activations (exact in bf16, so the
// conversion only narrows them) into one vdpbf16ps: lane l takes elements
// 2l and 2l + 1.
__m512 dp32(__m512 acc, const uint16_t* w, const float* x) {
  __m512bh wb;
  std::memcpy(&wb, w, sizeof wb);
  const __m512bh xb = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
  return _mm512_dpbf16_ps(acc, wb, xb);
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

float tinyblas_dpbf16(int64_t n, const uint16_t* w, const float* x) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 32) acc = dp32(acc, w + c, x + c);
  return reduce16(acc);
}

float vec_dot_dpbf16(int64_t n, const uint16_t* w, const float* x) {
  __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    c0 = dp32(c0, w + i, x + i);
    c1 = dp32(c1, w + i + 32, x + i + 32);
  }
  double sum = 0.0;
  sum += static_cast<double>(reduce16(c0));
  sum += static_cast<double>(reduce16(c1));
  for (; i < n; ++i) sum += static_cast<double>(bf16_to_f32(w[i]) * x[i]);
  return static_cast<float>(sum);
}

}  // namespace ds4::quant::ggml_avx512bf16
