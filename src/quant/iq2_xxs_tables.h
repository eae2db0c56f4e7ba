// IQ2_XXS format data: the 256-point codebook and the sign tables.
//
// Each codebook point is 8 magnitudes drawn from three levels. The compact
// form (kIq2xxsCompactGrid, ggml's kgrid_2bit_256) stores one 2-bit level
// index per element; the decoded form (kIq2xxsGrid, ggml's iq2xxs_grid)
// stores the 8 magnitudes as bytes {8, 25, 43}, element j in byte j
// (little-endian). Signs: a 7-bit index selects kIq2xsSigns[i] = i with bit 7
// set to the parity of i, so every group has an even number of negatives.
#pragma once

#include <array>
#include <cstdint>

namespace ds4::quant {

// Byte magnitude of each 2-bit level in the decoded grid (level 3 is unused).
inline constexpr std::array<uint8_t, 3> kIq2xxsLevelBytes = {0x08, 0x19, 0x2b};

inline constexpr std::array<uint16_t, 256> kIq2xxsCompactGrid = {
        0,     2,     5,     8,    10,    17,    20,    32,    34,    40,    42,    65,    68,    80,    88,    97,
      100,   128,   130,   138,   162,   257,   260,   272,   277,   320,   388,   408,   512,   514,   546,   642,
     1025,  1028,  1040,  1057,  1060,  1088,  1090,  1096,  1120,  1153,  1156,  1168,  1188,  1280,  1282,  1288,
     1312,  1350,  1385,  1408,  1425,  1545,  1552,  1600,  1668,  1700,  2048,  2053,  2056,  2068,  2088,  2113,
     2116,  2128,  2130,  2184,  2308,  2368,  2562,  2580,  4097,  4100,  4112,  4129,  4160,  4192,  4228,  4240,
     4245,  4352,  4360,  4384,  4432,  4442,  4480,  4644,  4677,  5120,  5128,  5152,  5157,  5193,  5248,  5400,
     5474,  5632,  5654,  6145,  6148,  6160,  6208,  6273,  6400,  6405,  6560,  6737,  8192,  8194,  8202,  8260,
     8289,  8320,  8322,  8489,  8520,  8704,  8706,  9217,  9220,  9232,  9280,  9302,  9472,  9537,  9572,  9872,
    10248, 10272, 10388, 10820, 16385, 16388, 16400, 16408, 16417, 16420, 16448, 16456, 16470, 16480, 16513, 16516,
    16528, 16640, 16672, 16737, 16768, 16773, 16897, 16912, 16968, 16982, 17000, 17408, 17416, 17440, 17536, 17561,
    17682, 17700, 17920, 18433, 18436, 18448, 18496, 18501, 18688, 18776, 18785, 18818, 19013, 19088, 20480, 20488,
    20497, 20505, 20512, 20608, 20616, 20740, 20802, 20900, 21137, 21648, 21650, 21770, 22017, 22100, 22528, 22545,
    22553, 22628, 22848, 23048, 24580, 24592, 24640, 24680, 24832, 24917, 25112, 25184, 25600, 25605, 25872, 25874,
    25988, 26690, 32768, 32770, 32778, 32833, 32898, 33028, 33048, 33088, 33297, 33793, 33796, 33808, 33813, 33856,
    33888, 34048, 34118, 34196, 34313, 34368, 34400, 34818, 35076, 35345, 36868, 36880, 36900, 36928, 37025, 37142,
    37248, 37445, 37888, 37922, 37956, 38225, 39041, 39200, 40962, 41040, 41093, 41225, 41472, 42008, 43088, 43268,
};

namespace detail {
constexpr std::array<uint64_t, 256> decode_iq2xxs_grid() {
  std::array<uint64_t, 256> grid{};
  for (int k = 0; k < 256; ++k) {
    uint64_t v = 0;
    for (int j = 0; j < 8; ++j) {
      const int level = (kIq2xxsCompactGrid[k] >> (2 * j)) & 3;
      v |= static_cast<uint64_t>(kIq2xxsLevelBytes[level]) << (8 * j);
    }
    grid[k] = v;
  }
  return grid;
}
constexpr std::array<uint8_t, 128> make_even_signs() {
  std::array<uint8_t, 128> signs{};
  for (int i = 0; i < 128; ++i) {
    int ones = 0;
    for (int b = 0; b < 7; ++b) ones += (i >> b) & 1;
    signs[i] = static_cast<uint8_t>(i | ((ones & 1) << 7));
  }
  return signs;
}
}  // namespace detail

// ggml's iq2xxs_grid.
inline constexpr std::array<uint64_t, 256> kIq2xxsGrid = detail::decode_iq2xxs_grid();
// ggml's ksigns_iq2xs: bit j set => negate element j of the group.
inline constexpr std::array<uint8_t, 128> kIq2xsSigns = detail::make_even_signs();
// ggml's kmask_iq2xs.
inline constexpr std::array<uint8_t, 8> kIq2xsSignMask = {1, 2, 4, 8, 16, 32, 64, 128};

// Spot checks against entries of ggml's published tables.
static_assert(kIq2xxsGrid[0] == 0x0808080808080808ull);
static_assert(kIq2xxsGrid[1] == 0x080808080808082bull);
static_assert(kIq2xxsGrid[100] == 0x08192b0808081908ull);
static_assert(kIq2xxsGrid[255] == 0x2b2b2b1908081908ull);
static_assert(kIq2xsSigns[1] == 129 && kIq2xsSigns[3] == 3 && kIq2xsSigns[127] == 255);

// Byte j (0..7) of grid point `index`.
constexpr uint8_t iq2xxs_grid_byte(int index, int j) {
  return static_cast<uint8_t>(kIq2xxsGrid[index] >> (8 * j));
}

}  // namespace ds4::quant
