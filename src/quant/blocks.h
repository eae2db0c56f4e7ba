// In-memory block layouts of the quantized formats, byte-for-byte as ggml
// stores them in GGUF tensors. f16 scales are kept as raw uint16_t bits
// (decode with ds4::f16_to_f32). Every struct has alignment <= 4 so arrays of
// blocks tile a tensor with no padding.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4::quant {

inline constexpr int kQK8_0 = 32;    // elements per Q8_0 block
inline constexpr int kQK_K = 256;    // elements per K-quant / IQ super-block
inline constexpr int kQKMxfp4 = 32;  // elements per MXFP4 block
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales/mins of Q4_K

// x = d * q, q in [-127, 127] (weights) or [-128, 127].
struct BlockQ8_0 {
  uint16_t d;        // f16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(offsetof(BlockQ8_0, qs) == 2);

// Activation block paired with K-quant and IQ weights in dot products.
struct BlockQ8_K {
  float d;                     // f32 scale
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];   // sum of qs over each group of 16
};
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(offsetof(BlockQ8_K, qs) == 4);
static_assert(offsetof(BlockQ8_K, bsums) == 260);

// 16 sub-blocks of 16: x = d*(sc&15)*q - dmin*(sc>>4), q in 0..3.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble scale, high nibble min
  uint8_t qs[kQK_K / 4];       // 2-bit codes, 4 per byte
  uint16_t d;                  // f16 super-scale for scales
  uint16_t dmin;               // f16 super-scale for mins
};
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(offsetof(BlockQ2_K, qs) == 16);
static_assert(offsetof(BlockQ2_K, d) == 80);

// 8 sub-blocks of 32: x = d*sc*q - dmin*m, 6-bit sc/m packed in `scales`, q in 0..15.
struct BlockQ4_K {
  uint16_t d;                  // f16 super-scale for scales
  uint16_t dmin;               // f16 super-scale for mins
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];       // 4-bit codes, 2 per byte
};
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(offsetof(BlockQ4_K, scales) == 4);
static_assert(offsetof(BlockQ4_K, qs) == 16);

// 16 sub-blocks of 16: x = d*sc*(q-32), q in 0..63 (low 4 bits in ql, high 2
// in qh), 8-bit signed sc.
struct BlockQ6_K {
  // Per half h of 128 elements, l < 32: ql byte 64h+l holds the low nibbles
  // of elements 128h+l (bits 0-3) and 128h+l+64 (bits 4-7), byte 64h+32+l
  // those of 128h+l+32 and 128h+l+96; qh byte 32h+l holds the top two bits
  // of element 128h+l+32k at bits 2k.
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;              // f16 super-scale
};
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(offsetof(BlockQ6_K, scales) == 192);
static_assert(offsetof(BlockQ6_K, d) == 208);

// 16 sub-blocks of 16: x = d*(sc-32)*(q-4), q in 0..7 (low 2 bits in qs as
// Q2_K's, the third bit in hmask), 6-bit sc packed in `scales`.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];    // element e's third bit: bit e/32 of byte e%32
  uint8_t qs[kQK_K / 4];       // element 128h+32k+l: bits 2k of byte 32h+l
  // Scale j: low nibble in byte j (j < 8, bits 0-3) or j-8 (bits 4-7), top
  // two bits at 2*(j/4) of byte 8 + j%4.
  uint8_t scales[kKScaleSize];
  uint16_t d;                  // f16 super-scale
};
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(offsetof(BlockQ3_K, qs) == 32);
static_assert(offsetof(BlockQ3_K, scales) == 96);
static_assert(offsetof(BlockQ3_K, d) == 108);

// 8 sub-blocks of 32: x = d*sc*q - dmin*m, sc/m packed as Q4_K's, q in 0..31
// (low 4 bits in qs as Q4_K's, the fifth bit in qh).
struct BlockQ5_K {
  uint16_t d;                  // f16 super-scale for scales
  uint16_t dmin;               // f16 super-scale for mins
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];       // element 32s+l's fifth bit: bit s of byte l
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(offsetof(BlockQ5_K, scales) == 4);
static_assert(offsetof(BlockQ5_K, qh) == 16);
static_assert(offsetof(BlockQ5_K, qs) == 48);

// 8 groups of 32; each group is 2 uint32: 4 grid indices (bytes) and
// 4x7 sign bits + a 4-bit scale in the top nibble.
struct BlockIQ2_XXS {
  uint16_t d;                  // f16 block scale
  uint16_t qs[kQK_K / 8];
};
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(offsetof(BlockIQ2_XXS, qs) == 2);

// IQ2_XS: 256 values = 32 groups of 8, each a 16-bit word (9-bit index into
// the 512-point grid, 7-bit sign index); a 4-bit scale per 16 values (two
// per byte, low nibble first); one f16 super-block scale.
struct BlockIQ2_XS {
  uint16_t d;                  // f16 block scale
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(offsetof(BlockIQ2_XS, qs) == 2);
static_assert(offsetof(BlockIQ2_XS, scales) == 66);

// IQ1_S: 256 values = 32 groups of 8, each a point of the 2048-point
// {-1, 0, 1} grid (index low 8 bits in qs); per sub-block of 32 one word
// of qh: the four groups' high 3 index bits (bits 0-11), a 3-bit scale
// (12-14) and the shift sign (bit 15 set: -1/8, else +1/8).
struct BlockIQ1_S {
  uint16_t d;                  // f16 block scale
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(offsetof(BlockIQ1_S, qs) == 2);
static_assert(offsetof(BlockIQ1_S, qh) == 34);

// IQ1_M: 256 values = 32 groups of 8, each a point of the 2048-point
// {-1, 0, 1} grid (index low 8 bits in qs, high 3 bits in a nibble of qh)
// plus a shift of +-1/8 (bit 3 of that nibble set: -1/8); a 3-bit scale per
// 16 values; the f16 super-block scale is spread over the top nibbles of
// the four little-endian uint16 words of `scales`.
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ1_M) == 56);
static_assert(offsetof(BlockIQ1_M, qh) == 32);
static_assert(offsetof(BlockIQ1_M, scales) == 48);
// 8 sub-blocks of 32 = 64 groups of 4. qs[0..63]: one grid index per group
// of 4; qs[64..95]: per sub-block a uint32 of 4x7 even-parity sign indices
// (one per 8 elements) and a 4-bit scale in the top nibble.
struct BlockIQ3_XXS {
  uint16_t d;                  // f16 block scale
  uint8_t qs[3 * kQK_K / 8];
};
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(offsetof(BlockIQ3_XXS, qs) == 2);

// 8 sub-blocks of 32 = 64 groups of 4, each a 9-bit index into the 512-point
// grid (low 8 bits in qs, bit 8 in bit g%8 of qh[g/8]); 8 explicit sign bits
// per 8 elements; 4-bit sub-block scales, two per byte (low nibble first).
struct BlockIQ3_S {
  uint16_t d;                  // f16 block scale
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(offsetof(BlockIQ3_S, qh) == 66);
static_assert(offsetof(BlockIQ3_S, signs) == 74);
static_assert(offsetof(BlockIQ3_S, scales) == 106);

// IQ2_S: 256 values = 32 groups of 8, each a point of the 1024-point grid
// (index low 8 bits in qs, high 2 bits in qh: group 4s+g at bits 2g..2g+1
// of qh[s]) with an explicit sign byte (bit j set: element j negative); a
// 4-bit scale per 16 values (two per byte, low nibble first); one f16
// super-block scale. ggml declares qs and signs as one qs[64].
struct BlockIQ2_S {
  uint16_t d;                  // f16 block scale
  uint8_t qs[kQK_K / 8];
  uint8_t signs[kQK_K / 8];
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(offsetof(BlockIQ2_S, signs) == 34);
static_assert(offsetof(BlockIQ2_S, qh) == 66);
static_assert(offsetof(BlockIQ2_S, scales) == 74);

// 32 FP4 (E2M1) codes sharing one E8M0 power-of-two exponent.
struct BlockMXFP4 {
  uint8_t e;                   // E8M0 exponent, bias 127
  uint8_t qs[kQKMxfp4 / 2];    // low nibbles: elements 0..15, high: 16..31
};
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(offsetof(BlockMXFP4, qs) == 1);

// 32 4-bit indices into the non-linear table kIq4nlValues (iq4_values.h):
// x = d * value[q]; low nibbles hold elements 0..15, high 16..31.
struct BlockIQ4_NL {
  uint16_t d;                  // f16 block scale
  uint8_t qs[kQK8_0 / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(offsetof(BlockIQ4_NL, qs) == 2);

// 8 sub-blocks of 32, each as IQ4_NL's (16 bytes of nibbles) with a 6-bit
// scale: x = d * (ls - 32) * value[q].
struct BlockIQ4_XS {
  uint16_t d;                  // f16 super-scale
  uint16_t scales_h;           // top two bits of sub-block s's ls at bits 2s
  uint8_t scales_l[kQK_K / 64];  // low nibble of ls: sub-block s in byte s/2, nibble s%2
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(offsetof(BlockIQ4_XS, scales_l) == 4);
static_assert(offsetof(BlockIQ4_XS, qs) == 8);
// The 32-element "legacy" formats (Q4_0 ... Q5_1, and the Q8_1 activation
// Q4_1 / Q5_1 are dotted with). In each, byte j < 16 of qs holds the low four
// bits of element j (bits 0-3) and of element j + 16 (bits 4-7); the 5-bit
// formats keep bit 4 of element j at bit j of the little-endian word qh.
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_1 = 32;

// x = d * (q - 8), q in 0..15.
struct BlockQ4_0 {
  uint16_t d;                  // f16 scale
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(offsetof(BlockQ4_0, qs) == 2);

// x = d * q + m, q in 0..15.
struct BlockQ4_1 {
  uint16_t d;                  // f16 scale
  uint16_t m;                  // f16 offset (the block's minimum)
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(offsetof(BlockQ4_1, qs) == 4);

// x = d * (q - 16), q in 0..31.
struct BlockQ5_0 {
  uint16_t d;                  // f16 scale
  uint8_t qh[4];               // bit 4 of each element, element j at bit j
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(offsetof(BlockQ5_0, qh) == 2);
static_assert(offsetof(BlockQ5_0, qs) == 6);

// x = d * q + m, q in 0..31.
struct BlockQ5_1 {
  uint16_t d;                  // f16 scale
  uint16_t m;                  // f16 offset (the block's minimum)
  uint8_t qh[4];               // bit 4 of each element, element j at bit j
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(offsetof(BlockQ5_1, qh) == 4);
static_assert(offsetof(BlockQ5_1, qs) == 8);

// Activation block paired with Q4_1 / Q5_1 weights: x = d * q, and
// s = d * sum(q) (both f16) carries the weights' offset term.
struct BlockQ8_1 {
  uint16_t d;                  // f16 scale
  uint16_t s;                  // f16 of d * sum of qs
  int8_t qs[kQK8_1];
};
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(offsetof(BlockQ8_1, qs) == 4);

}  // namespace ds4::quant
