// Device code for the weight formats: the scalar conversions the host uses
// (core/fp16.h, quant/rounding.h), and per weight type its dot with the
// activation form it is paired with (quant/dot.h) and its dequantizer.
//
// A block's dot is split into items of 32 elements: item() gives the exact
// integer partial sums of one item, term() turns a whole block's sums into
// the block's float term in the float order of the scalar reference kernel
// (quant/dot_scalar.cpp), and kFinal is the factor the reference applies to
// the row's sum (1/8 for the IQ2 types, 1/4 for IQ3_XXS). Integer sums do not
// depend on order, so a kernel may split items across threads freely; a
// thread that adds the block terms in block order then equals the CPU bit
// for bit (built with --fmad=false, as the host is with -ffp-contract=off).
// dequant() writes an item's 32 values with the host dequantizer's float
// operations (quant/<type>.cpp), bit for bit.
//
// The int8 tensor-core products (mmq_tile.cuh) take the formats with
// kTensorCores, whose item sums are integer dots of 16-value halves:
// code(w, s, l, t) is the signed integer element l of item s is dotted with
// (|code| <= 127), and for half h of the item
//   item(w, a, s).x = sum_h x_multiplier(w, s, h) * sum_{l in h} code * a.qs[32 s + l]
//   item(w, a, s).y = sum_h y_multiplier(w, s, h) * a.bsums[2 s + h]  (kHasMin; else 0)
// IQ1_M (its shift term sums activations by 8) has none.
#pragma once

#include <cstdint>

#include "backend/cuda/quant_tables.h"
#include "core/ggml_type.h"
#include "quant/blocks.h"

namespace ds4::cuda::dev {

using quant::BlockIQ1_M;
using quant::BlockIQ1_S;
using quant::BlockIQ2_S;
using quant::BlockIQ2_XS;
using quant::BlockIQ2_XXS;
using quant::BlockIQ3_S;
using quant::BlockIQ3_XXS;
using quant::BlockIQ4_NL;
using quant::BlockIQ4_XS;
using quant::BlockMXFP4;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;

// ---- scalar conversions, as the host's ----

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    bits = mant == 0 ? sign : sign | __float_as_uint(static_cast<float>(mant) * 0x1p-24f);
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return __uint_as_float(bits);
}

__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    const float v = __uint_as_float(abs) * 0x1p24f;
    const float r = (v + 0x1p23f) - 0x1p23f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  uint32_t m = abs + 0xc8000000u;
  const uint32_t lsb = (m >> 13) & 1u;
  m += 0x0fffu + lsb;
  return static_cast<uint16_t>(sign | (m >> 13));
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__device__ __forceinline__ float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return __uint_as_float(bits);
}

// ggml's nearest_int (quant/rounding.h).
__device__ __forceinline__ int nearest_int(float x) {
  const float shifted = x + 12582912.f;
  return (__float_as_int(shifted) & 0x007fffff) - 0x00400000;
}

__device__ __forceinline__ int8_t grid_byte(uint64_t point, int j) { return static_cast<int8_t>(point >> (8 * j)); }
__device__ __forceinline__ int grid_ubyte(uint64_t point, int j) { return static_cast<int>((point >> (8 * j)) & 0xff); }

// A 32-bit little-endian word from 2-byte aligned memory.
__device__ __forceinline__ uint32_t load_u32_a2(const void* p) {
  const uint16_t* h = static_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}

// Sum over 8 signed grid magnitudes times 8 activation codes; bit j of
// `signs` negates element j.
__device__ __forceinline__ int signed_grid_dot8(uint64_t point, uint8_t signs, const int8_t* q8) {
  int sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int v = grid_ubyte(point, j) * q8[j];
    sum += (signs >> j) & 1 ? -v : v;
  }
  return sum;
}

// Q4_K / Q5_K packed 6-bit scale and min of sub-block j (quant/k_scales.h).
__device__ __forceinline__ int2 k_scale_min(int j, const uint8_t* packed) {
  if (j < 4) return make_int2(packed[j] & 63, packed[j + 4] & 63);
  return make_int2((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4), (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
}

__device__ __forceinline__ int2 operator+(int2 a, int2 b) { return make_int2(a.x + b.x, a.y + b.y); }

// ---- per-type dot (item / term / kFinal) and dequantizer ----

template <GgmlType T>
struct Format;

// The legacy 32-element formats: codes from nibbles plus, with qh, a fifth bit.
__device__ __forceinline__ int legacy_code(const uint8_t* qs, uint32_t qh_bits, int j) {
  return j < 16 ? (qs[j] & 0x0F) | static_cast<int>(((qh_bits >> j) & 1) << 4)
                : (qs[j - 16] >> 4) | static_cast<int>(((qh_bits >> j) & 1) << 4);
}
__device__ __forceinline__ int legacy_dot(const uint8_t* qs, uint32_t qh_bits, int offset, const int8_t* q8) {
  int sum = 0;
#pragma unroll 8
  for (int j = 0; j < 32; ++j) sum += (legacy_code(qs, qh_bits, j) - offset) * q8[j];
  return sum;
}

template <>
struct Format<GgmlType::Q8_0> {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables&) {
    int sum = 0;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) sum += w.qs[j] * a.qs[j];
    return make_int2(sum, 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return static_cast<float>(s.x) * (f16_to_f32(w.d) * f16_to_f32(a.d));
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables&) { return w.qs[l]; }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static void dequant(const W& w, int, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(w.qs[j]) * d;
  }
};

template <>
struct Format<GgmlType::Q4_0> {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables&) {
    return make_int2(legacy_dot(w.qs, 0, 8, a.qs), 0);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables&) { return legacy_code(w.qs, 0, l) - 8; }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return static_cast<float>(s.x) * f16_to_f32(w.d) * f16_to_f32(a.d);
  }
  __device__ static void dequant(const W& w, int, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(legacy_code(w.qs, 0, j) - 8) * d;
  }
};

template <>
struct Format<GgmlType::Q5_0> {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static uint32_t qh(const W& w) { return load_u32_a2(w.qh); }
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables&) {
    return make_int2(legacy_dot(w.qs, qh(w), 16, a.qs), 0);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables&) { return legacy_code(w.qs, qh(w), l) - 16; }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return (f16_to_f32(w.d) * f16_to_f32(a.d)) * static_cast<float>(s.x);
  }
  __device__ static void dequant(const W& w, int, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d);
    const uint32_t bits = qh(w);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(legacy_code(w.qs, bits, j) - 16) * d;
  }
};

template <>
struct Format<GgmlType::Q4_1> {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables&) {
    return make_int2(legacy_dot(w.qs, 0, 0, a.qs), 0);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables&) { return legacy_code(w.qs, 0, l); }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return (f16_to_f32(w.d) * f16_to_f32(a.d)) * static_cast<float>(s.x) + f16_to_f32(w.m) * f16_to_f32(a.s);
  }
  __device__ static void dequant(const W& w, int, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d), m = f16_to_f32(w.m);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(legacy_code(w.qs, 0, j)) * d + m;
  }
};

template <>
struct Format<GgmlType::Q5_1> {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static uint32_t qh(const W& w) { return load_u32_a2(w.qh); }
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables&) {
    return make_int2(legacy_dot(w.qs, qh(w), 0, a.qs), 0);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables&) { return legacy_code(w.qs, qh(w), l); }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return (f16_to_f32(w.d) * f16_to_f32(a.d)) * static_cast<float>(s.x) + f16_to_f32(w.m) * f16_to_f32(a.s);
  }
  __device__ static void dequant(const W& w, int, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d), m = f16_to_f32(w.m);
    const uint32_t bits = qh(w);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(legacy_code(w.qs, bits, j)) * d + m;
  }
};

template <>
struct Format<GgmlType::MXFP4> {
  using W = BlockMXFP4;
  using A = BlockQ8_0;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables& t) {
    int lo = 0, hi = 0;
#pragma unroll 4
    for (int j = 0; j < 16; ++j) {
      lo += a.qs[j] * t.mxfp4_values[w.qs[j] & 0xF];
      hi += a.qs[j + 16] * t.mxfp4_values[w.qs[j] >> 4];
    }
    return make_int2(lo + hi, 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    const float d = f16_to_f32(a.d) * e8m0_to_fp32_half(w.e);
    return d * static_cast<float>(s.x);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables& t) {
    return t.mxfp4_values[l < 16 ? w.qs[l] & 0xF : w.qs[l - 16] >> 4];
  }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static void dequant(const W& w, int, const QuantTables& t, float* y) {
    const float d = e8m0_to_fp32_half(w.e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(t.mxfp4_values[w.qs[j] & 0x0F]) * d;
      y[j + 16] = static_cast<float>(t.mxfp4_values[w.qs[j] >> 4]) * d;
    }
  }
};

template <>
struct Format<GgmlType::IQ4_NL> {
  using W = BlockIQ4_NL;
  using A = BlockQ8_0;
  static constexpr int kItems = 1;
  static constexpr float kFinal = 1.0f;
  __device__ static int2 item(const W& w, const A& a, int, const QuantTables& t) {
    int sum = 0;
#pragma unroll 4
    for (int j = 0; j < 16; ++j)
      sum += a.qs[j] * t.iq4nl_values[w.qs[j] & 0xf] + a.qs[j + 16] * t.iq4nl_values[w.qs[j] >> 4];
    return make_int2(sum, 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    const float d = f16_to_f32(a.d) * f16_to_f32(w.d);
    return d * static_cast<float>(s.x);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int, int l, const QuantTables& t) {
    return t.iq4nl_values[l < 16 ? w.qs[l] & 0xF : w.qs[l - 16] >> 4];
  }
  __device__ static int x_multiplier(const W&, int, int) { return 1; }
  __device__ static void dequant(const W& w, int, const QuantTables& t, float* y) {
    const float d = f16_to_f32(w.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(t.iq4nl_values[w.qs[j] & 0xf]);
      y[j + 16] = d * static_cast<float>(t.iq4nl_values[w.qs[j] >> 4]);
    }
  }
};

// K-quants with a min (Q2_K, Q4_K, Q5_K): term = dall * isum - dmin * min_sum.
template <typename W>
__device__ __forceinline__ float k_min_term(const W& w, const BlockQ8_K& a, int2 s) {
  const float dall = a.d * f16_to_f32(w.d);
  const float dmin = a.d * f16_to_f32(w.dmin);
  return dall * static_cast<float>(s.x) - dmin * static_cast<float>(s.y);
}

template <>
struct Format<GgmlType::Q2_K> {
  using W = BlockQ2_K;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  // Item s: 2-bit field `2 (s % 4)` of bytes 32 (s / 4) .. +31, scales 2s, 2s+1.
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables&) {
    const uint8_t* q2 = w.qs + 32 * (s / 4);
    const int shift = 2 * (s % 4);
    const int8_t* q8 = a.qs + 32 * s;
    int isum = 0, min_sum = 0;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const uint8_t sc = w.scales[2 * s + part];
      int group = 0;
#pragma unroll 4
      for (int l = 0; l < 16; ++l) group += q8[16 * part + l] * ((q2[16 * part + l] >> shift) & 3);
      isum += (sc & 0xF) * group;
      min_sum += a.bsums[2 * s + part] * (sc >> 4);
    }
    return make_int2(isum, min_sum);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return k_min_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = true;
  __device__ static int code(const W& w, int s, int l, const QuantTables&) {
    return (w.qs[32 * (s / 4) + l] >> (2 * (s % 4))) & 3;
  }
  __device__ static int x_multiplier(const W& w, int s, int h) { return w.scales[2 * s + h] & 0xF; }
  __device__ static int y_multiplier(const W& w, int s, int h) { return w.scales[2 * s + h] >> 4; }
  __device__ static void dequant(const W& w, int s, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d), min = f16_to_f32(w.dmin);
    const uint8_t* q2 = w.qs + 32 * (s / 4);
    const int shift = 2 * (s % 4);
    for (int part = 0; part < 2; ++part) {
      const uint8_t sc = w.scales[2 * s + part];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = min * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l)
        y[16 * part + l] = dl * static_cast<float>((q2[16 * part + l] >> shift) & 3) - ml;
    }
  }
};

// Q4_K and Q5_K: 8 sub-blocks of 32 codes, each with a 6-bit scale and min
// (Codes::code(w, s, l) gives code l of sub-block s).
template <typename Block, typename Codes>
struct KScaleMinFormat {
  using W = Block;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables&) {
    const int2 sm = k_scale_min(s, w.scales);
    int group = 0;
#pragma unroll 8
    for (int l = 0; l < 32; ++l) group += a.qs[32 * s + l] * Codes::code(w, s, l);
    return make_int2(sm.x * group, (a.bsums[2 * s] + a.bsums[2 * s + 1]) * sm.y);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return k_min_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = true;
  __device__ static int code(const W& w, int s, int l, const QuantTables&) { return Codes::code(w, s, l); }
  __device__ static int x_multiplier(const W& w, int s, int) { return k_scale_min(s, w.scales).x; }
  __device__ static int y_multiplier(const W& w, int s, int) { return k_scale_min(s, w.scales).y; }
  __device__ static void dequant(const W& w, int s, const QuantTables&, float* y) {
    const int2 sm = k_scale_min(s, w.scales);
    const float dl = f16_to_f32(w.d) * static_cast<float>(sm.x);
    const float ml = f16_to_f32(w.dmin) * static_cast<float>(sm.y);
    for (int l = 0; l < 32; ++l) y[l] = dl * static_cast<float>(Codes::code(w, s, l)) - ml;
  }
};

struct Q4KCodes {
  __device__ static int code(const BlockQ4_K& w, int s, int l) { return (w.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0xF; }
};
struct Q5KCodes {
  __device__ static int code(const BlockQ5_K& w, int s, int l) {
    return ((w.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0xF) | (((w.qh[l] >> s) & 1) << 4);
  }
};
template <>
struct Format<GgmlType::Q4_K> : KScaleMinFormat<BlockQ4_K, Q4KCodes> {};
template <>
struct Format<GgmlType::Q5_K> : KScaleMinFormat<BlockQ5_K, Q5KCodes> {};

template <>
struct Format<GgmlType::Q6_K> {
  using W = BlockQ6_K;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  // Element 32s + l, s = 4h + k: nibble k / 2 of ql[64h + 32 (k % 2) + l],
  // top bits 2k of qh[32h + l]; value - 32.
  __device__ static int value(const W& w, int s, int l) {
    const int h = s / 4, k = s % 4;
    const uint8_t low_byte = w.ql[64 * h + 32 * (k % 2) + l];
    const int low = k / 2 ? low_byte >> 4 : low_byte & 0xF;
    const int high = (w.qh[32 * h + l] >> (2 * k)) & 3;
    return (low | (high << 4)) - 32;
  }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables&) {
    int isum = 0;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      int group = 0;
#pragma unroll 4
      for (int l = 16 * part; l < 16 * part + 16; ++l) group += value(w, s, l) * a.qs[32 * s + l];
      isum += w.scales[2 * s + part] * group;
    }
    return make_int2(isum, 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return (f16_to_f32(w.d) * a.d) * static_cast<float>(s.x);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int s, int l, const QuantTables&) { return value(w, s, l); }
  __device__ static int x_multiplier(const W& w, int s, int h) { return w.scales[2 * s + h]; }
  __device__ static void dequant(const W& w, int s, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d);
    for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>(w.scales[2 * s + l / 16]) * static_cast<float>(value(w, s, l));
  }
};

template <>
struct Format<GgmlType::Q3_K> {
  using W = BlockQ3_K;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  __device__ static int value(const W& w, int s, int l) {
    const int low = (w.qs[32 * (s / 4) + l] >> (2 * (s % 4))) & 3;
    const int high = (w.hmask[l] >> s) & 1;
    return low - 4 + 4 * high;
  }
  __device__ static int scale(const W& w, int j) {
    const int low = j < 8 ? (w.scales[j] & 0xF) : (w.scales[j - 8] >> 4);
    const int high = (w.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
  }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables&) {
    int isum = 0;
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      int group = 0;
#pragma unroll 4
      for (int l = 16 * part; l < 16 * part + 16; ++l) group += value(w, s, l) * a.qs[32 * s + l];
      isum += scale(w, 2 * s + part) * group;
    }
    return make_int2(isum, 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return (f16_to_f32(w.d) * a.d) * static_cast<float>(s.x);
  }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int s, int l, const QuantTables&) { return value(w, s, l); }
  __device__ static int x_multiplier(const W& w, int s, int h) { return scale(w, 2 * s + h); }
  __device__ static void dequant(const W& w, int s, const QuantTables&, float* y) {
    const float d = f16_to_f32(w.d);
    for (int part = 0; part < 2; ++part) {
      const float dl = d * static_cast<float>(scale(w, 2 * s + part));
      for (int l = 16 * part; l < 16 * part + 16; ++l) y[l] = dl * static_cast<float>(value(w, s, l));
    }
  }
};

// (d * d8) * isum, the IQ types' block term.
template <typename W>
__device__ __forceinline__ float iq_term(const W& w, const BlockQ8_K& a, int2 s) {
  return (f16_to_f32(w.d) * a.d) * static_cast<float>(s.x);
}

template <>
struct Format<GgmlType::IQ2_XXS> {
  using W = BlockIQ2_XXS;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 0.125f;
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    const uint32_t grid = static_cast<uint32_t>(w.qs[4 * s]) | (static_cast<uint32_t>(w.qs[4 * s + 1]) << 16);
    const uint32_t aux = static_cast<uint32_t>(w.qs[4 * s + 2]) | (static_cast<uint32_t>(w.qs[4 * s + 3]) << 16);
    int sum = 0;
#pragma unroll
    for (int g = 0; g < 4; ++g)
      sum += signed_grid_dot8(t.iq2xxs_grid[(grid >> (8 * g)) & 0xFF], t.signs[(aux >> (7 * g)) & 127],
                              a.qs + 32 * s + 8 * g);
    return make_int2(sum * static_cast<int>(2 * (aux >> 28) + 1), 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return iq_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static uint32_t aux_word(const W& w, int s) {
    return static_cast<uint32_t>(w.qs[4 * s + 2]) | (static_cast<uint32_t>(w.qs[4 * s + 3]) << 16);
  }
  __device__ static int code(const W& w, int s, int l, const QuantTables& t) {
    const int g = l / 8, j = l % 8;
    const uint32_t grid = static_cast<uint32_t>(w.qs[4 * s]) | (static_cast<uint32_t>(w.qs[4 * s + 1]) << 16);
    const int v = grid_ubyte(t.iq2xxs_grid[(grid >> (8 * g)) & 0xFF], j);
    return (t.signs[(aux_word(w, s) >> (7 * g)) & 127] >> j) & 1 ? -v : v;
  }
  __device__ static int x_multiplier(const W& w, int s, int) {
    return static_cast<int>(2 * (aux_word(w, s) >> 28) + 1);
  }
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    const uint32_t grid = static_cast<uint32_t>(w.qs[4 * s]) | (static_cast<uint32_t>(w.qs[4 * s + 1]) << 16);
    const uint32_t aux = static_cast<uint32_t>(w.qs[4 * s + 2]) | (static_cast<uint32_t>(w.qs[4 * s + 3]) << 16);
    const float db = f16_to_f32(w.d) * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int g = 0; g < 4; ++g) {
      const uint64_t point = t.iq2xxs_grid[(grid >> (8 * g)) & 0xFF];
      const uint8_t signs = t.signs[(aux >> (7 * g)) & 127];
      for (int j = 0; j < 8; ++j)
        y[8 * g + j] = db * static_cast<float>(grid_ubyte(point, j)) * ((signs >> j) & 1 ? -1.f : 1.f);
    }
  }
};

// IQ2_XS / IQ2_S sub-block scale from its 4-bit code (quant/iq2_sub_block_fit.h).
__device__ __forceinline__ float iq2_sub_block_scale(float d, int code) {
  return d * (0.5f + static_cast<float>(code)) * 0.25f;
}

// An IQ2_XS / IQ2_S grid point and its 8 sign bits.
struct SignedPoint {
  uint64_t point;
  uint8_t signs;
};

// Item s of IQ2_XS / IQ2_S: groups l = 0..3 of 8 values (group(l) gives the
// point and signs), each 16-value half scaled by 2 * (its nibble of
// `scales`) + 1 in the dot, by iq2_sub_block_scale in the dequantizer.
template <typename Group>
__device__ __forceinline__ int iq2_item_sum(uint8_t scales, const int8_t* q8, Group group) {
  int sum = 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int half_sum = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const SignedPoint p = group(2 * half + k);
      half_sum += signed_grid_dot8(p.point, p.signs, q8 + 16 * half + 8 * k);
    }
    sum += half_sum * (2 * ((scales >> (4 * half)) & 0xf) + 1);
  }
  return sum;
}
template <typename Group>
__device__ __forceinline__ void iq2_item_dequant(float d, uint8_t scales, float* y, Group group) {
  for (int l = 0; l < 4; ++l) {
    const float db = iq2_sub_block_scale(d, (scales >> (4 * (l / 2))) & 0xf);
    const SignedPoint p = group(l);
    for (int j = 0; j < 8; ++j)
      y[8 * l + j] = db * static_cast<float>(grid_ubyte(p.point, j)) * ((p.signs >> j) & 1 ? -1.f : 1.f);
  }
}

// IQ2_XS and IQ2_S: Groups::group(w, s, l, t) gives group l of item s.
template <typename Block, typename Groups>
struct Iq2Format {
  using W = Block;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 0.125f;
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    return make_int2(iq2_item_sum(w.scales[s], a.qs + 32 * s, [&](int l) { return Groups::group(w, s, l, t); }), 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return iq_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int s, int l, const QuantTables& t) {
    const SignedPoint p = Groups::group(w, s, l / 8, t);
    const int v = grid_ubyte(p.point, l % 8);
    return (p.signs >> (l % 8)) & 1 ? -v : v;
  }
  __device__ static int x_multiplier(const W& w, int s, int h) { return 2 * ((w.scales[s] >> (4 * h)) & 0xf) + 1; }
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    iq2_item_dequant(f16_to_f32(w.d), w.scales[s], y, [&](int l) { return Groups::group(w, s, l, t); });
  }
};

struct Iq2XsGroups {
  __device__ static SignedPoint group(const BlockIQ2_XS& w, int s, int l, const QuantTables& t) {
    const uint16_t word = w.qs[4 * s + l];
    return {t.iq2xs_grid[word & 511], t.signs[word >> 9]};
  }
};
struct Iq2SGroups {
  __device__ static SignedPoint group(const BlockIQ2_S& w, int s, int l, const QuantTables& t) {
    const int g = 4 * s + l;
    const int index = w.qs[g] | (((w.qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
    return {t.iq2s_grid[index], w.signs[g]};
  }
};
template <>
struct Format<GgmlType::IQ2_XS> : Iq2Format<BlockIQ2_XS, Iq2XsGroups> {};
template <>
struct Format<GgmlType::IQ2_S> : Iq2Format<BlockIQ2_S, Iq2SGroups> {};

// IQ3_XXS / IQ3_S item: 4 groups of 8 magnitudes, signs(g) negating each.
template <typename Signs, typename Magnitude>
__device__ __forceinline__ int iq3_item_sum(const int8_t* q8, Signs signs, Magnitude magnitude) {
  int sum = 0;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const uint8_t sg = signs(g);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int v = magnitude(g, j) * q8[8 * g + j];
      sum += (sg >> j) & 1 ? -v : v;
    }
  }
  return sum;
}
template <typename Signs, typename Magnitude>
__device__ __forceinline__ void iq3_item_dequant(float db, float* y, Signs signs, Magnitude magnitude) {
  for (int g = 0; g < 4; ++g) {
    const uint8_t sg = signs(g);
    for (int j = 0; j < 8; ++j)
      y[8 * g + j] = db * static_cast<float>(magnitude(g, j)) * ((sg >> j) & 1 ? -1.f : 1.f);
  }
}

template <>
struct Format<GgmlType::IQ3_XXS> {
  using W = BlockIQ3_XXS;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 0.25f;
  __device__ static uint32_t aux(const W& w, int s) { return load_u32_a2(w.qs + 64 + 4 * s); }
  __device__ static int magnitude(const W& w, int s, int g, int j, const QuantTables& t) {
    return static_cast<int>((t.iq3xxs_grid[w.qs[8 * s + 2 * g + j / 4]] >> (8 * (j % 4))) & 0xff);
  }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    const uint32_t x = aux(w, s);
    const int sum = iq3_item_sum(a.qs + 32 * s, [&](int g) { return t.signs[(x >> (7 * g)) & 127]; },
                                 [&](int g, int j) { return magnitude(w, s, g, j, t); });
    return make_int2(sum * static_cast<int>(2 * (x >> 28) + 1), 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return iq_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int s, int l, const QuantTables& t) {
    const int g = l / 8, j = l % 8;
    const int v = magnitude(w, s, g, j, t);
    return (t.signs[(aux(w, s) >> (7 * g)) & 127] >> j) & 1 ? -v : v;
  }
  __device__ static int x_multiplier(const W& w, int s, int) { return static_cast<int>(2 * (aux(w, s) >> 28) + 1); }
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    const uint32_t x = aux(w, s);
    const float db = f16_to_f32(w.d) * (0.5f + static_cast<float>(x >> 28)) * 0.5f;
    iq3_item_dequant(db, y, [&](int g) { return t.signs[(x >> (7 * g)) & 127]; },
                     [&](int g, int j) { return magnitude(w, s, g, j, t); });
  }
};

template <>
struct Format<GgmlType::IQ3_S> {
  using W = BlockIQ3_S;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  __device__ static int magnitude(const W& w, int s, int g, int j, const QuantTables& t) {
    const int group = 2 * g + j / 4;
    const int index = w.qs[8 * s + group] | (((w.qh[s] >> group) & 1) << 8);
    return static_cast<int>((t.iq3s_grid[index] >> (8 * (j % 4))) & 0xff);
  }
  __device__ static int scale_code(const W& w, int s) { return (w.scales[s / 2] >> (4 * (s % 2))) & 0xF; }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    const int sum = iq3_item_sum(a.qs + 32 * s, [&](int g) { return w.signs[4 * s + g]; },
                                 [&](int g, int j) { return magnitude(w, s, g, j, t); });
    return make_int2(sum * (2 * scale_code(w, s) + 1), 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return iq_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int s, int l, const QuantTables& t) {
    const int g = l / 8, j = l % 8;
    const int v = magnitude(w, s, g, j, t);
    return (w.signs[4 * s + g] >> j) & 1 ? -v : v;
  }
  __device__ static int x_multiplier(const W& w, int s, int) { return 2 * scale_code(w, s) + 1; }
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    const float db = f16_to_f32(w.d) * static_cast<float>(1 + 2 * scale_code(w, s));
    iq3_item_dequant(db, y, [&](int g) { return w.signs[4 * s + g]; },
                     [&](int g, int j) { return magnitude(w, s, g, j, t); });
  }
};

template <>
struct Format<GgmlType::IQ1_S> {
  using W = BlockIQ1_S;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  __device__ static int index(const W& w, int s, int g) {
    return w.qs[4 * s + g] | (((w.qh[s] >> (3 * g)) & 7) << 8);
  }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    const uint16_t h = w.qh[s];
    const int ls = 2 * ((h >> 12) & 7) + 1;
    const int delta = (h & 0x8000) ? -1 : 1;
    int lsum = 0;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const uint64_t point = t.iq1_grid[index(w, s, g)];
#pragma unroll
      for (int j = 0; j < 8; ++j) lsum += a.qs[32 * s + 8 * g + j] * grid_byte(point, j);
    }
    return make_int2(ls * lsum, ls * delta * (a.bsums[2 * s] + a.bsums[2 * s + 1]));
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return f16_to_f32(w.d) * a.d * (static_cast<float>(s.x) + 0.125f * static_cast<float>(s.y));
  }
  static constexpr bool kTensorCores = true, kHasMin = true;
  __device__ static int code(const W& w, int s, int l, const QuantTables& t) {
    return grid_byte(t.iq1_grid[index(w, s, l / 8)], l % 8);
  }
  __device__ static int x_multiplier(const W& w, int s, int) { return 2 * ((w.qh[s] >> 12) & 7) + 1; }
  __device__ static int y_multiplier(const W& w, int s, int) {
    return (w.qh[s] & 0x8000 ? -1 : 1) * x_multiplier(w, s, 0);
  }
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    const uint16_t h = w.qh[s];
    const float dl = f16_to_f32(w.d) * static_cast<float>(2 * ((h >> 12) & 7) + 1);
    const float delta = (h & 0x8000) ? -0.125f : 0.125f;
    for (int g = 0; g < 4; ++g) {
      const uint64_t point = t.iq1_grid[index(w, s, g)];
      for (int j = 0; j < 8; ++j) y[8 * g + j] = dl * (static_cast<float>(grid_byte(point, j)) + delta);
    }
  }
};

template <>
struct Format<GgmlType::IQ1_M> {
  using W = BlockIQ1_M;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  __device__ static uint16_t scale_word(const W& w, int i) {
    return static_cast<uint16_t>(w.scales[2 * i] | (w.scales[2 * i + 1] << 8));
  }
  __device__ static float super_scale(const W& w) {
    const uint16_t s0 = scale_word(w, 0), s1 = scale_word(w, 1), s2 = scale_word(w, 2), s3 = scale_word(w, 3);
    return f16_to_f32(
        static_cast<uint16_t>((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000)));
  }
  // 16-value half h's multiplier 2 * scale + 1.
  __device__ static int multiplier(const W& w, int h) { return 2 * ((scale_word(w, h / 4) >> (3 * (h % 4))) & 7) + 1; }
  __device__ static int index(const W& w, int g) { return w.qs[g] | ((w.qh[g / 2] << (8 - 4 * (g % 2))) & 0x700); }
  __device__ static bool negative(const W& w, int g) { return (w.qh[g / 2] >> (3 + 4 * (g % 2))) & 1; }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    int sumi1 = 0, sumi2 = 0;
#pragma unroll
    for (int h = 2 * s; h < 2 * s + 2; ++h) {
      int grid_sum = 0, shift_sum = 0;
#pragma unroll
      for (int g = 2 * h; g < 2 * h + 2; ++g) {
        const uint64_t point = t.iq1_grid[index(w, g)];
        int lsum1 = 0, lsum2 = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          lsum1 += a.qs[8 * g + j] * grid_byte(point, j);
          lsum2 += a.qs[8 * g + j];
        }
        grid_sum += lsum1;
        shift_sum += negative(w, g) ? -lsum2 : lsum2;
      }
      sumi1 += grid_sum * multiplier(w, h);
      sumi2 += shift_sum * multiplier(w, h);
    }
    return make_int2(sumi1, sumi2);
  }
  __device__ static float term(const W& w, const A& a, int2 s) {
    return super_scale(w) * a.d * (static_cast<float>(s.x) + 0.125f * static_cast<float>(s.y));
  }
  static constexpr bool kTensorCores = false, kHasMin = false;
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    const float d = super_scale(w);
    for (int l = 0; l < 4; ++l) {
      const int g = 4 * s + l;
      const float dl = d * static_cast<float>(multiplier(w, g / 2));
      const float delta = negative(w, g) ? -0.125f : 0.125f;
      const uint64_t point = t.iq1_grid[index(w, g)];
      for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (static_cast<float>(grid_byte(point, j)) + delta);
    }
  }
};

template <>
struct Format<GgmlType::IQ4_XS> {
  using W = BlockIQ4_XS;
  using A = BlockQ8_K;
  static constexpr int kItems = 8;
  static constexpr float kFinal = 1.0f;
  __device__ static int scale(const W& w, int s) {
    const int low = (w.scales_l[s / 2] >> (4 * (s % 2))) & 0xf;
    const int high = (w.scales_h >> (2 * s)) & 3;
    return (low | (high << 4)) - 32;
  }
  __device__ static int2 item(const W& w, const A& a, int s, const QuantTables& t) {
    const uint8_t* qs = w.qs + 16 * s;
    const int8_t* q8 = a.qs + 32 * s;
    int group = 0;
#pragma unroll 4
    for (int j = 0; j < 16; ++j)
      group += q8[j] * t.iq4nl_values[qs[j] & 0xf] + q8[j + 16] * t.iq4nl_values[qs[j] >> 4];
    return make_int2(scale(w, s) * group, 0);
  }
  __device__ static float term(const W& w, const A& a, int2 s) { return iq_term(w, a, s); }
  static constexpr bool kTensorCores = true, kHasMin = false;
  __device__ static int code(const W& w, int s, int l, const QuantTables& t) {
    const uint8_t* qs = w.qs + 16 * s;
    return t.iq4nl_values[l < 16 ? qs[l] & 0xf : qs[l - 16] >> 4];
  }
  __device__ static int x_multiplier(const W& w, int s, int) { return scale(w, s); }
  __device__ static void dequant(const W& w, int s, const QuantTables& t, float* y) {
    const float dl = f16_to_f32(w.d) * static_cast<float>(scale(w, s));
    const uint8_t* qs = w.qs + 16 * s;
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(t.iq4nl_values[qs[j] & 0xf]);
      y[j + 16] = dl * static_cast<float>(t.iq4nl_values[qs[j] >> 4]);
    }
  }
};

// Calls f(Format<T>{}) for a quantized weight type with a device dot;
// returns false for any other type.
template <typename F>
bool visit_quant_format(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::Q8_0: f(Format<GgmlType::Q8_0>{}); return true;
    case GgmlType::Q4_0: f(Format<GgmlType::Q4_0>{}); return true;
    case GgmlType::Q4_1: f(Format<GgmlType::Q4_1>{}); return true;
    case GgmlType::Q5_0: f(Format<GgmlType::Q5_0>{}); return true;
    case GgmlType::Q5_1: f(Format<GgmlType::Q5_1>{}); return true;
    case GgmlType::MXFP4: f(Format<GgmlType::MXFP4>{}); return true;
    case GgmlType::IQ4_NL: f(Format<GgmlType::IQ4_NL>{}); return true;
    case GgmlType::Q2_K: f(Format<GgmlType::Q2_K>{}); return true;
    case GgmlType::Q3_K: f(Format<GgmlType::Q3_K>{}); return true;
    case GgmlType::Q4_K: f(Format<GgmlType::Q4_K>{}); return true;
    case GgmlType::Q5_K: f(Format<GgmlType::Q5_K>{}); return true;
    case GgmlType::Q6_K: f(Format<GgmlType::Q6_K>{}); return true;
    case GgmlType::IQ2_XXS: f(Format<GgmlType::IQ2_XXS>{}); return true;
    case GgmlType::IQ2_XS: f(Format<GgmlType::IQ2_XS>{}); return true;
    case GgmlType::IQ2_S: f(Format<GgmlType::IQ2_S>{}); return true;
    case GgmlType::IQ3_XXS: f(Format<GgmlType::IQ3_XXS>{}); return true;
    case GgmlType::IQ3_S: f(Format<GgmlType::IQ3_S>{}); return true;
    case GgmlType::IQ1_S: f(Format<GgmlType::IQ1_S>{}); return true;
    case GgmlType::IQ1_M: f(Format<GgmlType::IQ1_M>{}); return true;
    case GgmlType::IQ4_XS: f(Format<GgmlType::IQ4_XS>{}); return true;
    default: return false;
  }
}

}  // namespace ds4::cuda::dev
