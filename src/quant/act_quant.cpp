// Activation quantizers: Q8_0 (per 32, three rounding variants), Q8_1 (per
// 32, Q8_0's codes plus the scaled code sum) and Q8_K (per 256), see quant.h
// for how the variants differ.
#include <climits>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace ds4::quant {
namespace {

float block_amax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK8_0; ++j) {
    const float ax = std::fabs(x[j]);
    amax = amax > ax ? amax : ax;
  }
  return amax;
}

// Codes nearest-even of x*id, saturated to int8. NaN gives -128 like both
// lrintf+clamp and the x86 convert+saturating-pack sequence.
void round_even_codes(const float* x, float id, int8_t* q) {
  for (int j = 0; j < kQK8_0; ++j) {
    const float r = std::nearbyint(x[j] * id);  // default rounding mode: ties to even
    q[j] = r >= 127.0f ? int8_t{127} : r >= -128.0f ? static_cast<int8_t>(r) : int8_t{-128};
  }
}

}  // namespace

void quantize_row_q8_0_act_scalar_block(const float* xb, BlockQ8_0* y) {
  const float d = block_amax(xb) / 127.0f;
  const float id = d ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  round_even_codes(xb, id, y->qs);
}

void quantize_row_q8_0_act_scalar(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) quantize_row_q8_0_act_scalar_block(x + i * kQK8_0, y + i);
}

void quantize_row_q8_0_act(const float* x, BlockQ8_0* y, int64_t n) {
  // The AVX-512 or AVX2 copy wherever the dot kernels run at that level (same
  // bits; prefill quantizes every token's row for each Q8_0 weight).
  using Quantize = void (*)(const float*, BlockQ8_0*, int64_t);
  static const Quantize quantize = []() -> Quantize {
    const char* isa = dot_kernels().isa;
    if (std::strncmp(isa, "avx512", 6) == 0) return &quantize_row_q8_0_act_avx512;
    if (std::strcmp(isa, "avx2") == 0) return &quantize_row_q8_0_act_avx2;
    return &quantize_row_q8_0_act_scalar;
  }();
  quantize(x, y, n);
}

void quantize_row_q8_0_act_ggml(const float* x, BlockQ8_0* y, int64_t n) { quantize_row_q8_0(x, y, n); }

void quantize_row_q8_0_act_ggml_x86(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    const float amax = block_amax(xb);
    y[i].d = f32_to_f16(amax / 127.0f);
    // The AVX path multiplies by 127/amax rather than by 1/(amax/127).
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    round_even_codes(xb, id, y[i].qs);
  }
}

void quantize_row_q8_1_act(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const float* xb = x + i * kQK8_1;
    const float d = block_amax(xb) / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    round_even_codes(xb, id, y[i].qs);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) sum += y[i].qs[j];
    y[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_1_act_ggml_x86(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const float* xb = x + i * kQK8_1;
    const float amax = block_amax(xb);
    const float d = amax / 127.0f;
    y[i].d = f32_to_f16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    round_even_codes(xb, id, y[i].qs);
    // ggml sums the int32 conversions (NaN and out-of-range give INT_MIN),
    // wrapping, before the saturating packs that make the stored codes.
    uint32_t sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      const float r = std::nearbyint(xb[j] * id);
      sum += static_cast<uint32_t>(r >= -2147483648.0f && r < 2147483648.0f ? static_cast<int32_t>(r) : INT_MIN);
    }
    y[i].s = f32_to_f16(d * static_cast<float>(static_cast<int32_t>(sum)));
  }
}

void quantize_row_q8_K_scalar_block(const float* xb, BlockQ8_K* y) {
  // The signed element of largest magnitude, first one on ties; scaling by
  // -127/max maps it to exactly -127 (IQ2_XXS SIMD kernels rely on codes
  // never being -128).
  float max = 0;
  float amax = 0;
  for (int j = 0; j < kQK_K; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (!amax) {
    y->d = 0;
    std::memset(y->qs, 0, sizeof(y->qs));
    std::memset(y->bsums, 0, sizeof(y->bsums));
    return;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < kQK_K; ++j) {
    const int v = nearest_int(iscale * xb[j]);
    y->qs[j] = static_cast<int8_t>(v > 127 ? 127 : v < -128 ? -128 : v);
  }
  for (int g = 0; g < kQK_K / 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += y->qs[16 * g + j];
    y->bsums[g] = static_cast<int16_t>(sum);
  }
  y->d = 1 / iscale;
}

void quantize_row_q8_K_scalar(const float* x, BlockQ8_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) quantize_row_q8_K_scalar_block(x + i * kQK_K, y + i);
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  // As quantize_row_q8_0_act: the SIMD copy of the dot kernels' level (same
  // bits; prefill quantizes every token's row for each K-quant or IQ matrix).
  using Quantize = void (*)(const float*, BlockQ8_K*, int64_t);
  static const Quantize quantize = []() -> Quantize {
    const char* isa = dot_kernels().isa;
    if (std::strncmp(isa, "avx512", 6) == 0) return &quantize_row_q8_K_avx512;
    if (std::strcmp(isa, "avx2") == 0) return &quantize_row_q8_K_avx2;
    return &quantize_row_q8_K_scalar;
  }();
  quantize(x, y, n);
}

void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * x[i].qs[j];
  }
}

}  // namespace ds4::quant
