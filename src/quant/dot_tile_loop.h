// Internal to the dot_tile*.cpp files: a tile computed by looping a one-row
// dot kernel over every (row, activation) pair, rows outer.
#pragma once

#include <cstdint>

namespace ds4::quant::tile_detail {

template <typename Block, typename Act, typename Dot>
inline void loop_dots(Dot dot, int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                      const void* const* acts, int64_t n_acts, float* out, int64_t ldo) {
  // Decode streams these rows from memory once: ask for the row kPrefetchRows
  // ahead while this one is dotted (a hint only; it never faults, so rows past
  // the tile are harmless).
  constexpr uint64_t kPrefetchRows = 4;
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* ahead = w + (static_cast<uint64_t>(r) + kPrefetchRows) * row_bytes;
    for (uint64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(ahead + off, 0, 3);
    const auto* row = reinterpret_cast<const Block*>(w + static_cast<uint64_t>(r) * row_bytes);
    for (int64_t t = 0; t < n_acts; ++t) out[t * ldo + r] = dot(n, row, static_cast<const Act*>(acts[t]));
  }
}

}  // namespace ds4::quant::tile_detail
