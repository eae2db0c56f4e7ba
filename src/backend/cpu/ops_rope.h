// RoPE on the tail of a head: interleaved pairs (2k, 2k+1), YaRN on
// compressed layers. ds4 (rope_tail_ext_inplace) and ggml (rope_yarn +
// ggml_rope_cache_init, NORM mode) write the same float expressions in the
// same order; they differ in the choice of parameters (see rope_params) and
// in that the llama.cpp build fuses multiply-adds (RopeParams::fused).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "backend/cpu/numerics.h"
#include "model/deepseek4_hparams.h"

namespace ds4::cpu {

inline constexpr int kRopeMaxPairs = 64;

struct RopeParams {
  int n_rot = 64;  // rotated dims (pairs = n_rot / 2)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // YaRN interpolation factor 1/16 on compressed layers
  float ext_factor = 0.0f;   // 1 = YaRN ramp on, 0 = off
  float attn_factor = 1.0f;  // chosen so the YaRN magnitude scale cancels
  float corr_lo = 0.0f;      // ramp start/end pair index (15, 25 for Flash)
  float corr_hi = 0.0f;
  // Quality: the `a * b + c` steps as fmas, the way the llama.cpp build
  // compiles ggml's rope_yarn / rotate_pairs (GCC contracts them; seen in
  // ds4-ref-runner tensor dumps): theta = fma(interp, 1 - ramp, extrap *
  // ramp), (a, b) -> (fma(a, c, -(b s)), fma(a, s, b c)), and the YaRN
  // magnitude 1 + 0.1 ln(1/freq_scale) as one fma.
  bool fused = false;
};

// ggml_rope_yarn_corr_dims: floor/ceil of the pair index whose wavelength
// matches beta_fast/beta_slow rotations over n_ctx_orig, clamped to [0, n_dims-1].
std::array<float, 2> rope_yarn_corr_dims(int n_dims, uint32_t n_ctx_orig, float freq_base,
                                         float beta_fast, float beta_slow);

// Parameters for layer `layer`. Ratio-0 layers (and MTP, pass ratio 0): plain
// base, no YaRN. Compressed layers: compress base, freq_scale 1/factor, YaRN.
// Default turns YaRN on whenever factor > 1 (ds4); Quality only when the GGUF
// says rope.scaling.type = "yarn" (llama.cpp; otherwise /factor on all pairs).
// Both use beta 32/1: ds4 compiles them in, llama.cpp hard-codes them.
RopeParams rope_params(const model::Deepseek4HParams& hp, uint32_t compress_ratio, Numerics n);

// cos/sin of every pair's angle at one position, shared by all heads.
struct RopeCache {
  int n_pairs = 0;
  std::array<float, kRopeMaxPairs> cos{};
  std::array<float, kRopeMaxPairs> sin{};  // already negated when inverse
  bool fused = false;                      // RopeParams::fused
};

// The angle of each pair at `pos`: theta_extrap starts at (float)pos and is
// multiplied by powf(base, -2/n_rot) once per pair (an iterative f32 product,
// not a per-pair pow), then YaRN-mixed with its /factor interpolation.
void rope_thetas(const RopeParams& p, int64_t pos, std::span<float> theta);

RopeCache rope_cache(const RopeParams& p, int64_t pos, bool inverse);

// Rotates tail[0..n_rot) in place: (a, b) -> (a*c - b*s, a*s + b*c).
void rope_apply(std::span<float> tail, const RopeCache& cache);

// Convenience: rope_apply to the last n_rot dims of each of n_head rows of
// width head_dim.
void rope_heads(std::span<float> x, int n_head, int head_dim, const RopeCache& cache);

}  // namespace ds4::cpu
