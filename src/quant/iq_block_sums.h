// The exact integer dots of one IQ3_XXS / IQ3_S / IQ4_XS super-block with 256
// Q8_K codes: the sum over sub-blocks of the integer sub-block scale times
// sum(value * q8). Every dot of these types in ggml forms this integer (its
// IQP panel gemm included); they differ only in the float scaling and
// accumulation (IQ3_XXS's common factor 1/4 is left to the caller).
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/iq4_values.h"
#include "quant/quant.h"

namespace ds4::quant {

// Sub-block scale 2 ls + 1 (ls: the top 4 bits of each 32-bit word).
inline int32_t iq3_xxs_block_isum(const BlockIQ3_XXS& w, const int8_t* q8) {
  int32_t block_sum = 0;
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    uint32_t aux;
    std::memcpy(&aux, w.qs + kQK_K / 4 + 4 * ib, sizeof(aux));
    const int32_t ls = static_cast<int32_t>(2 * (aux >> 28) + 1);
    int32_t sub_sum = 0;
    for (int g = 0; g < 4; ++g) {
      const uint8_t signs = kIq2xsSigns[(aux >> (7 * g)) & 127];
      for (int j = 0; j < 8; ++j) {
        const int v = iq3xxs_grid_byte(w.qs[8 * ib + 2 * g + j / 4], j % 4) * q8[j];
        sub_sum += (signs & kIq2xsSignMask[j]) ? -v : v;
      }
      q8 += 8;
    }
    block_sum += sub_sum * ls;
  }
  return block_sum;
}

// Sub-block scale 2 ls + 1 (ls: a 4-bit field, two per byte).
inline int32_t iq3_s_block_isum(const BlockIQ3_S& w, const int8_t* q8) {
  int32_t block_sum = 0;
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const int32_t ls = 2 * ((w.scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1;
    int32_t sub_sum = 0;
    for (int g = 0; g < 4; ++g) {
      const uint8_t signs = w.signs[4 * ib + g];
      for (int j = 0; j < 8; ++j) {
        const int group = 2 * g + j / 4;
        const int index = w.qs[8 * ib + group] | (((w.qh[ib] >> group) & 1) << 8);
        const int v = iq3s_grid_byte(index, j % 4) * q8[j];
        sub_sum += (signs & kIq2xsSignMask[j]) ? -v : v;
      }
      q8 += 8;
    }
    block_sum += sub_sum * ls;
  }
  return block_sum;
}

// Sub-block scale ls - 32 (6 bits), IQ4_NL's values.
inline int32_t iq4_xs_block_isum(const BlockIQ4_XS& w, const int8_t* q8) {
  int sc[kQK_K / 32];
  iq4_xs_scales(w, sc);
  int32_t block_sum = 0;
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const uint8_t* qs = w.qs + 16 * ib;
    int32_t group = 0;
    for (int j = 0; j < 16; ++j) group += q8[j] * kIq4nlValues[qs[j] & 0xf] + q8[j + 16] * kIq4nlValues[qs[j] >> 4];
    block_sum += sc[ib] * group;
    q8 += 32;
  }
  return block_sum;
}

}  // namespace ds4::quant
