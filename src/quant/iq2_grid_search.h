// Lookup structures for the grid search of the IQ formats whose codebook
// points are 8 elements at 3 levels (IQ2_XXS's 256-point, IQ2_XS's 512-point,
// IQ2_S's 1024-point and IQ1_S/IQ1_M's 2048-point codebooks), built once per grid on first use
// (thread-safe): the reverse map from an 8-element code word (2 bits per
// element, element i in bits 2i..2i+1) to its grid index, and for every code
// word with levels 0..2 that is not on the grid, the grid points at the two
// (IQ2_S: one, IQ1: three) smallest squared distances (ggml's kmap_q2xs / kneighbors_q2xs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4::quant {

class Iq2GridSearch {
 public:
  // Code words reach 0xAAAA (all elements at level 2), so the map covers
  // 0..43691 like ggml's (43692 entries).
  static constexpr int kMapSize = 43692;

  static const Iq2GridSearch& iq2_xxs();
  static const Iq2GridSearch& iq2_xs();
  static const Iq2GridSearch& iq2_s();
  static const Iq2GridSearch& iq1();

  // Grid index of code word `u`, or -1 when `u` is not a grid point.
  int grid_index(uint16_t u) const { return on_grid_[u]; }
  // Grid points nearest to off-grid code word `u` (levels 0..2 only), by
  // increasing distance then increasing index.
  std::span<const uint16_t> neighbours(uint16_t u) const {
    return {neighbour_list_.data() + neighbour_begin_[u], neighbour_begin_[u + 1] - neighbour_begin_[u]};
  }
  // The 8 levels (0, 1 or 2; value 2*level+1) of grid point k.
  const uint8_t* levels(int k) const { return levels_.data() + 8 * static_cast<size_t>(k); }
  // Of the neighbours of off-grid word `u`, the one with the least weighted
  // squared error sum_i weight[i] * (scale * (2 l_i + 1) - xval[i])^2 (first
  // on ties, ggml's iq2_find_best_neighbour); writes its levels to L[0..7].
  int best_neighbour(uint16_t u, const float* xval, const float* weight, float scale, int8_t* L) const;
  // The same with explicit level values: error sum_i weight[i] *
  // (scale * values[l_i] - xval[i])^2 (ggml's iq1_find_best_neighbour2,
  // where the IQ1 formats shift the levels -1, 0, 1 by +-1/8).
  int best_neighbour_valued(uint16_t u, const float* xval, const float* weight, float scale, const float* values,
                            int8_t* L) const;
  int size() const { return static_cast<int>(levels_.size() / 8); }

 private:
  Iq2GridSearch(std::span<const uint16_t> compact_grid, int n_distances);
  std::vector<int16_t> on_grid_;
  std::vector<uint32_t> neighbour_begin_;  // kMapSize + 1 offsets
  std::vector<uint16_t> neighbour_list_;
  std::vector<uint8_t> levels_;            // 8 per grid point
};

}  // namespace ds4::quant
