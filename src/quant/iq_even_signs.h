// Signs of the IQ2_XXS / IQ2_XS / IQ3_XXS groups of 8: the formats store 7
// sign bits and force an even number of negatives (ggml's ksigns_iq2xs), so
// the quantizers work on magnitudes and, when the count is odd, flip the
// element where a wrong sign costs least (smallest w * x^2).
#pragma once

#include <cstdint>

namespace ds4::quant {

// Writes |x| of the 8 elements at xb to xval (the cheapest one negated when
// the negatives are odd) and returns the 7 coded sign bits (bit i: element i
// negative; bit 7 is implied by parity).
inline uint8_t even_parity_signs(const float* xb, const float* weight, float* xval) {
  int nflip = 0;
  uint8_t s = 0;
  for (int i = 0; i < 8; ++i) {
    if (xb[i] >= 0) {
      xval[i] = xb[i];
    } else {
      xval[i] = -xb[i];
      ++nflip;
      s = static_cast<uint8_t>(s | (1 << i));
    }
  }
  if (nflip % 2) {
    int imin = 0;
    float min = weight[0] * xb[0] * xb[0];
    for (int i = 1; i < 8; ++i) {
      const float ax = weight[i] * xb[i] * xb[i];
      if (ax < min) {
        min = ax;
        imin = i;
      }
    }
    xval[imin] = -xval[imin];
    s = static_cast<uint8_t>(s ^ (1 << imin));
  }
  return s & 127;
}

}  // namespace ds4::quant
