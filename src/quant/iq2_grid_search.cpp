#include "quant/iq2_grid_search.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_tables.h"

namespace ds4::quant {
namespace {

bool all_levels_below_3(int u) {
  for (int i = 0; i < 8; ++i) {
    if (((u >> (2 * i)) & 3) == 3) return false;
  }
  return true;
}

}  // namespace

// Function-local statics are initialised exactly once, even with threads.
const Iq2GridSearch& Iq2GridSearch::iq2_xxs() {
  static const Iq2GridSearch tables(kIq2xxsCompactGrid, 2);
  return tables;
}

const Iq2GridSearch& Iq2GridSearch::iq2_xs() {
  static const Iq2GridSearch tables(kIq2xsCompactGrid, 2);
  return tables;
}

const Iq2GridSearch& Iq2GridSearch::iq2_s() {
  static const Iq2GridSearch tables(kIq2sCompactGrid, 1);
  return tables;
}

const Iq2GridSearch& Iq2GridSearch::iq1() {
  static const Iq2GridSearch tables(kIq1CompactGrid, 3);
  return tables;
}

Iq2GridSearch::Iq2GridSearch(std::span<const uint16_t> compact_grid, int n_distances)
    : on_grid_(kMapSize, -1), neighbour_begin_(kMapSize + 1, 0), levels_(8 * compact_grid.size()) {
  const int n = static_cast<int>(compact_grid.size());
  for (int k = 0; k < n; ++k) {
    const uint16_t code = compact_grid[static_cast<size_t>(k)];
    on_grid_[code] = static_cast<int16_t>(k);
    for (int i = 0; i < 8; ++i) levels_[8 * static_cast<size_t>(k) + i] = static_cast<uint8_t>((code >> (2 * i)) & 3);
  }

  // Only code words with every element at level 0..2 can be looked up (the
  // quantizers clamp levels to 0..2), so only those get neighbour lists.
  std::vector<int> dist(static_cast<size_t>(n));
  for (int u = 0; u < kMapSize; ++u) {
    neighbour_begin_[u] = static_cast<uint32_t>(neighbour_list_.size());
    if (on_grid_[u] >= 0 || !all_levels_below_3(u)) continue;
    int pos[8];
    for (int i = 0; i < 8; ++i) pos[i] = (u >> (2 * i)) & 3;
    std::vector<int> nearest;  // the n_distances smallest distinct distances, ascending
    for (int k = 0; k < n; ++k) {
      const uint8_t* lv = levels(k);
      int d2 = 0;
      for (int i = 0; i < 8; ++i) {
        const int diff = 2 * (lv[i] - pos[i]);  // distance between odd values 2l+1
        d2 += diff * diff;
      }
      dist[static_cast<size_t>(k)] = d2;
      const auto at = std::lower_bound(nearest.begin(), nearest.end(), d2);
      if (at != nearest.end() && *at == d2) continue;
      if (static_cast<int>(at - nearest.begin()) >= n_distances) continue;
      nearest.insert(at, d2);
      if (static_cast<int>(nearest.size()) > n_distances) nearest.pop_back();
    }
    for (int d : nearest) {
      for (int k = 0; k < n; ++k) {
        if (dist[static_cast<size_t>(k)] == d) neighbour_list_.push_back(static_cast<uint16_t>(k));
      }
    }
  }
  neighbour_begin_[kMapSize] = static_cast<uint32_t>(neighbour_list_.size());
}

// Among the grid neighbours of an off-grid code word, the one with the
// least weighted squared error at `scale`; writes its levels to L. The
// per-element error of each of the 3 levels is tabulated once; summing the
// table entries in element order gives the same floats as evaluating
// w*(scale*q - x)^2 per candidate.
int Iq2GridSearch::best_neighbour(uint16_t u, const float* xval, const float* weight, float scale, int8_t* L) const {
  const std::span<const uint16_t> candidates = neighbours(u);
  float err[8][3];
  for (int l = 0; l < 3; ++l) {
    const float sq = scale * static_cast<float>(2 * l + 1);
    for (int i = 0; i < 8; ++i) {
      const float diff = sq - xval[i];
      err[i][l] = weight[i] * diff * diff;
    }
  }
  // Candidates are scored four at a time (independent sums, each still in
  // element order) and compared in list order, first minimum wins.
  float best_d2 = std::numeric_limits<float>::max();
  int best = -1;
  const size_t count = candidates.size();
  size_t c = 0;
  for (; c + 4 <= count; c += 4) {
    const uint8_t* l0 = levels(candidates[c]);
    const uint8_t* l1 = levels(candidates[c + 1]);
    const uint8_t* l2 = levels(candidates[c + 2]);
    const uint8_t* l3 = levels(candidates[c + 3]);
    float d[4] = {0, 0, 0, 0};
    for (int i = 0; i < 8; ++i) {
      d[0] += err[i][l0[i]];
      d[1] += err[i][l1[i]];
      d[2] += err[i][l2[i]];
      d[3] += err[i][l3[i]];
    }
    for (int j = 0; j < 4; ++j) {
      if (d[j] < best_d2) {
        best_d2 = d[j];
        best = candidates[c + j];
      }
    }
  }
  for (; c < count; ++c) {
    const uint8_t* lv = levels(candidates[c]);
    float d2 = 0;
    for (int i = 0; i < 8; ++i) d2 += err[i][lv[i]];
    if (d2 < best_d2) {
      best_d2 = d2;
      best = candidates[c];
    }
  }
  if (best < 0) throw Error("IQ2 quantize: no grid neighbour (non-finite input?)");
  const uint8_t* lv = levels(best);
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>(lv[i]);
  return best;
}

int Iq2GridSearch::best_neighbour_valued(uint16_t u, const float* xval, const float* weight, float scale,
                                         const float* values, int8_t* L) const {
  float best_score = std::numeric_limits<float>::max();
  int best = -1;
  for (uint16_t k : neighbours(u)) {
    const uint8_t* lv = levels(k);
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = scale * values[lv[i]] - xval[i];
      d2 += weight[i] * diff * diff;
    }
    if (d2 < best_score) {
      best_score = d2;
      best = k;
    }
  }
  if (best < 0) throw Error("IQ1 quantize: no grid neighbour (non-finite input?)");
  const uint8_t* lv = levels(best);
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>(lv[i]);
  return best;
}

}  // namespace ds4::quant
