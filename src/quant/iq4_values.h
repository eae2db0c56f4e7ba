// The 16 non-linear values IQ4_NL and IQ4_XS index (ggml's kvalues_iq4nl,
// format data), ascending.
#pragma once

#include <array>
#include <cstdint>

namespace ds4::quant {

inline constexpr std::array<int8_t, 16> kIq4nlValues = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace ds4::quant
