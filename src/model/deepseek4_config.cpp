#include "model/deepseek4_config.h"

#include <string_view>

#include "core/error.h"
#include "core/gguf.h"

namespace ds4::model {
namespace {

bool has_tensor_with_prefix(const gguf::File& f, std::string_view prefix) {
  for (const gguf::TensorInfo& t : f.tensors())
    if (std::string_view(t.name).starts_with(prefix)) return true;
  return false;
}

std::string blk(uint32_t il) { return "blk." + std::to_string(il) + "."; }

}  // namespace

Deepseek4Config read_config(const gguf::File& f) {
  Deepseek4Config cfg;
  (void)f.get_string("general.architecture");  // required here
  check_architecture(f);

  const std::string arch_prefix = std::string(kDeepseek4Arch) + ".";
  cfg.block_count = f.get_u32(arch_prefix + "block_count");
  cfg.nextn_declared = f.find_u32(arch_prefix + "nextn_predict_layers").value_or(0);
  if (cfg.nextn_declared > cfg.block_count)
    throw Error(f.path() + ": metadata key '" + arch_prefix + "nextn_predict_layers' is " +
                std::to_string(cfg.nextn_declared) + ", more than block_count " + std::to_string(cfg.block_count));

  uint32_t n_layer = cfg.block_count;
  if (cfg.nextn_declared > 0) {
    const uint32_t n_main = cfg.block_count - cfg.nextn_declared;
    if (!f.find_tensor("blk.0.attn_norm.weight"))
      throw Error(f.path() + ": declares " + std::to_string(cfg.nextn_declared) +
                  " MTP layer(s) and has no main layers (blk.0.attn_norm.weight missing): a llama.cpp MTP-only "
                  "file, not a model");
    // llama.cpp's probe: the fused nextn projections mark an MTP block in the file.
    if (has_tensor_with_prefix(f, blk(n_main) + "nextn.")) {
      n_layer = n_main;
      cfg.mtp_layers_in_file = cfg.nextn_declared;
      cfg.notes.push_back("llama.cpp layout: block_count " + std::to_string(cfg.block_count) + " includes " +
                          std::to_string(cfg.nextn_declared) + " MTP block(s) at blk." + std::to_string(n_main) +
                          "+, not run");
    } else if (f.find_tensor(blk(cfg.block_count - 1) + "attn_norm.weight")) {
      // ds4 convention: block_count counts the main stack; the declared MTP
      // block lives in a separate file.
      cfg.notes.push_back("MTP declared (nextn_predict_layers " + std::to_string(cfg.nextn_declared) +
                          ") but not in this file; block_count " + std::to_string(cfg.block_count) +
                          " is the main stack");
    } else {
      // block_count counted the MTP block whose tensors were left out.
      n_layer = n_main;
      cfg.notes.push_back("block_count " + std::to_string(cfg.block_count) + " counts " +
                          std::to_string(cfg.nextn_declared) + " MTP block(s) absent from this file; main stack " +
                          std::to_string(n_main) + " layers");
    }
  }

  if (const gguf::Value* r = f.find(arch_prefix + "attention.compress_ratios"); r && r->is_array())
    cfg.compress_ratio_entries = static_cast<uint32_t>(r->size());
  cfg.hp = read_metadata_layers(f, n_layer);
  if (cfg.compress_ratio_entries > n_layer)
    cfg.notes.push_back("compress_ratios has " + std::to_string(cfg.compress_ratio_entries) +
                        " entries; the first " + std::to_string(n_layer) + " are used");
  cfg.tokenizer_pre = f.find_string("tokenizer.ggml.pre").value_or("");
  return cfg;
}

}  // namespace ds4::model
