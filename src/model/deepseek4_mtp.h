// The MTP (multi-token prediction) block of DeepSeek V4: one extra decoder
// block, sliding-window attention only (compress ratio 0) with top-k routing,
// that drafts the next token from the main model's final HC state and a token
// embedding (MODEL.md §9). The official checkpoint ships it as `mtp.0.*`; two
// GGUF layouts of it are in circulation:
//   - ds4's sidecar (`general.architecture` = "deepseek4_mtp_support"): 32
//     tensors `mtp.0.*` -- hc_head_{fn,base,scale}, e_proj, h_proj, enorm,
//     hnorm, norm and the block's tensors under the `mtp.0.` prefix -- beside a
//     main model file; no tokenizer, no embedding or head of its own;
//   - llama.cpp's MTP-only conversion (convert_hf_to_gguf.py --mtp): a
//     deepseek4 file with block_count = layers + 1 and nextn_predict_layers 1
//     holding token_embd, output_norm, output, output_hc_* (the MTP block's
//     hc_head), the block as blk.<layers>.* and blk.<layers>.nextn.{eh_proj,
//     enorm, hnorm, shared_head_norm}, where eh_proj is e_proj and h_proj side
//     by side in each row ([2 n_embd, n_embd]: the normalized embedding is
//     concatenated before the normalized HC state).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"

namespace ds4::model {

enum class MtpLayout : uint8_t { Ds4Sidecar, LlamaNextn };

inline constexpr std::string_view kDs4MtpArch = "deepseek4_mtp_support";

// The tensors of the MTP block of a model with these hyperparameters in the
// given layout, in write order. The block is layer hp.n_layer (its `layer`),
// ratio 0, routed by top-k with exp_probs_b.
std::vector<TensorSpec> mtp_tensors(const Deepseek4HParams& hp, MtpLayout layout);

// The hyperparameters of the llama.cpp layout's file: n_layer + 1 blocks, the
// last one of ratio 0 with the clamps of the last main layer.
Deepseek4HParams with_mtp_block(const Deepseek4HParams& hp);

}  // namespace ds4::model
