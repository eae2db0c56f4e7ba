#include "quant/iq2_sub_block_fit.h"

#include <algorithm>
#include <cstring>

#include "quant/blocks.h"
#include "quant/rounding.h"

namespace ds4::quant {
namespace {

constexpr int kMaxQ = 3;  // levels per element; values 2*l+1 = 1, 3, 5

// Rounds a group of 8 to levels at inverse scale id; when the word is off the
// grid takes the best neighbour at `scale`. Returns whether it was on the grid.
bool snap_group(const Iq2GridSearch& t, const float* xval, const float* waux, float id, float scale, int8_t* L) {
  uint16_t u = 0;
  for (int i = 0; i < 8; ++i) {
    const int l = std::max(0, std::min(kMaxQ - 1, nearest_int(0.5f * (id * xval[i] - 1))));
    L[i] = static_cast<int8_t>(l);
    u = static_cast<uint16_t>(u | (l << (2 * i)));
  }
  if (t.grid_index(u) >= 0) return true;
  t.best_neighbour(u, xval, waux, scale, L);
  return false;
}

// Least-squares sums of the 16 magnitudes on levels L: scale = sumqx / sumq2.
void fit_sums(const float* xval, const float* weight, const int8_t* L, float& sumqx, float& sumq2) {
  sumqx = 0;
  sumq2 = 0;
  for (int i = 0; i < 16; ++i) {
    const float w = weight[i];
    const float q = 2 * L[i] + 1;
    sumqx += w * xval[i] * q;
    sumq2 += w * q * q;
  }
}

}  // namespace

float fit_iq2_sub_block(const Iq2GridSearch& t, const float* xval, float max, const float* weight, const float* waux,
                        int8_t* L) {
  std::memset(L, 0, 16);
  int8_t Laux[16];
  float best = 0;
  float scale = max / (2 * kMaxQ - 1);
  bool on_grid[2] = {true, true};
  for (int is = -9; is <= 9; ++is) {
    const float id = (2 * kMaxQ - 1 + is * 0.1f) / max;
    const float this_scale = 1 / id;
    bool on_grid_aux[2];
    for (int k = 0; k < 2; ++k)
      on_grid_aux[k] = snap_group(t, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k);
    float sumqx, sumq2;
    fit_sums(xval, weight, Laux, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, sizeof(Laux));
      on_grid[0] = on_grid_aux[0];
      on_grid[1] = on_grid_aux[1];
    }
  }
  if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 2; ++k) {
      if (!on_grid[k]) snap_group(t, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k);
    }
    float sumqx, sumq2;
    fit_sums(xval, weight, L, sumqx, sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  return scale;
}

void code_iq2_sub_block_scales(const float* scales, float d, uint8_t* packed) {
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
    if (ib % 2 == 0) {
      packed[ib / 2] = static_cast<uint8_t>(l);
    } else {
      packed[ib / 2] = static_cast<uint8_t>(packed[ib / 2] | (l << 4));
    }
  }
}

}  // namespace ds4::quant
