// The exact integer dot of one IQ2_XXS super-block with 256 Q8_K codes:
// sum over the 8 sub-blocks of (2 ls + 1) x sum(grid * sign * q8). Every
// IQ2_XXS dot in ggml forms this integer; they differ only in how they scale
// and accumulate it in float (the common factor 1/8 is left to the caller).
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq2_xxs_tables.h"

namespace ds4::quant {

inline int32_t iq2_xxs_block_isum(const BlockIQ2_XXS& w, const int8_t* q8) {
  int32_t block_sum = 0;
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    uint32_t aux[2];
    std::memcpy(aux, w.qs + 4 * ib, sizeof(aux));
    const int32_t ls = static_cast<int32_t>(2 * (aux[1] >> 28) + 1);
    int32_t sub_sum = 0;
    for (int g = 0; g < 4; ++g) {
      const int grid = (aux[0] >> (8 * g)) & 0xFF;
      const uint8_t signs = kIq2xsSigns[(aux[1] >> (7 * g)) & 127];
      for (int j = 0; j < 8; ++j) {
        const int v = iq2xxs_grid_byte(grid, j) * q8[j];
        sub_sum += (signs & kIq2xsSignMask[j]) ? -v : v;
      }
      q8 += 8;
    }
    block_sum += sub_sum * ls;
  }
  return block_sum;
}

}  // namespace ds4::quant
