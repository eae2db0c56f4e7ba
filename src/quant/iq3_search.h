// Lookup structures for the IQ3_XXS / IQ3_S grid searches, built once per
// grid on first use (thread-safe): the reverse map from a 4-element code word
// (3 bits per element, element i in bits 3i..3i+2) to its grid index, and for
// every code word not on the grid, the grid points at the 2 (IQ3_XXS) or 3
// (IQ3_S) smallest squared distances (ggml's kmap_q3xs / kneighbors_q3xs).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace ds4::quant {

class Iq3SearchTables {
 public:
  // Every 12-bit code word is a valid level combination.
  static constexpr int kMapSize = 4096;

  static const Iq3SearchTables& xxs();  // the 256-point IQ3_XXS grid
  static const Iq3SearchTables& s();    // the 512-point IQ3_S grid

  // Grid index of code word `u` (< kMapSize), or -1 when `u` is not a grid point.
  int grid_index(uint16_t u) const { return on_grid_[u]; }
  // Grid points nearest to off-grid code word `u`, by increasing distance
  // then increasing index.
  std::span<const uint16_t> neighbours(uint16_t u) const {
    return {neighbour_list_.data() + neighbour_begin_[u], neighbour_begin_[u + 1] - neighbour_begin_[u]};
  }
  // The 4 levels (0..7; value 2*level+1) of grid point k.
  const uint8_t* levels(int k) const { return levels_[static_cast<size_t>(k)].data(); }

 private:
  Iq3SearchTables(std::span<const uint16_t> compact_grid, int distances_wanted);
  std::vector<int16_t> on_grid_;
  std::vector<uint32_t> neighbour_begin_;  // kMapSize + 1 offsets
  std::vector<uint16_t> neighbour_list_;
  std::vector<std::array<uint8_t, 4>> levels_;
};

// How the IQ3 formats differ in ggml's sub-block search
// (quantize_row_iq3_xxs_impl / quantize_row_iq3_s_impl).
struct Iq3SearchSteps {
  int scan;                // trial scales (15 + 0.2 is) / max for is in -scan..scan
  bool start_on_grid;      // groups count as on the grid before any trial is kept
  bool resnap_all_groups;  // the final snap redoes every group, not only off-grid ones
};

// Fits one sub-block of 32 magnitudes xval (>= 0, largest `max` > 0) with
// weights `weight` (waux = their square roots, used to pick grid neighbours):
// trial scales snapped to the grid, least-squares refits, then a final snap
// at the chosen scale. Writes the 32 levels (0..7) to L, returns the scale.
// ds4::Error if a group cannot be put on the grid (non-finite input).
float fit_iq3_sub_block(const Iq3SearchTables& t, const Iq3SearchSteps& steps, const float* xval,
                        const float* weight, const float* waux, float max, int8_t* L);

}  // namespace ds4::quant
