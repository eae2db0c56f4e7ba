// The two forms of a deepseek4 file's metadata in circulation:
//   - ds4's (write_metadata of deepseek4_hparams.h): every deepseek4.* key as
//     ds4's and llama.cpp's loaders read it, vocab_size included, per-layer
//     arrays of block_count entries (compress ratios as u32);
//   - llama.cpp's converter's (convert_hf_to_gguf.py, DeepseekV4Model): no
//     vocab_size; general.type "model", general.size_label (counted from the
//     file's tensors: "256x8.4B") and general.quantization_version 2;
//     compress_ratios as i32 with the checkpoint's MTP entry (block_count + 1
//     entries in a model file); swiglu_clamp_shexp always; expert_gating_func;
//     embedding_length_out; in an MTP-only file (layers + 1 blocks)
//     nextn_predict_layers. Keys in the converter's order.
// Both load in both engines (docs/model-files.md lists the differences).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"

namespace ds4::gguf {
class Writer;
}

namespace ds4::model {

enum class MetadataFlavour : uint8_t { Ds4, Llama };

// "ds4" or "llama"; nullopt otherwise.
std::optional<MetadataFlavour> metadata_flavour_from_name(std::string_view name);

// general.* and deepseek4.* keys of a file holding `tensors` with these
// hyperparameters, in `flavour`. n_nextn > 0: llama.cpp's MTP-only file, whose
// hp counts the MTP blocks in n_layer (with_mtp_block of deepseek4_mtp.h).
void write_model_metadata(const Deepseek4HParams& hp, MetadataFlavour flavour, std::span<const TensorSpec> tensors,
                          gguf::Writer& w, uint32_t n_nextn = 0);

// llama.cpp's general.size_label of a file holding `tensors`: "<experts>x<size
// of the shared tensors plus one expert>", e.g. "256x8.4B"; the total size
// when there are no routed experts.
std::string llama_size_label(std::span<const TensorSpec> tensors);

// ds4's MTP sidecar (model/deepseek4_mtp.h): general.architecture
// "deepseek4_mtp_support", general.name, the model's deepseek4.* keys,
// nextn_predict_layers and mtp_layer_count 1.
void write_mtp_sidecar_metadata(const Deepseek4HParams& hp, gguf::Writer& w);

}  // namespace ds4::model
