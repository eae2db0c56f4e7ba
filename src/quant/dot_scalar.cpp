// Scalar reference dot kernels. Each forms the same integer partial sums as
// ggml's generic C kernel (ggml-cpu/quants.c) and combines them in the same
// float order, so on baseline x86-64 (no FMA contraction) the results equal
// ggml's generic path bit for bit — except Q4_K, which takes one float term
// per block (ggml's SIMD kernels' order) instead of the generic kernel's
// eight position lanes, so its SIMD and tile kernels can use byte products.
// SIMD levels are tested against these.

#include <cstring>

#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_block_sum.h"
#include "quant/iq3_tables.h"
#include "quant/iq4_values.h"
#include "quant/iq_block_sums.h"
#include "quant/k_scales.h"
#include "quant/mxfp4.h"
#include "quant/quant.h"

namespace ds4::quant {

float dot_q8_0_q8_0_scalar(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQK8_0;
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK8_0; ++j) isum += w[i].qs[j] * x[i].qs[j];
    sum += static_cast<float>(isum) * (f16_to_f32(w[i].d) * f16_to_f32(x[i].d));
  }
  return sum;
}

float dot_mxfp4_q8_0_scalar(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) {
  static_assert(kQKMxfp4 == kQK8_0);
  const int64_t nb = n / kQKMxfp4;
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    // Doubled E2M1 integers times half the E8M0 scale.
    const float d = f16_to_f32(x[i].d) * e8m0_to_fp32_half(w[i].e);
    int sum_lo = 0;
    int sum_hi = 0;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      sum_lo += x[i].qs[j] * kMxfp4DoubledValues[w[i].qs[j] & 0xF];
      sum_hi += x[i].qs[j + kQKMxfp4 / 2] * kMxfp4DoubledValues[w[i].qs[j] >> 4];
    }
    sum += d * static_cast<float>(sum_lo + sum_hi);
  }
  return sum;
}

float dot_q2_K_q8_K_scalar(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
  const int64_t nb = n / kQK_K;
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* sc = w[i].scales;
    // Min term through the activation's group sums: sum_g bsum_g * min_g.
    int min_sum = 0;
    for (int g = 0; g < 16; ++g) min_sum += x[i].bsums[g] * (sc[g] >> 4);
    const float dall = x[i].d * f16_to_f32(w[i].d);
    const float dmin = x[i].d * f16_to_f32(w[i].dmin);

    const uint8_t* q2 = w[i].qs;
    const int8_t* q8 = x[i].qs;
    int isum = 0;
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          int group = 0;
          for (int l = 0; l < 16; ++l) group += q8[16 * part + l] * ((q2[16 * part + l] >> shift) & 3);
          isum += (sc[is++] & 0xF) * group;
        }
        q8 += 32;
      }
      q2 += 32;
    }
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(min_sum);
  }
  return sum;
}

float dot_q4_K_q8_K_scalar(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  const int64_t nb = n / kQK_K;
  // One integer sum per block (scale times each 32-element sub-block's code
  // sum) and one float term per block, as Q2_K: the order ggml's SIMD Q4_K
  // kernels use, not its generic C kernel's eight position lanes.
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int isum = 0;
    int min_sum = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const ScaleMin6 sm = unpack_q4_K_scale_min(sub, w[i].scales);
      min_sum += (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]) * sm.min;
      const uint8_t* q4 = w[i].qs + 32 * (sub / 2);
      const int shift = 4 * (sub % 2);
      int group = 0;
      for (int e = 0; e < 32; ++e) group += x[i].qs[32 * sub + e] * ((q4[e] >> shift) & 0xF);
      isum += sm.scale * group;
    }
    const float dall = x[i].d * f16_to_f32(w[i].d);
    const float dmin = x[i].d * f16_to_f32(w[i].dmin);
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(min_sum);
  }
  return sum;
}

float dot_iq2_xxs_q8_K_scalar(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(iq2_xxs_block_isum(w[i], x[i].qs));
  return 0.125f * sum;
}

// The exact integer dot of one IQ2_XS block with 256 Q8_K codes: per
// 16-value half of each sub-block of 32, sum(grid * sign * q8) times
// 2 * scale + 1.
namespace {
int32_t iq2_xs_block_isum(const BlockIQ2_XS& w, const int8_t* q8) {
  int32_t block_sum = 0;
  for (int h = 0; h < kQK_K / 16; ++h) {
    const int32_t ls = 2 * ((w.scales[h / 2] >> (4 * (h % 2))) & 0xf) + 1;
    int32_t half_sum = 0;
    for (int g = 0; g < 2; ++g) {
      const uint16_t word = w.qs[2 * h + g];
      const uint8_t signs = kIq2xsSigns[word >> 9];
      for (int j = 0; j < 8; ++j) {
        const int v = iq2xs_grid_byte(word & 511, j) * q8[j];
        half_sum += (signs & kIq2xsSignMask[j]) ? -v : v;
      }
      q8 += 8;
    }
    block_sum += half_sum * ls;
  }
  return block_sum;
}
}  // namespace

float dot_iq2_xs_q8_K_scalar(int64_t n, const BlockIQ2_XS* w, const BlockQ8_K* x) {
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(iq2_xs_block_isum(w[i], x[i].qs));
  return 0.125f * sum;
}

float dot_iq1_m_q8_K_scalar(int64_t n, const BlockIQ1_M* w, const BlockQ8_K* x) {
  float sumf = 0;
  Iq1MUnpacked u;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    iq1_m_unpack(w[i], u);
    const int8_t* q8 = x[i].qs;
    int32_t sumi1 = 0, sumi2 = 0;
    for (int h = 0; h < kQK_K / 16; ++h) {
      int32_t grid_sum = 0, shift_sum = 0;
      for (int g = 2 * h; g < 2 * h + 2; ++g) {
        int32_t lsum1 = 0, lsum2 = 0;
        for (int j = 0; j < 8; ++j) {
          lsum1 += q8[8 * g + j] * iq1_grid_value(u.index[g], j);
          lsum2 += q8[8 * g + j];
        }
        grid_sum += lsum1;
        shift_sum += u.shift_negative[g] ? -lsum2 : lsum2;
      }
      sumi1 += grid_sum * u.multiplier[h];
      sumi2 += shift_sum * u.multiplier[h];
    }
    sumf += u.d * x[i].d * (static_cast<float>(sumi1) + kIq1Delta * static_cast<float>(sumi2));
  }
  return sumf;
}

float dot_iq1_s_q8_K_scalar(int64_t n, const BlockIQ1_S* w, const BlockQ8_K* x) {
  float sumf = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int8_t* q8 = x[i].qs;
    int32_t sumi = 0, sumi1 = 0;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const uint16_t h = w[i].qh[ib];
      const int32_t ls = 2 * ((h >> 12) & 7) + 1;
      const int32_t delta = (h & 0x8000) ? -1 : 1;
      int32_t lsum = 0;
      for (int g = 0; g < 4; ++g) {
        const int index = w[i].qs[4 * ib + g] | (((h >> (3 * g)) & 7) << 8);
        for (int j = 0; j < 8; ++j) lsum += q8[32 * ib + 8 * g + j] * iq1_grid_value(index, j);
      }
      sumi += ls * lsum;
      sumi1 += ls * delta * (x[i].bsums[2 * ib] + x[i].bsums[2 * ib + 1]);
    }
    sumf += f16_to_f32(w[i].d) * x[i].d * (static_cast<float>(sumi) + kIq1Delta * static_cast<float>(sumi1));
  }
  return sumf;
}

// Plain-type dots, one product per element added in index order. f16 and
// bf16 accumulate in f32; f32 accumulates in double (ds4's F32 matmul).
float dot_f16_f32_scalar(int64_t n, const uint16_t* w, const float* x) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += f16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_bf16_f32_scalar(int64_t n, const uint16_t* w, const float* x) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_f32_f32_scalar(int64_t n, const float* w, const float* x) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(sum);
}

float dot_q6_K_q8_K_scalar(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    q6_K_values(w[i], q);
    int isum = 0;
    for (int sub = 0; sub < kQK_K / 16; ++sub) {
      int group = 0;
      for (int e = 16 * sub; e < 16 * sub + 16; ++e) group += q[e] * x[i].qs[e];
      isum += w[i].scales[sub] * group;
    }
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// IQ3_XXS / IQ3_S: per block, the sum over sub-blocks of (2 ls + 1) x
// sum(grid * sign * q8) as one integer, one float term per block (ggml's
// generic kernels; IQ3_XXS's common factor 1/4 applied at the end).
float dot_iq3_xxs_q8_K_scalar(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(iq3_xxs_block_isum(w[i], x[i].qs));
  return 0.25f * sum;
}

float dot_iq3_s_q8_K_scalar(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x) {
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(iq3_s_block_isum(w[i], x[i].qs));
  return sum;
}

float dot_q3_K_q8_K_scalar(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t sc[kQK_K / 16];
    int8_t q[kQK_K];
    q3_K_scales(w[i], sc);
    q3_K_values(w[i], q);
    int isum = 0;
    for (int sub = 0; sub < kQK_K / 16; ++sub) {
      int group = 0;
      for (int e = 16 * sub; e < 16 * sub + 16; ++e) group += q[e] * x[i].qs[e];
      isum += sc[sub] * group;
    }
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q5_K_q8_K_scalar(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t q[kQK_K];
    q5_K_codes(w[i], q);
    int isum = 0;
    int min_sum = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const ScaleMin6 sm = unpack_q4_K_scale_min(sub, w[i].scales);
      min_sum += (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]) * sm.min;
      int group = 0;
      for (int e = 32 * sub; e < 32 * sub + 32; ++e) group += q[e] * x[i].qs[e];
      isum += sm.scale * group;
    }
    const float dall = x[i].d * f16_to_f32(w[i].d);
    const float dmin = x[i].d * f16_to_f32(w[i].dmin);
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(min_sum);
  }
  return sum;
}

float dot_iq4_nl_q8_0_scalar(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(x[i].d) * f16_to_f32(w[i].d);
    int isum = 0;
    for (int j = 0; j < kQK8_0 / 2; ++j) {
      isum += x[i].qs[j] * kIq4nlValues[w[i].qs[j] & 0xf] + x[i].qs[j + kQK8_0 / 2] * kIq4nlValues[w[i].qs[j] >> 4];
    }
    sum += d * static_cast<float>(isum);
  }
  return sum;
}

float dot_iq4_xs_q8_K_scalar(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(iq4_xs_block_isum(w[i], x[i].qs));
  return sum;
}

namespace {

// Sum over the block of code * activation, codes from qs (low nibbles:
// elements 0..15, high: 16..31) and bit 4 from qh when given, minus offset.
int legacy_block_sum(const uint8_t* qs, const uint8_t* qh, int offset, const int8_t* xq) {
  uint32_t bits = 0;
  if (qh) std::memcpy(&bits, qh, sizeof bits);
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((bits >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((bits >> (j + 16)) & 1) << 4);
    sum += (lo - offset) * xq[j] + (hi - offset) * xq[j + 16];
  }
  return sum;
}

}  // namespace

float dot_q4_0_q8_0_scalar(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const int isum = legacy_block_sum(w[i].qs, nullptr, 8, x[i].qs);
    sum += static_cast<float>(isum) * f16_to_f32(w[i].d) * f16_to_f32(x[i].d);
  }
  return sum;
}

float dot_q5_0_q8_0_scalar(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const int isum = legacy_block_sum(w[i].qs, w[i].qh, 16, x[i].qs);
    sum += (f16_to_f32(w[i].d) * f16_to_f32(x[i].d)) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_1_q8_1_scalar(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const int isum = legacy_block_sum(w[i].qs, nullptr, 0, x[i].qs);
    sum += (f16_to_f32(w[i].d) * f16_to_f32(x[i].d)) * static_cast<float>(isum) +
           f16_to_f32(w[i].m) * f16_to_f32(x[i].s);
  }
  return sum;
}

float dot_q5_1_q8_1_scalar(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) {
  float sum = 0;
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    const int isum = legacy_block_sum(w[i].qs, w[i].qh, 0, x[i].qs);
    sum += (f16_to_f32(w[i].d) * f16_to_f32(x[i].d)) * static_cast<float>(isum) +
           f16_to_f32(w[i].m) * f16_to_f32(x[i].s);
  }
  return sum;
}
float dot_iq2_s_q8_K_scalar(int64_t n, const BlockIQ2_S* w, const BlockQ8_K* x) {
  float sum = 0.f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int8_t* q8 = x[i].qs;
    int32_t block_sum = 0;
    for (int h = 0; h < kQK_K / 16; ++h) {
      const int32_t ls = 2 * ((w[i].scales[h / 2] >> (4 * (h % 2))) & 0xf) + 1;
      int32_t half_sum = 0;
      for (int k = 0; k < 2; ++k) {
        const int g = 2 * h + k;
        const int index = w[i].qs[g] | (((w[i].qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
        const uint8_t signs = w[i].signs[g];
        for (int j = 0; j < 8; ++j) {
          const int v = iq2s_grid_byte(index, j) * q8[j];
          half_sum += (signs & kIq2xsSignMask[j]) ? -v : v;
        }
        q8 += 8;
      }
      block_sum += half_sum * ls;
    }
    sum += (f16_to_f32(w[i].d) * x[i].d) * static_cast<float>(block_sum);
  }
  return 0.125f * sum;
}

extern const DotKernels kDotScalar = {
    "scalar",
    dot_q8_0_q8_0_scalar,
    dot_q2_K_q8_K_scalar,
    dot_q4_K_q8_K_scalar,
    dot_iq2_xxs_q8_K_scalar,
    dot_mxfp4_q8_0_scalar,
    dot_f16_f32_scalar,
    dot_bf16_f32_scalar,
    dot_f32_f32_scalar,
    dot_q6_K_q8_K_scalar,
    dot_iq2_xs_q8_K_scalar,
    dot_iq1_m_q8_K_scalar,
    dot_iq1_s_q8_K_scalar,
    dot_iq3_xxs_q8_K_scalar,
    dot_iq3_s_q8_K_scalar,
    dot_q3_K_q8_K_scalar,
    dot_q5_K_q8_K_scalar,
    dot_iq4_nl_q8_0_scalar,
    dot_iq4_xs_q8_K_scalar,
    dot_q4_0_q8_0_scalar,
    dot_q4_1_q8_1_scalar,
    dot_q5_0_q8_0_scalar,
    dot_q5_1_q8_1_scalar,
    dot_iq2_s_q8_K_scalar,
};

}  // namespace ds4::quant
