// IQ3_S: super-blocks of 256 = 8 sub-blocks of 32 = 64 groups of 4. Each
// group is a point of a 512-point grid (8 odd magnitude levels 1..15); 8
// explicit sign bits per 8 elements; 4-bit sub-block scales; one f16 scale
// per super-block.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_search.h"
#include "quant/iq3_tables.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace ds4::quant {
namespace {

constexpr Iq3SearchSteps kSteps = {9, false, true};

// One super-block (ggml's quantize_row_iq3_s_impl, sub-blocks of 32).
// Without importance each element is weighted by x^2, as ggml does.
void quantize_block(const Iq3SearchTables& t, const float* xbl, const float* qwbl, BlockIQ3_S& y) {
  float scales[kQK_K / 32];
  float weight[32];
  float xval[32];
  float waux[32];
  int8_t L[32];
  uint8_t block_signs[4];

  std::memset(&y, 0, sizeof(y));
  y.d = f32_to_f16(0.f);
  // ggml advances its grid-index and sign cursors only past sub-blocks it
  // quantizes: after an all-zero sub-block the later ones are written one
  // sub-block early (and decoded so). Kept, for identical bytes.
  int qs_at = 0;
  int signs_at = 0;
  float max_scale = 0;
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = 2 * sumx2 / kQK_K;

  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const float* xb = xbl + 32 * ib;
    if (qwbl) {
      const float* qw = qwbl + 32 * ib;
      for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 32; ++i) weight[i] = xb[i] * xb[i];
    }
    for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
    for (int k = 0; k < 4; ++k) {
      uint8_t s = 0;
      for (int i = 0; i < 8; ++i) {
        if (xb[8 * k + i] >= 0) {
          xval[8 * k + i] = xb[8 * k + i];
        } else {
          xval[8 * k + i] = -xb[8 * k + i];
          s = static_cast<uint8_t>(s | (1 << i));
        }
      }
      block_signs[k] = s;
    }
    float max = xval[0];
    for (int i = 1; i < 32; ++i) max = std::max(max, xval[i]);
    if (!max) {
      scales[ib] = 0;
      continue;
    }
    float scale = fit_iq3_sub_block(t, kSteps, xval, weight, waux, max, L);
    if (scale < 0) {
      // Scales are coded unsigned; a negative fit is expressed by flipping
      // all signs (ggml keeps this guard although it should not trigger).
      scale = -scale;
      for (uint8_t& s : block_signs) s = static_cast<uint8_t>(~s);
    }
    for (int k = 0; k < 8; ++k) {
      uint16_t u = 0;
      for (int i = 0; i < 4; ++i) u = static_cast<uint16_t>(u | (L[4 * k + i] << (3 * i)));
      const int grid_index = t.grid_index(u);
      if (grid_index < 0) throw Error("IQ3_S quantize: code word off the grid (non-finite input?)");
      y.qs[qs_at + k] = static_cast<uint8_t>(grid_index & 255);
      y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | ((grid_index >> 8) << k));
    }
    qs_at += 8;
    std::memcpy(y.signs + signs_at, block_signs, 4);
    signs_at += 4;
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }

  if (!max_scale) return;
  // Sub-block scales are coded as d*(2l+1) with l in 0..15, d = max/31; the
  // stored d carries ggml's 1.033 fudge factor.
  const float d = max_scale / 31;
  y.d = f32_to_f16(d * 1.033f);
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / 32; ib += 2) {
    const int l1 = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
    const int l2 = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib + 1] - 1))));
    y.scales[ib / 2] = static_cast<uint8_t>(l1 | (l2 << 4));
  }
}

}  // namespace

void dequantize_row_iq3_s(const BlockIQ3_S* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = (x[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
      const float db = d * (1 + 2 * ls);
      for (int g = 0; g < 4; ++g) {
        const uint8_t signs = x[i].signs[4 * ib + g];
        for (int j = 0; j < 8; ++j) {
          const int group = 2 * g + j / 4;  // group of 4 within the sub-block
          const int index = x[i].qs[8 * ib + group] | (((x[i].qh[ib] >> group) & 1) << 8);
          y[j] = db * iq3s_grid_byte(index, j % 4) * (signs & kIq2xsSignMask[j] ? -1.f : 1.f);
        }
        y += 8;
      }
    }
  }
}

void quantize_row_iq3_s(const float* x, BlockIQ3_S* y, int64_t n, const float* importance) {
  const Iq3SearchTables& tables = Iq3SearchTables::s();
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    quantize_block(tables, x + i * kQK_K, importance ? importance + i * kQK_K : nullptr, y[i]);
  }
}

}  // namespace ds4::quant
