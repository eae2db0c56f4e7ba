// Lookup structures for the IQ2_XXS grid search, built once on first use
// (thread-safe): the reverse map from an 8-element code word (2 bits per
// element, element i in bits 2i..2i+1) to its grid index, and for every code
// word with levels 0..2 that is not on the grid, the list of grid points at
// the two smallest squared distances (ggml's kmap_q2xs / kneighbors_q2xs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4::quant {

class Iq2xxsSearchTables {
 public:
  // Code words reach 0xAAAA (all elements at level 2), so the map covers
  // 0..43691 like ggml's (43692 entries).
  static constexpr int kMapSize = 43692;

  static const Iq2xxsSearchTables& get();

  // Grid index of code word `u`, or -1 when `u` is not a grid point.
  int grid_index(uint16_t u) const { return on_grid_[u]; }
  // Grid points nearest to off-grid code word `u` (levels 0..2 only), by
  // increasing distance then increasing index.
  std::span<const uint8_t> neighbours(uint16_t u) const {
    return {neighbour_list_.data() + neighbour_begin_[u], neighbour_begin_[u + 1] - neighbour_begin_[u]};
  }
  // The 8 levels (0, 1 or 2; value 2*level+1) of grid point k.
  const uint8_t* levels(int k) const { return levels_[k]; }

 private:
  Iq2xxsSearchTables();
  std::vector<int16_t> on_grid_;
  std::vector<uint32_t> neighbour_begin_;  // kMapSize + 1 offsets
  std::vector<uint8_t> neighbour_list_;
  uint8_t levels_[256][8];
};

}  // namespace ds4::quant
