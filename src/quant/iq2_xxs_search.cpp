#include "quant/iq2_xxs_search.h"

#include <algorithm>
#include <array>

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

const Iq2xxsSearchTables& Iq2xxsSearchTables::get() {
  // A function-local static is initialised exactly once, even with threads.
  static const Iq2xxsSearchTables tables;
  return tables;
}

Iq2xxsSearchTables::Iq2xxsSearchTables()
    : on_grid_(kMapSize, -1), neighbour_begin_(kMapSize + 1, 0) {
  for (int k = 0; k < 256; ++k) {
    const uint16_t code = kIq2xxsCompactGrid[k];
    on_grid_[code] = static_cast<int16_t>(k);
    for (int i = 0; i < 8; ++i) levels_[k][i] = static_cast<uint8_t>((code >> (2 * i)) & 3);
  }

  // Only code words with every element at level 0..2 can be looked up (the
  // quantizer clamps levels to 0..2), so only those get neighbour lists.
  std::array<int, 256> dist{};
  for (int u = 0; u < kMapSize; ++u) {
    neighbour_begin_[u] = static_cast<uint32_t>(neighbour_list_.size());
    if (on_grid_[u] >= 0 || !all_levels_below_3(u)) continue;
    int pos[8];
    for (int i = 0; i < 8; ++i) pos[i] = (u >> (2 * i)) & 3;
    int d_first = 1 << 30;
    for (int k = 0; k < 256; ++k) {
      int d2 = 0;
      for (int i = 0; i < 8; ++i) {
        const int diff = 2 * (levels_[k][i] - pos[i]);  // distance between odd values 2l+1
        d2 += diff * diff;
      }
      dist[k] = d2;
      d_first = std::min(d_first, d2);
    }
    int d_second = 1 << 30;
    for (int k = 0; k < 256; ++k) {
      if (dist[k] > d_first) d_second = std::min(d_second, dist[k]);
    }
    for (int d : {d_first, d_second}) {
      for (int k = 0; k < 256; ++k) {
        if (dist[k] == d) neighbour_list_.push_back(static_cast<uint8_t>(k));
      }
    }
  }
  neighbour_begin_[kMapSize] = static_cast<uint32_t>(neighbour_list_.size());
}

}  // namespace ds4::quant
