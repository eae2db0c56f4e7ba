#include "quant/iq4_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/iq4_values.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 32;
constexpr int kTries = 7;

// Weighted sums sum(w q x) and sum(w q^2) of a sub-block coded at inverse
// scale id; the indices go to L when it is given.
void coded_sums(const float* x, const float* w, float id, uint8_t* L, float& sum_qx, float& sum_q2) {
  sum_qx = sum_q2 = 0;
  for (int j = 0; j < kSub; ++j) {
    const int l = iq4_nearest_index(id * x[j]);
    if (L) L[j] = static_cast<uint8_t>(l);
    const float q = kIq4nlValues[static_cast<size_t>(l)];
    sum_qx += w[j] * q * x[j];
    sum_q2 += w[j] * q * q;
  }
}

}  // namespace

int iq4_nearest_index(float x) {
  const auto& v = kIq4nlValues;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[static_cast<size_t>(mid)]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - v[static_cast<size_t>(hi - 1)] < v[static_cast<size_t>(hi)] - x ? hi - 1 : hi;
}

void quantize_iq4_super_block(int size, const float* x, const float* importance, uint16_t* d_out, uint8_t* q4,
                              uint16_t* scales_h, uint8_t* scales_l) {
  const int n_sub = size / kSub;
  uint8_t L[256] = {};
  float scales[8] = {};
  float weight[kSub];
  float sigma2 = 0;
  for (int j = 0; j < size; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / size;

  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < n_sub; ++ib) {
    const float* xb = x + kSub * ib;
    uint8_t* Lb = L + kSub * ib;
    for (int j = 0; j < kSub; ++j) {
      weight[j] = importance ? importance[kSub * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    }
    float amax = 0, max = 0;
    for (int j = 0; j < kSub; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    // Start from the scale mapping the largest magnitude onto the table's
    // most negative value, then try 15 nearby inverse scales.
    float sum_qx, sum_q2;
    coded_sums(xb, weight, 1 / (-max / kIq4nlValues[0]), Lb, sum_qx, sum_q2);
    float d = sum_q2 > 0 ? sum_qx / sum_q2 : 0.f;
    float best = d * sum_qx;
    for (int t = -kTries; t <= kTries; ++t) {
      coded_sums(xb, weight, (t + kIq4nlValues[0]) / max, nullptr, sum_qx, sum_q2);
      if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
        d = sum_qx / sum_q2;
        best = d * sum_qx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }

  if (n_sub > 1) {
    // Sub-block scales as 6-bit multiples of the super-scale, the indices
    // recoded against each dequantized sub-block scale.
    *scales_h = 0;
    const float d = -max_scale / 32;
    *d_out = f32_to_f16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < n_sub; ++ib) {
      const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < kSub; ++j) L[kSub * ib + j] = static_cast<uint8_t>(iq4_nearest_index(idl * x[kSub * ib + j]));
      const int code = l + 32;
      if (ib % 2 == 0) {
        scales_l[ib / 2] = static_cast<uint8_t>(code & 0xf);
      } else {
        scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | ((code & 0xf) << 4));
      }
      *scales_h = static_cast<uint16_t>(*scales_h | ((code >> 4) << (2 * ib)));
    }
  } else {
    *d_out = f32_to_f16(scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (int j = 0; j < size; ++j) L[j] = static_cast<uint8_t>(iq4_nearest_index(id * x[j]));
  }
  for (int i = 0; i < size / kSub; ++i) {
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
  }
}

}  // namespace ds4::quant
