// Tile kernels: many weight rows dotted with many activation rows at once, for
// prefill. A tile kernel decodes each weight block once for all activations
// and reads each activation block once for several rows, which the one-row
// dot kernels (dot.h) cannot; decode (one activation) keeps using those.
//
// Contract: out[t * ldo + r] = DotKernels::<type>(n, row r, acts[t]) of the
// SAME ISA level, bit for bit, for every r < n_rows and t < n_acts. So a
// token's result does not depend on how many tokens are evaluated together
// (one batch, chunks, token by token give identical logits). Levels without
// a hand-written tile kernel for a type fall back to looping the dot kernel.
#pragma once

#include <cstdint>

#include "quant/dot.h"

namespace ds4::quant {

// w: n_rows rows of n elements, row_bytes apart. acts[t]: the activation in
// the form the type's dot kernel takes (BlockQ8_0*, BlockQ8_K* or float*).
using TileFunction = void(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                          const void* const* acts, int64_t n_acts, float* out, int64_t ldo);
using TileKernel = TileFunction*;

struct TileKernels {
  const char* isa;  // the DotKernels level these match
  TileKernel q8_0_q8_0;
  TileKernel q2_K_q8_K;
  TileKernel q4_K_q8_K;
  TileKernel iq2_xxs_q8_K;
  TileKernel mxfp4_q8_0;
  TileKernel f16_f32;
  TileKernel bf16_f32;
  TileKernel f32_f32;
  TileKernel q6_K_q8_K;
  TileKernel q5_K_q8_K;
  TileKernel q3_K_q8_K;
  TileKernel iq4_xs_q8_K;   // AVX-512 VNNI tile; plain avx512 and avx2 take avx2's lanes tile from 5 / 3 tokens
  TileKernel iq3_xxs_q8_K;  // a tile at the VNNI levels and avx2 (plain avx512 takes avx2's for 2+ activations)
  TileKernel iq2_xs_q8_K;   // as iq3_xxs_q8_K
  TileKernel iq1_m_q8_K;    // avx2's tile; the avx512 levels decode few activations with 16-row kernels
  TileKernel iq2_s_q8_K;    // as iq3_xxs_q8_K
};

// The tile kernels matching dot_kernels() (same level, DS4_ISA honoured).
const TileKernels& tile_kernels();
// The tile kernels matching the level named `isa`; ds4::Error as dot_kernels_for.
const TileKernels& tile_kernels_for(const char* isa);

// Tile kernels for the avx512 / avx512vnni / avx512vbmi levels, defined in the
// dot_tile_*_avx512.cpp files (one template instance per level).
namespace tile_avx512 {
template <bool kVnni>
void q8_0_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni>
void mxfp4_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo);
void f16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
             int64_t n_acts, float* out, int64_t ldo);
void bf16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
              int64_t n_acts, float* out, int64_t ldo);
void f32_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
             int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni>
void q2_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni>
void q4_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni>
void iq2_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo);
// Q6_K: the VNNI levels' lane-per-row tile (dot_tile_kquant_avx512.cpp; <true>
// only) and the plain level's block-decoding one (dot_tile_q6_avx512.cpp).
template <bool kVnni>
void q6_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
               int64_t n_acts, float* out, int64_t ldo);
void q6_K_q8_K_plain(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                     int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni>
void q5_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo);
template <bool kVnni>
void q3_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo);
void iq4_xs_q8_K_vnni(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                      int64_t n_acts, float* out, int64_t ldo);
// Plain avx512: the 16-row decode kernel per activation, avx2's lanes tile from 5.
void iq4_xs_q8_K_plain(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                       int64_t n_acts, float* out, int64_t ldo);
// IQ3_XXS, IQ2_XS and IQ2_S at every avx512 level: the 16-row decode kernel
// for few activations (kVbmi: the grid from registers, else gathered), the
// VNNI tile (kVnni) or avx2's lanes tile for more.
template <bool kVnni, bool kVbmi>
void iq3_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                  int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni, bool kVbmi>
void iq2_xs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo);
template <bool kVnni, bool kVbmi>
void iq2_s_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo);
// IQ1_M at every avx512 level: its 16-row decode kernel (the grid gathered),
// avx2's lanes tile from 3 activations.
template <bool kVnni>
void iq1_m_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo);
// The avx512vbmi level's IQ2_XXS: the grid decoded from registers.
void iq2_xxs_q8_K_vbmi(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                       int64_t n_acts, float* out, int64_t ldo);
}  // namespace tile_avx512

// Tile kernels for the avx2 level: the integer formats in dot_tile_avx2.cpp,
// the float formats in dot_tile_float_avx2.cpp.
namespace tile_avx2 {
TileFunction q8_0_q8_0, iq2_xxs_q8_K, q2_K_q8_K, q4_K_q8_K, mxfp4_q8_0, q6_K_q8_K, q5_K_q8_K, q3_K_q8_K, iq3_xxs_q8_K,
    iq2_xs_q8_K, iq4_xs_q8_K, iq1_m_q8_K, iq2_s_q8_K;
TileFunction f16_f32, bf16_f32, f32_f32;
}  // namespace tile_avx2

}  // namespace ds4::quant
