// A random-weight checkpoint in the official DeepSeek V4 safetensors format,
// for tests of the checkpoint reader (model/hf_checkpoint.h): config.json
// with the release's keys, model.safetensors.index.json and two shards.
// Values are drawn as ds4-mkmodel draws them (weight_init), then stored as the
// release stores each tensor: FP8 E4M3 with F8_E8M0 128 x 128 block scales
// (attention projections, indexer q_b, shared experts), FP4 E2M1 pairs in I8
// with F8_E8M0 scales per 32 (routed experts, one tensor per expert), BF16
// (embedding, head, router, compressors, indexer proj, norms), F32 (HC,
// ape, sinks, router bias) and I64 (tid2eid). The encoders here are written
// from the format definitions, independently of the reader.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/gguf.h"
#include "model/deepseek4_hparams.h"
#include "model/safetensors.h"

namespace ds4::test {

// Writes the checkpoint of hp into `folder` (created).
void write_synthetic_checkpoint(const model::Deepseek4HParams& hp, uint64_t seed, const std::string& folder);

// The format's scalars, from their definitions (sign, exponent, mantissa).
float fp8_e4m3_value(uint8_t b);
float fp4_e2m1_value(uint8_t nibble);
float e8m0_scale(uint8_t e);  // 2^(e - 127)

// Whether an MXFP4 expert tensor of a converted file holds exactly the FP4
// values of the checkpoint's experts (each value through ggml's to_float
// against the pairs and scales decoded by the definitions above): "" when it
// does, else the first difference. `expert_base(e)` is expert e's checkpoint
// name without ".weight" / ".scale" ("layers.1.ffn.experts.5.w1").
std::string fp4_experts_mismatch(const gguf::TensorInfo& t, const model::SafetensorsSet& set,
                                 const std::function<std::string(uint64_t expert)>& expert_base);

}  // namespace ds4::test
