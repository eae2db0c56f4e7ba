// Every dot-kernel ISA level this CPU runs (dot_kernels_available()) against
// two truths:
//  - the scalar reference: integer formats must match it bit for bit (the
//    SIMD levels form the same integer sums and apply the float scales in
//    the same order);
//  - an independent double-precision evaluation of the format definitions
//    (SYSTEMS.md 1.3), decoded here without the library's dequantizers:
//    every level must be within accumulated float rounding of it.
// Inputs cover odd block counts, misaligned block arrays, every code value and
// the extreme activations -128/127.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"

namespace ds4::quant {
namespace {

using Rng = std::mt19937_64;

std::vector<const DotKernels*> levels() { return dot_kernels_available(); }

bool is_scalar(const DotKernels& k) { return std::string(k.isa) == "scalar"; }

// Bitwise equality, with any NaN equal to any NaN (payloads may differ).
::testing::AssertionResult same_float(float ours, float ref) {
  if (std::isnan(ours) && std::isnan(ref)) return ::testing::AssertionSuccess();
  if (std::bit_cast<uint32_t>(ours) == std::bit_cast<uint32_t>(ref)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << ours << " (0x" << std::hex << std::bit_cast<uint32_t>(ours)
                                       << "), scalar reference " << ref << " (0x" << std::bit_cast<uint32_t>(ref)
                                       << ")";
}

// Storage for `count` objects of T starting `offset` bytes past a 64-byte
// boundary, so the arrays are deliberately not vector-aligned. Offsets stay
// multiples of alignof(T): anything else is undefined behaviour for the
// uint16_t/float fields (and trips UBSan), while the kernels' vector loads
// see the same misalignment either way.
template <typename T>
class Placed {
 public:
  Placed(size_t count, size_t offset) : bytes_(count * sizeof(T) + 128) {
    const auto base = reinterpret_cast<uintptr_t>(bytes_.data());
    const uintptr_t aligned = (base + 63) & ~uintptr_t{63};
    ptr_ = reinterpret_cast<T*>(aligned + offset);
  }
  T* data() { return ptr_; }
  T& operator[](size_t i) { return ptr_[i]; }

 private:
  std::vector<unsigned char> bytes_;
  T* ptr_;
};

template <typename T>
std::vector<size_t> offsets_for() {
  if (alignof(T) == 1) return {0, 1, 3, 17};
  return {0, alignof(T), 3 * alignof(T)};
}

// ---- Random inputs ----

int8_t random_code(Rng& rng) { return static_cast<int8_t>(std::uniform_int_distribution<int>(-128, 127)(rng)); }

// Codes of one activation/weight block: mostly uniform, sometimes pinned to
// the extremes (all -128, all 127, alternating) that break sign tricks.
void fill_codes(int8_t* q, int count, Rng& rng) {
  const int mode = std::uniform_int_distribution<int>(0, 9)(rng);
  for (int j = 0; j < count; ++j) {
    switch (mode) {
      case 0: q[j] = -128; break;
      case 1: q[j] = 127; break;
      case 2: q[j] = (j & 1) ? int8_t{127} : int8_t{-128}; break;
      default: q[j] = random_code(rng); break;
    }
  }
}

// A finite f16 scale: normal values across a wide exponent range, sometimes
// subnormal, zero or negative.
uint16_t random_f16_scale(Rng& rng) {
  const int kind = std::uniform_int_distribution<int>(0, 19)(rng);
  if (kind == 0) return 0;
  if (kind == 1) return static_cast<uint16_t>(std::uniform_int_distribution<int>(1, 0x3ff)(rng));  // subnormal
  const float mag = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                               std::uniform_int_distribution<int>(-14, 8)(rng));
  return f32_to_f16(kind == 2 ? -mag : mag);
}

float random_act_scale(Rng& rng) {
  return std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng),
                    std::uniform_int_distribution<int>(-12, 4)(rng));
}

// Any f16 bit pattern except NaN (inf allowed).
uint16_t random_f16_any(Rng& rng) {
  uint16_t h;
  do {
    h = static_cast<uint16_t>(rng());
  } while ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
  return h;
}

uint8_t random_byte(Rng& rng) { return static_cast<uint8_t>(rng()); }

void fill_q8_0(BlockQ8_0& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  fill_codes(b.qs, kQK8_0, rng);
}

void fill_q8_K(BlockQ8_K& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0xff7fffffu) : random_act_scale(rng);
  fill_codes(b.qs, kQK_K, rng);
  for (int g = 0; g < kQK_K / 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += b.qs[16 * g + j];
    b.bsums[g] = static_cast<int16_t>(s);
  }
}

void fill_q2_K(BlockQ2_K& b, Rng& rng, bool extreme_scale = false) {
  for (uint8_t& s : b.scales) s = random_byte(rng);
  for (uint8_t& q : b.qs) q = random_byte(rng);
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  b.dmin = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
}

void fill_q4_K(BlockQ4_K& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  b.dmin = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  for (uint8_t& s : b.scales) s = random_byte(rng);
  // Occasionally all-maximal codes and scales.
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0xff} : random_byte(rng);
  if (saturate) std::memset(b.scales, 0xff, sizeof(b.scales));
}

void fill_q6_K(BlockQ6_K& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  // Occasionally every code 63 and every scale -128 or 127 (the largest sums).
  const int saturate = std::uniform_int_distribution<int>(0, 7)(rng);
  for (int8_t& s : b.scales) s = saturate == 0 ? int8_t{-128} : saturate == 1 ? int8_t{127} : static_cast<int8_t>(rng());
  for (uint8_t& q : b.ql) q = saturate < 2 ? uint8_t{0xff} : random_byte(rng);
  for (uint8_t& q : b.qh) q = saturate < 2 ? uint8_t{0xff} : random_byte(rng);
}

void fill_q3_K(BlockQ3_K& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  // Occasionally every code and scale at one end (values -4 / 3, scales -32 / 31).
  const int saturate = std::uniform_int_distribution<int>(0, 7)(rng);
  const uint8_t fixed = saturate == 0 ? uint8_t{0x00} : uint8_t{0xff};
  for (uint8_t& q : b.hmask) q = saturate < 2 ? fixed : random_byte(rng);
  for (uint8_t& q : b.qs) q = saturate < 2 ? fixed : random_byte(rng);
  for (uint8_t& s : b.scales) s = saturate < 2 ? fixed : random_byte(rng);
}

void fill_q5_K(BlockQ5_K& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  b.dmin = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  for (uint8_t& s : b.scales) s = random_byte(rng);
  // Occasionally all-maximal codes (31) and scales.
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0xff} : random_byte(rng);
  for (uint8_t& q : b.qh) q = saturate ? uint8_t{0xff} : random_byte(rng);
  if (saturate) std::memset(b.scales, 0xff, sizeof(b.scales));
}

void fill_iq4_nl(BlockIQ4_NL& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  // Occasionally every index 0 (value -127, the largest magnitude).
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0} : random_byte(rng);
}

void fill_iq4_xs(BlockIQ4_XS& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  // Occasionally every index 0 and every scale code 0 (ls - 32 = -32).
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  b.scales_h = saturate ? uint16_t{0} : static_cast<uint16_t>(rng());
  for (uint8_t& s : b.scales_l) s = saturate ? uint8_t{0} : random_byte(rng);
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0} : random_byte(rng);
}

void fill_iq2_xxs(BlockIQ2_XXS& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  for (uint16_t& q : b.qs) q = static_cast<uint16_t>(rng());
}

void fill_iq2_xs(BlockIQ2_XS& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  for (uint16_t& q : b.qs) q = static_cast<uint16_t>(rng());
  for (uint8_t& s : b.scales) s = random_byte(rng);
}

void fill_iq1_m(BlockIQ1_M& b, Rng& rng, bool extreme_scale = false) {
  for (uint8_t& q : b.qs) q = random_byte(rng);
  for (uint8_t& q : b.qh) q = random_byte(rng);
  for (uint8_t& s : b.scales) s = random_byte(rng);
  // The f16 super-block scale lives in the top nibble of each scale word.
  const uint16_t d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  for (int k = 0; k < 4; ++k) b.scales[2 * k + 1] = static_cast<uint8_t>((b.scales[2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 15) << 4));
}

void fill_iq1_s(BlockIQ1_S& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  for (uint8_t& q : b.qs) q = random_byte(rng);
  for (uint16_t& h : b.qh) h = static_cast<uint16_t>(rng());
}

void fill_iq3_xxs(BlockIQ3_XXS& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  // Occasionally every magnitude 62 and every scale 15 (the largest sums).
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0xff} : random_byte(rng);
}

void fill_iq3_s(BlockIQ3_S& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0xff} : random_byte(rng);
  for (uint8_t& q : b.qh) q = saturate ? uint8_t{0xff} : random_byte(rng);
  for (uint8_t& q : b.signs) q = random_byte(rng);
  for (uint8_t& q : b.scales) q = saturate ? uint8_t{0xff} : random_byte(rng);
}

void fill_iq2_s(BlockIQ2_S& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  // Occasionally every index 1023 (all magnitudes 43) and every scale 15.
  const bool saturate = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  for (uint8_t& q : b.qs) q = saturate ? uint8_t{0xff} : random_byte(rng);
  for (uint8_t& q : b.qh) q = saturate ? uint8_t{0xff} : random_byte(rng);
  for (uint8_t& q : b.signs) q = random_byte(rng);
  for (uint8_t& q : b.scales) q = saturate ? uint8_t{0xff} : random_byte(rng);
}

void fill_mxfp4(BlockMXFP4& b, Rng& rng, bool extreme_scale = false) {
  b.e = extreme_scale ? random_byte(rng) : static_cast<uint8_t>(std::uniform_int_distribution<int>(107, 147)(rng));
  for (uint8_t& q : b.qs) q = random_byte(rng);
}

// Q8_1: Q8_0's codes and scale, s = f16(d * sum of the codes) as ggml stores it.
void fill_q8_1(BlockQ8_1& b, Rng& rng, bool extreme_scale = false) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  fill_codes(b.qs, kQK8_1, rng);
  int sum = 0;
  for (int8_t q : b.qs) sum += q;
  if (extreme_scale) {
    b.s = random_f16_any(rng);
    return;
  }
  // A real block has |d * sum| <= 32 * amax: keep s finite (smaller d).
  for (;;) {
    b.s = f32_to_f16(f16_to_f32(b.d) * static_cast<float>(sum));
    if (std::isfinite(f16_to_f32(b.s))) break;
    b.d = f32_to_f16(f16_to_f32(b.d) / 64);
  }
}

// The 32-element weight formats: random nibbles and high bits, sometimes all
// codes at their maximum (15 or 31), sometimes all zero.
template <typename Block>
void fill_legacy(Block& b, Rng& rng, bool extreme_scale) {
  b.d = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  if constexpr (requires { b.m; }) b.m = extreme_scale ? random_f16_any(rng) : random_f16_scale(rng);
  const int mode = std::uniform_int_distribution<int>(0, 7)(rng);
  const uint8_t fixed = mode == 0 ? uint8_t{0xff} : uint8_t{0};
  for (uint8_t& q : b.qs) q = mode < 2 ? fixed : random_byte(rng);
  if constexpr (requires { b.qh; }) {
    for (uint8_t& q : b.qh) q = mode < 2 ? fixed : random_byte(rng);
  }
}
void fill_q4_0(BlockQ4_0& b, Rng& rng, bool extreme_scale = false) { fill_legacy(b, rng, extreme_scale); }
void fill_q4_1(BlockQ4_1& b, Rng& rng, bool extreme_scale = false) { fill_legacy(b, rng, extreme_scale); }
void fill_q5_0(BlockQ5_0& b, Rng& rng, bool extreme_scale = false) { fill_legacy(b, rng, extreme_scale); }
void fill_q5_1(BlockQ5_1& b, Rng& rng, bool extreme_scale = false) { fill_legacy(b, rng, extreme_scale); }

// ---- Independent decoding (SYSTEMS.md 1.3), in double ----
//
// Each weight is split into a positive-scale part and a min part, w = a - b,
// so the error bound can be taken relative to sum(|a x| + |b x|), the size
// of the terms the kernels actually round.

struct Truth {
  double value = 0;
  double magnitude = 0;
  void add(double a, double b, double x) {
    value += (a - b) * x;
    magnitude += (std::fabs(a) + std::fabs(b)) * std::fabs(x);
  }
};

double f16d(uint16_t h) { return static_cast<double>(f16_to_f32(h)); }

double act(const BlockQ8_0& b, int j) { return f16d(b.d) * b.qs[j]; }
double act(const BlockQ8_K& b, int j) { return static_cast<double>(b.d) * b.qs[j]; }
double act(const BlockQ8_1& b, int j) { return f16d(b.d) * b.qs[j]; }

// Code of element e (0..31) of a 32-element block (ggml's block_q4_0 ...
// block_q5_1): low nibble of qs[e] for e < 16, high nibble of qs[e - 16]
// otherwise; bit 4 is bit e of the little-endian word qh, when there is one.
template <typename Block>
int legacy_code(const Block& b, int e) {
  int q = e < 16 ? (b.qs[e] & 15) : (b.qs[e - 16] >> 4);
  if constexpr (requires { b.qh; }) {
    uint32_t qh = 0;
    for (int k = 0; k < 4; ++k) qh |= static_cast<uint32_t>(b.qh[k]) << (8 * k);
    q |= static_cast<int>((qh >> e) & 1) << 4;
  }
  return q;
}

// Q4_0 / Q5_0: d * (q - offset) against Q8_0.
template <typename Block, int kOffset>
Truth truth_legacy_q8_0(int64_t nb, const Block* w, const BlockQ8_0* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i)
    for (int e = 0; e < 32; ++e) t.add(f16d(w[i].d) * (legacy_code(w[i], e) - kOffset), 0, act(x[i], e));
  return t;
}

// Q4_1 / Q5_1: d * q + m against Q8_1, whose s stands for d_x * sum of its
// codes (so the offset term is m * s, as ggml defines the product).
template <typename Block>
Truth truth_legacy_q8_1(int64_t nb, const Block* w, const BlockQ8_1* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < 32; ++e) t.add(f16d(w[i].d) * legacy_code(w[i], e), 0, act(x[i], e));
    t.add(f16d(w[i].m), 0, f16d(x[i].s));
  }
  return t;
}

Truth truth_q8_0(int64_t nb, const BlockQ8_0* w, const BlockQ8_0* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK8_0; ++j) t.add(f16d(w[i].d) * w[i].qs[j], 0, act(x[i], j));
  return t;
}

Truth truth_q2_K(int64_t nb, const BlockQ2_K* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int half = e / 128, plane = (e % 128) / 32, within = e % 32;
      const int code = (w[i].qs[32 * half + within] >> (2 * plane)) & 3;
      const uint8_t s = w[i].scales[e / 16];
      t.add(f16d(w[i].d) * (s & 15) * code, f16d(w[i].dmin) * (s >> 4), act(x[i], e));
    }
  }
  return t;
}

// Q6_K from its layout (SYSTEMS.md / ggml's block_q6_K): element 128h + 32k + l
// has its low nibble in ql[64h + l + 32(k % 2)] (low half for k < 2), its top
// two bits at 2k of qh[32h + l]; value d * scales[e / 16] * (q - 32).
Truth truth_q6_K(int64_t nb, const BlockQ6_K* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t lo = w[i].ql[64 * h + l + 32 * (k % 2)];
      const int q = (k < 2 ? lo & 15 : lo >> 4) | (((w[i].qh[32 * h + l] >> (2 * k)) & 3) << 4);
      t.add(f16d(w[i].d) * w[i].scales[e / 16] * (q - 32), 0, act(x[i], e));
    }
  }
  return t;
}

Truth truth_q4_K(int64_t nb, const BlockQ4_K* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = w[i].scales;
    for (int e = 0; e < kQK_K; ++e) {
      const int sub = e / 32, chunk = e / 64, within = e % 32;
      const int sc = sub < 4 ? (p[sub] & 63) : ((p[sub + 4] & 15) | ((p[sub - 4] >> 6) << 4));
      const int m = sub < 4 ? (p[sub + 4] & 63) : ((p[sub + 4] >> 4) | ((p[sub] >> 6) << 4));
      const uint8_t byte = w[i].qs[32 * chunk + within];
      const int code = (sub % 2 == 0) ? (byte & 15) : (byte >> 4);
      t.add(f16d(w[i].d) * sc * code, f16d(w[i].dmin) * m, act(x[i], e));
    }
  }
  return t;
}

// Q3_K from its layout (ggml's block_q3_K): element 128h + 32k + l has its low
// two bits at 2k of qs[32h + l] and its third bit at bit e/32 of hmask[l];
// value d * (sc - 32) * (q - 4), scale j's low nibble in scales[j % 8] (high
// nibble for j >= 8), its top two bits at 2(j/4) of scales[8 + j % 4].
Truth truth_q3_K(int64_t nb, const BlockQ3_K* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32, j = e / 16;
      const int q = ((w[i].qs[32 * h + l] >> (2 * k)) & 3) | (((w[i].hmask[l] >> (e / 32)) & 1) << 2);
      const int low = j < 8 ? (w[i].scales[j] & 15) : (w[i].scales[j - 8] >> 4);
      const int sc = low | (((w[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
      t.add(f16d(w[i].d) * (sc - 32) * (q - 4), 0, act(x[i], e));
    }
  }
  return t;
}

// Q5_K: Q4_K's nibbles and scales, plus the fifth bit of element 32s + l at
// bit s of qh[l].
Truth truth_q5_K(int64_t nb, const BlockQ5_K* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p = w[i].scales;
    for (int e = 0; e < kQK_K; ++e) {
      const int sub = e / 32, chunk = e / 64, within = e % 32;
      const int sc = sub < 4 ? (p[sub] & 63) : ((p[sub + 4] & 15) | ((p[sub - 4] >> 6) << 4));
      const int m = sub < 4 ? (p[sub + 4] & 63) : ((p[sub + 4] >> 4) | ((p[sub] >> 6) << 4));
      const uint8_t byte = w[i].qs[32 * chunk + within];
      const int code = ((sub % 2 == 0) ? (byte & 15) : (byte >> 4)) + 16 * ((w[i].qh[within] >> sub) & 1);
      t.add(f16d(w[i].d) * sc * code, f16d(w[i].dmin) * m, act(x[i], e));
    }
  }
  return t;
}

// ggml's kvalues_iq4nl, the table IQ4_NL / IQ4_XS index.
constexpr int kIq4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL: element j < 16 indexes by the low nibble of qs[j], j >= 16 by the
// high nibble of qs[j - 16]; value d * table[q].
Truth truth_iq4_nl(int64_t nb, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < 32; ++e) {
      const int q = e < 16 ? (w[i].qs[e] & 15) : (w[i].qs[e - 16] >> 4);
      t.add(f16d(w[i].d) * kIq4Table[q], 0, act(x[i], e));
    }
  }
  return t;
}

// IQ4_XS: sub-block s (32 elements) as IQ4_NL over qs[16s..16s+15], scale
// d * (ls - 32) with ls's low nibble in scales_l[s / 2] (high nibble for odd
// s) and its top two bits at 2s of scales_h.
Truth truth_iq4_xs(int64_t nb, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int s = e / 32, j = e % 32;
      const int ls = ((w[i].scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((w[i].scales_h >> (2 * s)) & 3) << 4);
      const uint8_t byte = w[i].qs[16 * s + (j % 16)];
      const int q = j < 16 ? (byte & 15) : (byte >> 4);
      t.add(f16d(w[i].d) * (ls - 32) * kIq4Table[q], 0, act(x[i], e));
    }
  }
  return t;
}

Truth truth_iq2_xxs(int64_t nb, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int sub = 0; sub < 8; ++sub) {
      uint32_t w0, w1;
      std::memcpy(&w0, &w[i].qs[4 * sub], 4);
      std::memcpy(&w1, &w[i].qs[4 * sub + 2], 4);
      const double scale = f16d(w[i].d) * (0.5 + (w1 >> 28)) * 0.25;
      for (int g = 0; g < 4; ++g) {
        const uint64_t entry = kIq2xxsGrid[(w0 >> (8 * g)) & 255];
        uint32_t sign_bits = (w1 >> (7 * g)) & 127;
        sign_bits |= static_cast<uint32_t>(std::popcount(sign_bits) & 1) << 7;  // even number of negatives
        for (int j = 0; j < 8; ++j) {
          const double mag = static_cast<double>((entry >> (8 * j)) & 255);
          const double v = ((sign_bits >> j) & 1) ? -mag : mag;
          t.add(scale * v, 0, act(x[i], 32 * sub + 8 * g + j));
        }
      }
    }
  }
  return t;
}

// IQ2_XS: group g of 8 (0..31) is word qs[g]: grid point (bits 0-8), 7 sign
// bits (9-15) plus parity; its 16-value half h = g / 2 has the 4-bit scale
// nibble h % 2 of byte h / 2, value d * (0.5 + scale) / 4.
Truth truth_iq2_xs(int64_t nb, const BlockIQ2_XS* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int g = 0; g < 32; ++g) {
      const int h = g / 2;
      const int nibble = (w[i].scales[h / 2] >> (4 * (h % 2))) & 15;
      const double scale = f16d(w[i].d) * (0.5 + nibble) * 0.25;
      const uint64_t entry = kIq2xsGrid[w[i].qs[g] & 511];
      uint32_t sign_bits = w[i].qs[g] >> 9;
      sign_bits |= static_cast<uint32_t>(std::popcount(sign_bits) & 1) << 7;  // even number of negatives
      for (int j = 0; j < 8; ++j) {
        const double mag = static_cast<double>((entry >> (8 * j)) & 255);
        const double v = ((sign_bits >> j) & 1) ? -mag : mag;
        t.add(scale * v, 0, act(x[i], 8 * g + j));
      }
    }
  }
  return t;
}

// IQ3_XXS from its layout: group g (4 elements) of the block is grid point
// qs[g]; sub-block s has the uint32 at qs[64 + 4s]: 7 sign bits per 8
// elements (the 8th makes the count of negatives even), scale in bits 28-31;
// value d * (0.5 + scale) * 0.5 * grid byte * sign.
Truth truth_iq3_xxs(int64_t nb, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int sub = e / 32, eight = (e % 32) / 8;
      uint32_t aux;
      std::memcpy(&aux, &w[i].qs[64 + 4 * sub], 4);
      const double scale = f16d(w[i].d) * (0.5 + (aux >> 28)) * 0.5;
      uint32_t sign_bits = (aux >> (7 * eight)) & 127;
      sign_bits |= static_cast<uint32_t>(std::popcount(sign_bits) & 1) << 7;
      const double mag = static_cast<double>((kIq3xxsGrid[w[i].qs[e / 4]] >> (8 * (e % 4))) & 255);
      t.add(scale * (((sign_bits >> (e % 8)) & 1) ? -mag : mag), 0, act(x[i], e));
    }
  }
  return t;
}

// IQ1_M: group g of 8 has grid index qs[g] | bits of nibble g % 2 of
// qh[g / 2] (bits 0-2 high index bits, bit 3 a -1/8 shift, else +1/8); the
// 16-value half h has 3-bit scale field h % 4 of scale word h / 4, value
// d * (2 s + 1); d is the f16 made of the words' top nibbles.
Truth truth_iq1_m(int64_t nb, const BlockIQ1_M* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t sc[4];
    for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(w[i].scales[2 * k] | (w[i].scales[2 * k + 1] << 8));
    uint16_t dbits = 0;
    for (int k = 0; k < 4; ++k) dbits = static_cast<uint16_t>(dbits | ((sc[k] >> 12) << (4 * k)));
    const double d = f16d(dbits);
    for (int g = 0; g < 32; ++g) {
      const int h = g / 2;
      const int nibble = (w[i].qh[g / 2] >> (4 * (g % 2))) & 15;
      const int index = w[i].qs[g] | ((nibble & 7) << 8);
      const double shift = (nibble & 8) ? -0.125 : 0.125;
      const double scale = d * (2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) + 1);
      for (int j = 0; j < 8; ++j) {
        const double v = static_cast<int8_t>(kIq1Grid[static_cast<size_t>(index)] >> (8 * j));
        t.add(scale * (v + shift), 0, act(x[i], 8 * g + j));
      }
    }
  }
  return t;
}

// IQ1_S: sub-block b of 32 has word qh[b]: high index bits of group g at
// bits 3g..3g+2, scale s at 12-14 (value d * (2 s + 1)), bit 15 a -1/8 shift
// (else +1/8).
Truth truth_iq1_s(int64_t nb, const BlockIQ1_S* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int b = 0; b < 8; ++b) {
      const uint16_t h = w[i].qh[b];
      const double scale = f16d(w[i].d) * (2 * ((h >> 12) & 7) + 1);
      const double shift = (h & 0x8000) ? -0.125 : 0.125;
      for (int g = 0; g < 4; ++g) {
        const int index = w[i].qs[4 * b + g] | (((h >> (3 * g)) & 7) << 8);
        for (int j = 0; j < 8; ++j) {
          const double v = static_cast<int8_t>(kIq1Grid[static_cast<size_t>(index)] >> (8 * j));
          t.add(scale * (v + shift), 0, act(x[i], 32 * b + 8 * g + j));
        }
      }
    }
  }
  return t;
}

// IQ3_S from its layout: group g is grid point qs[g] + 256 * bit (g % 8) of
// qh[g / 8]; element e is negated by bit e % 8 of signs[e / 8]; sub-block s
// has scale nibble s % 2 of scales[s / 2]; value d * (1 + 2 scale) * grid byte.
Truth truth_iq3_s(int64_t nb, const BlockIQ3_S* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int e = 0; e < kQK_K; ++e) {
      const int g = e / 4, sub = e / 32;
      const int index = w[i].qs[g] + 256 * ((w[i].qh[g / 8] >> (g % 8)) & 1);
      const int nibble = (w[i].scales[sub / 2] >> (4 * (sub % 2))) & 15;
      const double scale = f16d(w[i].d) * (1 + 2 * nibble);
      const double mag = static_cast<double>((kIq3sGrid[index] >> (8 * (e % 4))) & 255);
      t.add(scale * (((w[i].signs[e / 8] >> (e % 8)) & 1) ? -mag : mag), 0, act(x[i], e));
    }
  }
  return t;
}

// IQ2_S from its layout: group g of 8 (0..31) is grid point qs[g] + 256 *
// bits 2 (g % 4) .. 2 (g % 4) + 1 of qh[g / 4]; element j of the group is
// negated by bit j of signs[g]; its 16-value half h = g / 2 has the 4-bit
// scale nibble h % 2 of byte h / 2, value d * (0.5 + scale) / 4.
Truth truth_iq2_s(int64_t nb, const BlockIQ2_S* w, const BlockQ8_K* x) {
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    for (int g = 0; g < 32; ++g) {
      const int h = g / 2;
      const int nibble = (w[i].scales[h / 2] >> (4 * (h % 2))) & 15;
      const double scale = f16d(w[i].d) * (0.5 + nibble) * 0.25;
      const int index = w[i].qs[g] + 256 * ((w[i].qh[g / 4] >> (2 * (g % 4))) & 3);
      const uint64_t entry = kIq2sGrid[static_cast<size_t>(index)];
      for (int j = 0; j < 8; ++j) {
        const double mag = static_cast<double>((entry >> (8 * j)) & 255);
        const double v = ((w[i].signs[g] >> j) & 1) ? -mag : mag;
        t.add(scale * v, 0, act(x[i], 8 * g + j));
      }
    }
  }
  return t;
}

Truth truth_mxfp4(int64_t nb, const BlockMXFP4* w, const BlockQ8_0* x) {
  static const double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  Truth t;
  for (int64_t i = 0; i < nb; ++i) {
    const double scale = std::ldexp(1.0, w[i].e - 127);
    for (int e = 0; e < kQKMxfp4; ++e) {
      const int code = e < 16 ? (w[i].qs[e] & 15) : (w[i].qs[e - 16] >> 4);
      const double v = (code & 8) ? -kE2M1[code & 7] : kE2M1[code & 7];
      t.add(scale * v, 0, act(x[i], e));
    }
  }
  return t;
}

// Per block the kernels round a few scale products and one accumulation
// step; the running sum adds one rounding per block.
::testing::AssertionResult near_truth(float got, const Truth& t, int64_t blocks) {
  const double bound = static_cast<double>(blocks + 8) * std::ldexp(1.0, -22) * t.magnitude;
  const double err = std::fabs(static_cast<double>(got) - t.value);
  if (err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", exact " << t.value << ", error " << err << " > bound "
                                       << bound;
}

// ---- Integer-format driver ----

template <typename W, typename X>
struct Format {
  using Kernel = float (*)(int64_t, const W*, const X*);
  const char* name;
  int block_elems;
  Kernel DotKernels::*kernel;
  void (*fill_w)(W&, Rng&, bool);
  void (*fill_x)(X&, Rng&, bool);
  Truth (*truth)(int64_t, const W*, const X*);
};

const Format<BlockQ8_0, BlockQ8_0> kQ8_0{"q8_0", kQK8_0, &DotKernels::q8_0_q8_0, fill_q8_0, fill_q8_0, truth_q8_0};
const Format<BlockQ2_K, BlockQ8_K> kQ2_K{"q2_K", kQK_K, &DotKernels::q2_K_q8_K, fill_q2_K, fill_q8_K, truth_q2_K};
const Format<BlockQ4_K, BlockQ8_K> kQ4_K{"q4_K", kQK_K, &DotKernels::q4_K_q8_K, fill_q4_K, fill_q8_K, truth_q4_K};
const Format<BlockQ6_K, BlockQ8_K> kQ6_K{"q6_K", kQK_K, &DotKernels::q6_K_q8_K, fill_q6_K, fill_q8_K, truth_q6_K};
const Format<BlockQ4_0, BlockQ8_0> kQ4_0{"q4_0", kQK4_0, &DotKernels::q4_0_q8_0, fill_q4_0, fill_q8_0,
                                         truth_legacy_q8_0<BlockQ4_0, 8>};
const Format<BlockQ5_0, BlockQ8_0> kQ5_0{"q5_0", kQK5_0, &DotKernels::q5_0_q8_0, fill_q5_0, fill_q8_0,
                                         truth_legacy_q8_0<BlockQ5_0, 16>};
const Format<BlockQ4_1, BlockQ8_1> kQ4_1{"q4_1", kQK4_1, &DotKernels::q4_1_q8_1, fill_q4_1, fill_q8_1,
                                         truth_legacy_q8_1<BlockQ4_1>};
const Format<BlockQ5_1, BlockQ8_1> kQ5_1{"q5_1", kQK5_1, &DotKernels::q5_1_q8_1, fill_q5_1, fill_q8_1,
                                         truth_legacy_q8_1<BlockQ5_1>};
const Format<BlockIQ2_XXS, BlockQ8_K> kIq2Xxs{"iq2_xxs", kQK_K, &DotKernels::iq2_xxs_q8_K, fill_iq2_xxs, fill_q8_K,
                                              truth_iq2_xxs};
const Format<BlockIQ2_XS, BlockQ8_K> kIq2Xs{"iq2_xs", kQK_K, &DotKernels::iq2_xs_q8_K, fill_iq2_xs, fill_q8_K,
                                            truth_iq2_xs};
const Format<BlockIQ1_M, BlockQ8_K> kIq1M{"iq1_m", kQK_K, &DotKernels::iq1_m_q8_K, fill_iq1_m, fill_q8_K, truth_iq1_m};
const Format<BlockIQ1_S, BlockQ8_K> kIq1S{"iq1_s", kQK_K, &DotKernels::iq1_s_q8_K, fill_iq1_s, fill_q8_K, truth_iq1_s};
const Format<BlockIQ3_XXS, BlockQ8_K> kIq3Xxs{"iq3_xxs", kQK_K, &DotKernels::iq3_xxs_q8_K, fill_iq3_xxs, fill_q8_K,
                                              truth_iq3_xxs};
const Format<BlockIQ3_S, BlockQ8_K> kIq3S{"iq3_s", kQK_K, &DotKernels::iq3_s_q8_K, fill_iq3_s, fill_q8_K, truth_iq3_s};
const Format<BlockIQ2_S, BlockQ8_K> kIq2S{"iq2_s", kQK_K, &DotKernels::iq2_s_q8_K, fill_iq2_s, fill_q8_K, truth_iq2_s};
const Format<BlockMXFP4, BlockQ8_0> kMxfp4{"mxfp4", kQKMxfp4, &DotKernels::mxfp4_q8_0, fill_mxfp4, fill_q8_0,
                                           truth_mxfp4};
const Format<BlockQ3_K, BlockQ8_K> kQ3_K{"q3_K", kQK_K, &DotKernels::q3_K_q8_K, fill_q3_K, fill_q8_K, truth_q3_K};
const Format<BlockQ5_K, BlockQ8_K> kQ5_K{"q5_K", kQK_K, &DotKernels::q5_K_q8_K, fill_q5_K, fill_q8_K, truth_q5_K};
const Format<BlockIQ4_NL, BlockQ8_0> kIq4Nl{"iq4_nl", kQK8_0, &DotKernels::iq4_nl_q8_0, fill_iq4_nl, fill_q8_0,
                                            truth_iq4_nl};
const Format<BlockIQ4_XS, BlockQ8_K> kIq4Xs{"iq4_xs", kQK_K, &DotKernels::iq4_xs_q8_K, fill_iq4_xs, fill_q8_K,
                                            truth_iq4_xs};

// Block counts: odd ones, and ones around the 4- and 16-block groups the
// 32-element kernels batch and the 8-block group K-quant rows end with.
const int64_t kBlockCounts[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 33, 47};

template <typename W, typename X>
void check_format(const Format<W, X>& f, int seeds, bool extreme_scales) {
  for (int64_t nb : kBlockCounts) {
    for (size_t w_off : offsets_for<W>()) {
      for (size_t x_off : offsets_for<X>()) {
        for (int seed = 0; seed < seeds; ++seed) {
          Rng rng(static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(nb) * 131u + w_off * 7 + x_off);
          Placed<W> w(static_cast<size_t>(nb), w_off);
          Placed<X> x(static_cast<size_t>(nb), x_off);
          for (int64_t i = 0; i < nb; ++i) {
            f.fill_w(w[static_cast<size_t>(i)], rng, extreme_scales);
            f.fill_x(x[static_cast<size_t>(i)], rng, extreme_scales);
          }
          const int64_t n = nb * f.block_elems;
          const float ref = (dot_kernels_scalar().*f.kernel)(n, w.data(), x.data());
          const Truth truth = extreme_scales ? Truth{} : f.truth(nb, w.data(), x.data());
          for (const DotKernels* k : levels()) {
            SCOPED_TRACE(::testing::Message() << f.name << " isa=" << k->isa << " blocks=" << nb << " w_off=" << w_off
                                              << " x_off=" << x_off << " seed=" << seed);
            const float got = (k->*f.kernel)(n, w.data(), x.data());
            ASSERT_TRUE(same_float(got, ref));
            if (!extreme_scales) {
              ASSERT_TRUE(near_truth(got, truth, nb));
            }
          }
        }
      }
    }
  }
}

TEST(DotKernelLevels, ListsScalarFirstAndEveryLevelTheCpuRuns) {
  const auto available = levels();
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(available.front(), &dot_kernels_scalar());
  auto has = [&](const char* isa) {
    return std::any_of(available.begin(), available.end(),
                       [&](const DotKernels* k) { return std::string(k->isa) == isa; });
  };
  const CpuFeatures& cpu = cpu_features();
  const bool avx2 = cpu.avx2 && cpu.fma && cpu.f16c && cpu.bmi2;
  const bool avx512 = avx2 && cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq;
  EXPECT_EQ(has("avx2"), avx2);
  EXPECT_EQ(has("avx512"), avx512);
  EXPECT_EQ(has("avx512vnni"), avx512 && cpu.avx512vnni);
  EXPECT_EQ(has("avx512vbmi"), avx512 && cpu.avx512vnni && cpu.avx512vbmi);
  const char* forced = std::getenv("DS4_ISA");
  if (!forced || !*forced) {
    // avx512vbmi is the default on AMD only (Intel's gathers are fast).
    const DotKernels* best = available.back();
    if (std::string(best->isa) == "avx512vbmi" && !cpu.amd) best = available[available.size() - 2];
    EXPECT_EQ(&dot_kernels(), best) << "dot_kernels() must pick the best level";
  }
  for (const DotKernels* k : available) EXPECT_EQ(&dot_kernels_for(k->isa), k);
}

TEST(DotKernelsQ8_0, EqualScalarExactlyAndTruth) { check_format(kQ8_0, 12, false); }
TEST(DotKernelsQ2_K, EqualScalarExactlyAndTruth) { check_format(kQ2_K, 12, false); }
TEST(DotKernelsQ4_K, EqualScalarExactlyAndTruth) { check_format(kQ4_K, 12, false); }
TEST(DotKernelsQ6_K, EqualScalarExactlyAndTruth) { check_format(kQ6_K, 12, false); }
TEST(DotKernelsIq2Xxs, EqualScalarExactlyAndTruth) { check_format(kIq2Xxs, 12, false); }
TEST(DotKernelsIq2Xs, EqualScalarExactlyAndTruth) { check_format(kIq2Xs, 12, false); }
TEST(DotKernelsIq1M, EqualScalarExactlyAndTruth) { check_format(kIq1M, 12, false); }
TEST(DotKernelsIq1S, EqualScalarExactlyAndTruth) { check_format(kIq1S, 12, false); }
TEST(DotKernelsMxfp4, EqualScalarExactlyAndTruth) { check_format(kMxfp4, 12, false); }
TEST(DotKernelsIq3Xxs, EqualScalarExactlyAndTruth) { check_format(kIq3Xxs, 12, false); }
TEST(DotKernelsIq3S, EqualScalarExactlyAndTruth) { check_format(kIq3S, 12, false); }
TEST(DotKernelsQ3_K, EqualScalarExactlyAndTruth) { check_format(kQ3_K, 12, false); }
TEST(DotKernelsQ5_K, EqualScalarExactlyAndTruth) { check_format(kQ5_K, 12, false); }
TEST(DotKernelsIq4Nl, EqualScalarExactlyAndTruth) { check_format(kIq4Nl, 12, false); }
TEST(DotKernelsIq4Xs, EqualScalarExactlyAndTruth) { check_format(kIq4Xs, 12, false); }
TEST(DotKernelsQ4_0, EqualScalarExactlyAndTruth) { check_format(kQ4_0, 12, false); }
TEST(DotKernelsQ4_1, EqualScalarExactlyAndTruth) { check_format(kQ4_1, 12, false); }
TEST(DotKernelsQ5_0, EqualScalarExactlyAndTruth) { check_format(kQ5_0, 12, false); }
TEST(DotKernelsQ5_1, EqualScalarExactlyAndTruth) { check_format(kQ5_1, 12, false); }
TEST(DotKernelsIq2S, EqualScalarExactlyAndTruth) { check_format(kIq2S, 12, false); }

// Any scale bit patterns (subnormal, huge, infinite; every E8M0 exponent):
// overflow and NaN must come out exactly as in the scalar reference.
TEST(DotKernelsQ8_0, ExtremeScalesEqualScalarExactly) { check_format(kQ8_0, 3, true); }
TEST(DotKernelsQ2_K, ExtremeScalesEqualScalarExactly) { check_format(kQ2_K, 3, true); }
TEST(DotKernelsQ4_K, ExtremeScalesEqualScalarExactly) { check_format(kQ4_K, 3, true); }
TEST(DotKernelsQ6_K, ExtremeScalesEqualScalarExactly) { check_format(kQ6_K, 3, true); }
TEST(DotKernelsIq2Xxs, ExtremeScalesEqualScalarExactly) { check_format(kIq2Xxs, 3, true); }
TEST(DotKernelsIq2Xs, ExtremeScalesEqualScalarExactly) { check_format(kIq2Xs, 3, true); }
TEST(DotKernelsIq1M, ExtremeScalesEqualScalarExactly) { check_format(kIq1M, 3, true); }
TEST(DotKernelsIq1S, ExtremeScalesEqualScalarExactly) { check_format(kIq1S, 3, true); }
TEST(DotKernelsMxfp4, ExtremeScalesEqualScalarExactly) { check_format(kMxfp4, 3, true); }
TEST(DotKernelsIq3Xxs, ExtremeScalesEqualScalarExactly) { check_format(kIq3Xxs, 3, true); }
TEST(DotKernelsIq3S, ExtremeScalesEqualScalarExactly) { check_format(kIq3S, 3, true); }
TEST(DotKernelsQ3_K, ExtremeScalesEqualScalarExactly) { check_format(kQ3_K, 3, true); }
TEST(DotKernelsQ5_K, ExtremeScalesEqualScalarExactly) { check_format(kQ5_K, 3, true); }
TEST(DotKernelsIq4Nl, ExtremeScalesEqualScalarExactly) { check_format(kIq4Nl, 3, true); }
TEST(DotKernelsIq4Xs, ExtremeScalesEqualScalarExactly) { check_format(kIq4Xs, 3, true); }
TEST(DotKernelsQ4_0, ExtremeScalesEqualScalarExactly) { check_format(kQ4_0, 3, true); }
TEST(DotKernelsQ4_1, ExtremeScalesEqualScalarExactly) { check_format(kQ4_1, 3, true); }
TEST(DotKernelsQ5_0, ExtremeScalesEqualScalarExactly) { check_format(kQ5_0, 3, true); }
TEST(DotKernelsQ5_1, ExtremeScalesEqualScalarExactly) { check_format(kQ5_1, 3, true); }
TEST(DotKernelsIq2S, ExtremeScalesEqualScalarExactly) { check_format(kIq2S, 3, true); }

// -128 x -128 in every position: the product sign tricks overflow here.
TEST(DotKernelsQ8_0, AllMinusOneTwentyEight) {
  std::vector<BlockQ8_0> w(17), x(17);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i].d = x[i].d = f32_to_f16(1.0f);
    std::memset(w[i].qs, 0x80, sizeof(w[i].qs));
    std::memset(x[i].qs, 0x80, sizeof(x[i].qs));
  }
  for (const DotKernels* k : levels()) {
    SCOPED_TRACE(k->isa);
    EXPECT_EQ(k->q8_0_q8_0(17 * kQK8_0, w.data(), x.data()), 17.0f * 32 * 16384);
  }
}

// IQ2_S's largest products: every magnitude 43, every sign negative, every
// scale 15, against -128 activations (|x| * 43 pairs stay below int16).
TEST(DotKernelsIq2S, AllMinusOneTwentyEight) {
  std::vector<BlockIQ2_S> w(17);
  std::vector<BlockQ8_K> x(17);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i].d = f32_to_f16(1.0f);
    std::memset(w[i].qs, 0xff, sizeof(w[i].qs));
    std::memset(w[i].signs, 0xff, sizeof(w[i].signs));
    std::memset(w[i].qh, 0xff, sizeof(w[i].qh));
    std::memset(w[i].scales, 0xff, sizeof(w[i].scales));
    x[i].d = 1.0f;
    std::memset(x[i].qs, 0x80, sizeof(x[i].qs));
    for (int16_t& s : x[i].bsums) s = -16 * 128;
  }
  // Per element (15.5 / 4) * 43 * 128 = 21328.
  for (const DotKernels* k : levels()) {
    SCOPED_TRACE(k->isa);
    EXPECT_EQ(k->iq2_s_q8_K(17 * kQK_K, w.data(), x.data()), 17.0f * 256 * 21328);
  }
}

// ---- Float formats ----

struct FloatCase {
  const char* name;
  float (*run)(const DotKernels&, int64_t, const void*, const float*);
  size_t weight_bytes;
  uint32_t (*random_weight)(Rng&);  // raw bits of one weight
  double (*weight_value)(uint32_t);
};

uint32_t random_f32_bits(Rng& rng) {
  return std::bit_cast<uint32_t>(std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng));
}
uint32_t random_f16_bits(Rng& rng) {
  // Finite halves, subnormals included.
  uint16_t h;
  do {
    h = static_cast<uint16_t>(rng());
  } while ((h & 0x7c00) == 0x7c00);
  return h;
}
uint32_t random_bf16_bits(Rng& rng) { return f32_to_bf16(std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng)); }

const FloatCase kFloatCases[] = {
    {"f32",
     [](const DotKernels& k, int64_t n, const void* w, const float* x) {
       return k.f32_f32(n, static_cast<const float*>(w), x);
     },
     4, random_f32_bits, [](uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); }},
    {"f16",
     [](const DotKernels& k, int64_t n, const void* w, const float* x) {
       return k.f16_f32(n, static_cast<const uint16_t*>(w), x);
     },
     2, random_f16_bits, [](uint32_t b) { return static_cast<double>(f16_to_f32(static_cast<uint16_t>(b))); }},
    {"bf16",
     [](const DotKernels& k, int64_t n, const void* w, const float* x) {
       return k.bf16_f32(n, static_cast<const uint16_t*>(w), x);
     },
     2, random_bf16_bits, [](uint32_t b) { return static_cast<double>(bf16_to_f32(static_cast<uint16_t>(b))); }},
};

// Odd sizes and pointers 0..3 elements past a 64-byte boundary. Products are
// exact in double; a SIMD level rounds each of its >= 8 lanes' running sums
// (about n/8 steps) plus a short reduction tree, the scalar reference up to
// n times.
TEST(DotKernelsFloat, WithinAccumulatedRoundingOnOddSizesAndOffsets) {
  const int64_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 257, 4097};
  for (const FloatCase& fc : kFloatCases) {
    for (int64_t n : sizes) {
      for (size_t w_off = 0; w_off < 4; ++w_off) {
        for (size_t x_off = 0; x_off < 4; ++x_off) {
          Rng rng(static_cast<uint64_t>(n) * 977u + w_off * 13 + x_off);
          const size_t count = static_cast<size_t>(n);
          Placed<unsigned char> wbuf((count + 4) * fc.weight_bytes, w_off * fc.weight_bytes);
          Placed<float> x(count + 4, x_off * sizeof(float));
          double exact = 0, magnitude = 0;
          for (size_t i = 0; i < count; ++i) {
            const uint32_t bits = fc.random_weight(rng);
            std::memcpy(wbuf.data() + i * fc.weight_bytes, &bits, fc.weight_bytes);
            x[i] = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
            const double p = fc.weight_value(bits) * x[i];
            exact += p;
            magnitude += std::fabs(p);
          }
          for (const DotKernels* k : levels()) {
            SCOPED_TRACE(::testing::Message() << fc.name << " isa=" << k->isa << " n=" << n << " w_off=" << w_off
                                              << " x_off=" << x_off);
            const float got = fc.run(*k, n, wbuf.data(), x.data());
            const double steps = is_scalar(*k) ? static_cast<double>(n) + 2 : static_cast<double>(n) / 8 + 10;
            const double bound = steps * std::ldexp(1.0, -24) * magnitude;
            EXPECT_LE(std::fabs(static_cast<double>(got) - exact), bound) << "got " << got << ", exact " << exact;
          }
        }
      }
    }
  }
}

// The float kernels must not read past n: place the data at the very end of
// a buffer whose following bytes hold NaNs.
TEST(DotKernelsFloat, TailsIgnoreElementsPastN) {
  for (int64_t n = 1; n <= 70; ++n) {
    const size_t count = static_cast<size_t>(n);
    std::vector<float> w32(count + 32, std::nanf("")), x(count + 32, std::nanf(""));
    std::vector<uint16_t> w16(count + 32, 0x7e00), wbf(count + 32, 0x7fc0);  // NaN past n
    for (size_t i = 0; i < count; ++i) {
      w32[i] = 1.0f;
      w16[i] = f32_to_f16(1.0f);
      wbf[i] = f32_to_bf16(1.0f);
      x[i] = static_cast<float>(i % 5);
    }
    double expect = 0;
    for (size_t i = 0; i < count; ++i) expect += x[i];
    for (const DotKernels* k : levels()) {
      SCOPED_TRACE(::testing::Message() << k->isa << " n=" << n);
      EXPECT_EQ(k->f32_f32(n, w32.data(), x.data()), expect);
      EXPECT_EQ(k->f16_f32(n, w16.data(), x.data()), expect);
      EXPECT_EQ(k->bf16_f32(n, wbf.data(), x.data()), expect);
    }
  }
}

}  // namespace
}  // namespace ds4::quant
