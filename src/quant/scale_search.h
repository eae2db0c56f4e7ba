// Scale searches shared by the K-quant reference quantizers: the published
// ggml algorithms (make_qkx2/qkx3_quants and make_qp_quants), reimplemented
// with the same float operation order so results match ggml bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "quant/blocks.h"

namespace ds4::quant {

// Fits x[i] ~= scale*L[i] - min_out with L[i] in 0..nmax and min_out >= 0,
// minimising sum w[i]*|err|^p (p = 1 if use_mad else 2). Starts from the
// min/max grid, then tries nstep+1 rescalings iscale = (nmax + rmin +
// rdelta*is)/(max-min) and solves weighted least squares for scale and min on
// each. `weights` may be null (then w[i] = x[i]^2). Laux: n bytes of scratch.
// Returns the scale; writes -min to *min_out.
float fit_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                    float* min_out, uint8_t* Laux, float rmin, float rdelta, int nstep,
                    bool use_mad);

// Fits non-negative x[i] ~= scale*L[i] with L[i] in 0..nmax, minimising the
// weighted squared error: a scan of 9 scales around nmax/max, then up to 5
// rounds of coordinate descent on single codes. Returns the scale (0 for an
// all-zero input).
float fit_nonneg_scale(int n, int nmax, const float* x, uint8_t* L, const float* weights);

// ggml's make_qx_quants with rmse_type 1: codes L[i] - nmax in [-nmax,
// nmax - 1] for x[i] ~= scale * (L[i] - nmax), the scale fitted by weighted
// least squares at -nmax/max and 18 nearby starting points (max: the value of
// largest magnitude, sign kept), weights w[i] (x[i]^2 when null). Returns the
// scale (0 and all codes 0 for an all-zero group, as ggml).
float fit_signed_scale(int n, int nmax, const float* x, int8_t* L, const float* weights);

// ggml's make_q3_quants with do_rmse: codes L[i] - nmax in [-nmax, nmax - 1]
// for x[i] ~= scale * (L[i] - nmax), starting from -nmax/max, then up to 5
// rounds of coordinate descent on single codes, weights x[i]^2. Returns the
// least-squares scale (0 and all codes 0 for an all-zero group, as ggml).
float fit_signed_scale_descent(int n, int nmax, const float* x, int8_t* L);

// ggml's element weights under an importance row: weights[i] = qw[i] *
// sqrt(sigma2 + x[i]^2) for i < n. Returns their sum, added in order (the
// sub-block weight sums the K-quants fit their scales with).
inline float importance_weights(int n, const float* x, const float* qw, float sigma2, float* weights) {
  for (int i = 0; i < n; ++i) weights[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += weights[i];
  return sum;
}

// Below this a group's maximum counts as zero (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;

// A K-quant row of n values (a multiple of kQK_K) block by block: weighted(x,
// importance, block) where an importance row is given, plain(x, block) otherwise.
template <typename Block, typename Weighted, typename Plain>
void quantize_k_row(const float* x, Block* y, int64_t n, const float* importance, Weighted weighted, Plain plain) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    if (importance) {
      weighted(x + i * kQK_K, importance + i * kQK_K, y[i]);
    } else {
      plain(x + i * kQK_K, y[i]);
    }
  }
}

// A row of n values of a format ggml quantizes only with an importance row
// (IQ2_XXS, IQ2_XS, IQ1_S), block by block: block(x, importance, y). Without
// one, every weight counts the same: one row has no column statistics (ds4's
// column weight energy, sum over rows of w^2, is in quantize_rows); this
// row's own x^2 instead ignores small elements and measured worse on IQ2_XXS
// (relative RMSE 0.43 vs 0.34 on N(0,1)).
template <typename Block, typename BlockFn>
void quantize_imatrix_row(const float* x, Block* y, int64_t n, const float* importance, BlockFn block) {
  std::vector<float> uniform;
  if (!importance) {
    uniform.assign(static_cast<size_t>(n), 1.0f);
    importance = uniform.data();
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) block(x + i * kQK_K, importance + i * kQK_K, y[i]);
}

}  // namespace ds4::quant
