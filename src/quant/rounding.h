// Float -> int rounding used by the reference quantizers.
#pragma once

#include <bit>
#include <cstdint>

namespace ds4::quant {

// Round to nearest, ties to even, by adding 1.5*2^23 so the FPU rounds into
// the mantissa (ggml's nearest_int). Valid for |x| <= 4194303; outside that
// range it returns the same deterministic value ggml's trick does.
inline int nearest_int(float x) {
  const float shifted = x + 12582912.f;
  const int32_t bits = std::bit_cast<int32_t>(shifted);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace ds4::quant

namespace ds4::quant {

// An already-rounded value stored as an int8 code. Callers guarantee the
// range for finite inputs; NaN (from non-finite inputs) becomes 0, as the
// x86 float->int conversion ggml compiles to yields for it.
inline int8_t to_code_i8(float rounded) {
  if (!(rounded >= -128.0f && rounded <= 127.0f)) return 0;
  return static_cast<int8_t>(rounded);
}

}  // namespace ds4::quant
