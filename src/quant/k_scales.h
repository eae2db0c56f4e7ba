// Packing of Q4_K's eight 6-bit sub-block scales and eight 6-bit mins into
// 12 bytes: bytes 0..3 hold scales 0..3 (low 6 bits), bytes 4..7 mins 0..3,
// bytes 8..11 the low nibbles of scale/min 4..7, and the top 2 bits of bytes
// 0..7 the high bits of scale/min 4..7.
#pragma once

#include <cstdint>

namespace ds4::quant {

struct ScaleMin6 {
  uint8_t scale;
  uint8_t min;
};

inline ScaleMin6 unpack_q4_K_scale_min(int j, const uint8_t* packed) {
  if (j < 4) return {static_cast<uint8_t>(packed[j] & 63), static_cast<uint8_t>(packed[j + 4] & 63)};
  return {static_cast<uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))};
}

// Inverse of unpack_q4_K_scale_min for all eight pairs (values 0..63).
inline void pack_q4_K_scale_min(const uint8_t scale[8], const uint8_t min[8], uint8_t packed[12]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = scale[j];
    packed[j + 4] = min[j];
  }
  for (int j = 4; j < 8; ++j) {
    packed[j + 4] = static_cast<uint8_t>((scale[j] & 0xF) | ((min[j] & 0xF) << 4));
    packed[j - 4] |= static_cast<uint8_t>((scale[j] >> 4) << 6);
    packed[j] |= static_cast<uint8_t>((min[j] >> 4) << 6);
  }
}

}  // namespace ds4::quant
