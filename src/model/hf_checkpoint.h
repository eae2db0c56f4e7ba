// The official DeepSeek V4 checkpoint (Hugging Face safetensors) as a source
// for ds4-quantize: config.json to hyperparameters, tensor names mapped to
// the GGUF layout of MODEL.md §2.2 (llama.cpp's converter's mapping), and the
// stored formats decoded:
//   FP8 E4M3 matrices with F8_E8M0 scales per 128 x 128 block (`NAME.scale`):
//     w[i][j] = e4m3(q[i][j]) * 2^(s[i/128][j/128] - 127);
//   FP4 E2M1 routed experts, `layers.N.ffn.experts.E.w{1,2,3}.weight` I8
//     [out, in/2] (element 2k in the low nibble) with F8_E8M0 scales per 32
//     inputs: stacked into [in, out, n_expert] tensors; their native form is
//     MXFP4 (the scale byte kept, the nibbles regrouped so byte j holds
//     elements j and j + 16: every value bit-identical);
//   BF16 and F32 tensors as they are (norms, stored BF16, convert to F32 as
//     the converter writes them); the hash layers' tid2eid I64 -> I32.
// GGUF ne is the reversed safetensors shape (no transposes). The MTP block
// (`mtp.0.*`) is not part of the main model and is left out of it, as
// llama.cpp's converter does; checkpoint_mtp_input writes it as a file of its
// own in either layout of model/deepseek4_mtp.h. A missing tensor, a dtype or
// shape that does not fit, or a tid2eid entry outside [0, n_expert) gets one
// error naming the shard and tensor.
#pragma once

#include <cstdint>
#include <string>

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_metadata.h"
#include "model/deepseek4_mtp.h"
#include "model/requantize.h"
#include "model/safetensors.h"

namespace ds4::model {

// config.json's keys (hidden_size, num_hidden_layers, n_routed_experts,
// compress_ratios, ...) as hyperparameters; validated. Throws ds4::Error
// naming the file and key.
Deepseek4HParams hparams_from_config(const std::string& config_json_path);

// The checkpoint's name for a GGUF tensor ("blk.3.attn_q_a.weight" ->
// "layers.3.attn.wq_a.weight"); for routed expert tensors the name of expert
// 0's matrix. Empty when the GGUF name has no counterpart.
std::string checkpoint_name(const std::string& gguf_name);

// A checkpoint folder (config.json, model.safetensors.index.json or
// model.safetensors, tokenizer.json) opened as a requantize input. The
// metadata is the config's hyperparameters in `flavour` plus the tokenizer
// imported from tokenizer.json when the folder has one (else the synthetic
// tokenizer of the vocabulary size, for test checkpoints). `set` must outlive
// the input.
RequantizeInput checkpoint_input(const SafetensorsSet& set, const Deepseek4HParams& hp,
                                 MetadataFlavour flavour = MetadataFlavour::Ds4);

// config.json's num_nextn_predict_layers (0 when absent); when there is an
// MTP block, its compress_ratios entry (index n_layer) must be 0. Throws
// ds4::Error naming the file and key.
uint32_t mtp_blocks_from_config(const std::string& config_json_path, const Deepseek4HParams& hp);

// The checkpoint's MTP block (mtp.0.*) as a requantize input in `layout`:
// ds4's sidecar (its metadata: architecture deepseek4_mtp_support, the
// model's deepseek4.* keys, nextn_predict_layers and mtp_layer_count 1; no
// tokenizer), or llama.cpp's MTP-only file (the model's embedding, output norm
// and head beside the block; metadata in `flavour` for layers + 1 blocks with
// nextn_predict_layers 1, and the tokenizer). Refused when config.json
// declares no MTP block.
RequantizeInput checkpoint_mtp_input(const SafetensorsSet& set, const Deepseek4HParams& hp, MtpLayout layout,
                                     MetadataFlavour flavour = MetadataFlavour::Ds4);

// Scalar decoders, exposed for tests.
float e4m3_to_f32(uint8_t b);   // NaN for 0x7f / 0xff, no infinities
float e8m0_to_f32(uint8_t e);   // 2^(e - 127); e = 0 -> 2^-127 (as the converters)
float e2m1_to_f32(uint8_t nibble);

}  // namespace ds4::model
