#include "quant/iq3_search.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "quant/iq3_tables.h"
#include "quant/rounding.h"

namespace ds4::quant {
namespace {

constexpr int kMaxQ = 8;  // levels per element; values 2*l+1 = 1..15

// Among the grid neighbours of an off-grid code word, the one with the least
// weighted squared error at `scale` (first in list order on ties); writes
// its levels to L. Each element's error at each level is tabulated once;
// summing table entries in element order gives the same floats as
// evaluating w*(scale*q - x)^2 per candidate.
int best_neighbour(std::span<const uint16_t> candidates, const Iq3SearchTables& t, const float* xval,
                   const float* weight, float scale, int8_t* L) {
  float err[4][kMaxQ];
  for (int l = 0; l < kMaxQ; ++l) {
    const float sq = scale * static_cast<float>(2 * l + 1);
    for (int i = 0; i < 4; ++i) {
      const float diff = sq - xval[i];
      err[i][l] = weight[i] * diff * diff;
    }
  }
  float best_d2 = std::numeric_limits<float>::max();
  int best = -1;
  for (const uint16_t c : candidates) {
    const uint8_t* lv = t.levels(c);
    float d2 = 0;
    for (int i = 0; i < 4; ++i) d2 += err[i][lv[i]];
    if (d2 < best_d2) {
      best_d2 = d2;
      best = c;
    }
  }
  if (best < 0) throw Error("IQ3 quantize: no grid neighbour (non-finite input?)");
  const uint8_t* lv = t.levels(best);
  for (int i = 0; i < 4; ++i) L[i] = static_cast<int8_t>(lv[i]);
  return best;
}

// Rounds group k's 4 magnitudes at inverse scale `id` to levels; writes
// them to L (when not null) and returns the code word.
uint16_t round_group(const float* xval, float id, int8_t* L) {
  uint16_t u = 0;
  for (int i = 0; i < 4; ++i) {
    const int l = std::max(0, std::min(kMaxQ - 1, nearest_int(0.5f * (id * xval[i] - 1))));
    if (L) L[i] = static_cast<int8_t>(l);
    u = static_cast<uint16_t>(u | (l << (3 * i)));
  }
  return u;
}

// Weighted least-squares scale terms of 32 magnitudes at levels L.
void lsq_terms(const float* xval, const float* weight, const int8_t* L, float& sumqx, float& sumq2) {
  sumqx = 0;
  sumq2 = 0;
  for (int i = 0; i < 32; ++i) {
    const float w = weight[i];
    const float q = 2 * L[i] + 1;
    sumqx += w * xval[i] * q;
    sumq2 += w * q * q;
  }
}

}  // namespace

const Iq3SearchTables& Iq3SearchTables::xxs() {
  // A function-local static is initialised exactly once, even with threads.
  static const Iq3SearchTables tables(kIq3xxsCompactGrid, 2);
  return tables;
}

const Iq3SearchTables& Iq3SearchTables::s() {
  static const Iq3SearchTables tables(kIq3sCompactGrid, 3);
  return tables;
}

Iq3SearchTables::Iq3SearchTables(std::span<const uint16_t> compact_grid, int distances_wanted)
    : on_grid_(kMapSize, -1), neighbour_begin_(kMapSize + 1, 0), levels_(compact_grid.size()) {
  const int grid_size = static_cast<int>(compact_grid.size());
  for (int k = 0; k < grid_size; ++k) {
    const uint16_t code = compact_grid[static_cast<size_t>(k)];
    on_grid_[code] = static_cast<int16_t>(k);
    for (int i = 0; i < 4; ++i) levels_[static_cast<size_t>(k)][i] = static_cast<uint8_t>((code >> (3 * i)) & 7);
  }

  std::vector<int> dist(static_cast<size_t>(grid_size));
  for (int u = 0; u < kMapSize; ++u) {
    neighbour_begin_[u] = static_cast<uint32_t>(neighbour_list_.size());
    if (on_grid_[u] >= 0) continue;
    for (int k = 0; k < grid_size; ++k) {
      int d2 = 0;
      for (int i = 0; i < 4; ++i) {
        const int diff = 2 * (levels_[static_cast<size_t>(k)][i] - ((u >> (3 * i)) & 7));  // between values 2l+1
        d2 += diff * diff;
      }
      dist[static_cast<size_t>(k)] = d2;
    }
    // The `distances_wanted` smallest distinct distances, each with all its
    // grid points in index order.
    int previous = -1;
    for (int n = 0; n < distances_wanted; ++n) {
      int d = 1 << 30;
      for (int k = 0; k < grid_size; ++k) {
        if (dist[static_cast<size_t>(k)] > previous) d = std::min(d, dist[static_cast<size_t>(k)]);
      }
      if (d == 1 << 30) break;
      for (int k = 0; k < grid_size; ++k) {
        if (dist[static_cast<size_t>(k)] == d) neighbour_list_.push_back(static_cast<uint16_t>(k));
      }
      previous = d;
    }
  }
  neighbour_begin_[kMapSize] = static_cast<uint32_t>(neighbour_list_.size());
}

float fit_iq3_sub_block(const Iq3SearchTables& t, const Iq3SearchSteps& steps, const float* xval,
                        const float* weight, const float* waux, float max, int8_t* L) {
  std::memset(L, 0, 32);
  int8_t Laux[32];
  bool on_grid[8];
  bool on_grid_aux[8];
  float best = 0;
  float scale = max / (2 * kMaxQ - 1);
  for (bool& g : on_grid) g = steps.start_on_grid;
  for (int is = -steps.scan; is <= steps.scan; ++is) {
    const float id = (2 * kMaxQ - 1 + is * 0.2f) / max;
    const float this_scale = 1 / id;
    for (int k = 0; k < 8; ++k) {
      const uint16_t u = round_group(xval + 4 * k, id, Laux + 4 * k);
      on_grid_aux[k] = t.grid_index(u) >= 0;
      if (!on_grid_aux[k]) best_neighbour(t.neighbours(u), t, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
    }
    float sumqx, sumq2;
    lsq_terms(xval, weight, Laux, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, 32);
      std::copy(on_grid_aux, on_grid_aux + 8, on_grid);
    }
  }
  const bool any_off_grid = std::find(on_grid, on_grid + 8, false) != on_grid + 8;
  if (any_off_grid && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 8; ++k) {
      if (on_grid[k] && !steps.resnap_all_groups) continue;
      const uint16_t u = round_group(xval + 4 * k, id, nullptr);
      int index = t.grid_index(u);
      if (index < 0) index = best_neighbour(t.neighbours(u), t, xval + 4 * k, waux + 4 * k, scale, L + 4 * k);
      const uint8_t* lv = t.levels(index);
      for (int i = 0; i < 4; ++i) L[4 * k + i] = static_cast<int8_t>(lv[i]);
    }
    float sumqx, sumq2;
    lsq_terms(xval, weight, L, sumqx, sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  return scale;
}

}  // namespace ds4::quant
