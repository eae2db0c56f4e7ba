// The two numerics every backend computes the DeepSeek V4 forward pass in
// (DESIGN.md "Numerics").
#pragma once

namespace ds4::backend {

// Default: what antirez/ds4's CPU path (and DeepSeek's own inference, where it
// has an opinion) computes: RMSNorm sums of exact double products, log1p
// softplus with +-20 branches, two-branch sigmoid in the output head and SiLU,
// router weight folded into the SwiGLU output before the down projection,
// FP8/FP4 QAT round trips (the caller applies those).
//
// Quality (--quality): what llama.cpp's deepseek4 graph computes on ggml's CPU
// backend in reference settings, op by op in ggml's float order: RMSNorm sums
// of float products widened to double, log(1+exp) softplus, 1/(1+exp(-x))
// sigmoid everywhere, Sinkhorn divisors that start from eps, softmax sums in
// double, router weight applied to the down-projection output, no QAT.
enum class Numerics { Default, Quality };

}  // namespace ds4::backend
