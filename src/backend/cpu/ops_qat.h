// The quantisation-aware-training round trips DeepSeek V4 simulates in its
// graph (Default numerics only; llama.cpp's deepseek4 omits them):
// FP8-E4M3 on the 448 non-rope KV dims, Hadamard-128 + FP4-E2M1 on indexer
// rows and queries. Definitions: MODEL.md section 3; they match ds4's
// dsv4_fp8_kv_quantize_row_inplace_cpu / dsv4_fp4_act_quantize_row_inplace_cpu.
#pragma once

#include <span>

namespace ds4::cpu {

inline constexpr int kFp8BlockSize = 64;
inline constexpr int kFp4BlockSize = 32;
inline constexpr int kHadamardSize = 128;

// Value of non-negative E4M3FN code 0..126 (code = 8*e + m): e = 0 gives
// m * 2^-9, else (1 + m/8) * 2^(e-7). 126 is 448, the largest finite.
float e4m3_value(int code);

// Nearest E4M3FN value to v (magnitude clamped to 448), ties to the even
// code, sign kept.
float e4m3_round(float v);

// Nearest of {0, .5, 1, 1.5, 2, 3, 4, 6} to |v| clamped to 6, ties to the
// even index, sign kept.
float e2m1_round(float v);

// Per block of 64: amax = max(max|x|, 1e-4), s = 2^ceil(log2(amax/448)),
// x = e4m3_round(clamp(x/s, +-448)) * s. x.size() must be a multiple of 64.
void fp8_e4m3_round_trip(std::span<float> x);

// Per block of 32: amax = max(max|x|, 6*2^-126), s = 2^ceil(log2(amax/6)),
// x = e2m1_round(clamp(x/s, +-6)) * s. x.size() must be a multiple of 32.
void fp4_e2m1_round_trip(std::span<float> x);

// Natural-order (Sylvester) Walsh-Hadamard butterfly, then * 1/sqrt(128):
// orthonormal and its own inverse.
void hadamard128(std::span<float, kHadamardSize> x);

// Indexer QAT: hadamard128 then fp4_e2m1_round_trip on the 128 values.
void indexer_qat(std::span<float, kHadamardSize> x);

}  // namespace ds4::cpu
