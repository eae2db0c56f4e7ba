#include "model/deepseek4_metadata.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/gguf_writer.h"
#include "model/deepseek4_mtp.h"

namespace ds4::model {

namespace {

std::string key(std::string_view suffix) { return std::string(kDeepseek4Arch) + "." + std::string(suffix); }

// gguf-py's model_weight_count_rounded_notation(count, min_digits = 2).
std::string rounded_count(uint64_t count) {
  const auto c = static_cast<double>(count);
  double scaled = c * 1e-3;
  const char* suffix = "K";
  if (c > 1e12) {
    scaled = c * 1e-12, suffix = "T";
  } else if (c > 1e9) {
    scaled = c * 1e-9, suffix = "B";
  } else if (c > 1e6) {
    scaled = c * 1e-6, suffix = "M";
  }
  // Digits before the point of Python's round() (half to even), leading zeros dropped.
  const double r = std::nearbyint(scaled);
  std::string whole = std::to_string(static_cast<uint64_t>(r));
  while (!whole.empty() && whole.front() == '0') whole.erase(whole.begin());
  const int decimals = std::max(2 - static_cast<int>(whole.size()), 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, scaled, suffix);
  return buf;
}

// The converter's keys, in its order (TextModel.set_gguf_parameters, then DeepseekV4Model's).
void write_llama_keys(const Deepseek4HParams& hp, std::span<const TensorSpec> tensors, uint32_t n_nextn,
                      gguf::Writer& w) {
  w.set_string("general.architecture", std::string(kDeepseek4Arch));
  w.set_string("general.type", "model");
  if (!hp.name.empty()) w.set_string("general.name", hp.name);  // gguf-py writes no empty string
  w.set_string("general.size_label", llama_size_label(tensors));
  w.set_u32(key("block_count"), hp.n_layer);
  w.set_u32(key("context_length"), hp.n_ctx_train);
  w.set_u32(key("embedding_length"), hp.n_embd);
  w.set_u32(key("attention.head_count"), hp.n_head);
  w.set_u32(key("attention.head_count_kv"), hp.n_head_kv);
  w.set_string(key("rope.scaling.type"), hp.rope_scaling_type);
  w.set_f32(key("rope.scaling.factor"), hp.rope_scaling_factor);
  w.set_u32(key("rope.scaling.original_context_length"), hp.rope_scaling_orig_ctx);
  w.set_f32(key("rope.scaling.yarn_beta_fast"), hp.yarn_beta_fast);
  w.set_f32(key("rope.scaling.yarn_beta_slow"), hp.yarn_beta_slow);
  w.set_f32(key("rope.freq_base"), hp.rope_freq_base);
  w.set_f32(key("attention.layer_norm_rms_epsilon"), hp.rms_eps);
  w.set_u32(key("expert_count"), hp.n_expert);
  w.set_u32(key("expert_used_count"), hp.n_expert_used);
  w.set_u32(key("expert_gating_func"), hp.expert_gating_func);
  w.set_u32(key("attention.key_length"), hp.head_dim);
  w.set_u32(key("attention.value_length"), hp.head_dim);
  w.set_u32(key("rope.dimension_count"), hp.n_rot);
  w.set_u32(key("attention.q_lora_rank"), hp.q_lora_rank);
  w.set_u32(key("attention.sliding_window"), hp.n_swa);
  w.set_u32(key("expert_feed_forward_length"), hp.n_ff_exp);
  w.set_u32(key("expert_shared_count"), hp.n_expert_shared);
  w.set_f32(key("expert_weights_scale"), hp.expert_weights_scale);
  w.set_bool(key("expert_weights_norm"), hp.expert_weights_norm);
  w.set_array_f32(key("swiglu_clamp_exp"), hp.swiglu_clamp_exp);
  std::vector<float> shexp(hp.n_layer);
  for (uint32_t l = 0; l < hp.n_layer; ++l) shexp[l] = hp.clamp_shexp(l);
  w.set_array_f32(key("swiglu_clamp_shexp"), shexp);
  w.set_u32(key("attention.indexer.head_count"), hp.indexer_n_head);
  w.set_u32(key("attention.indexer.key_length"), hp.indexer_head_dim);
  w.set_u32(key("attention.indexer.top_k"), hp.indexer_top_k);
  w.set_u32(key("attention.output_group_count"), hp.o_groups);
  w.set_u32(key("attention.output_lora_rank"), hp.o_lora_rank);
  // config.json's list as it is: one entry per block and the MTP block's (ratio 0).
  std::vector<int32_t> ratios(hp.compress_ratios.begin(), hp.compress_ratios.end());
  if (n_nextn == 0) ratios.push_back(0);
  w.set_array_i32(key("attention.compress_ratios"), ratios);
  w.set_f32(key("attention.compress_rope_freq_base"), hp.compress_rope_freq_base);
  w.set_u32(key("hyper_connection.count"), hp.hc_count);
  w.set_u32(key("hyper_connection.sinkhorn_iterations"), hp.hc_sinkhorn_iters);
  w.set_f32(key("hyper_connection.epsilon"), hp.hc_eps);
  w.set_u32(key("hash_layer_count"), hp.n_hash_layers);
  w.set_u32(key("embedding_length_out"), hp.hc_dim());
  if (n_nextn > 0) w.set_u32(key("nextn_predict_layers"), n_nextn);
  w.set_u32("general.quantization_version", 2);
}

}  // namespace

std::optional<MetadataFlavour> metadata_flavour_from_name(std::string_view name) {
  if (name == "ds4") return MetadataFlavour::Ds4;
  if (name == "llama") return MetadataFlavour::Llama;
  return std::nullopt;
}

std::string llama_size_label(std::span<const TensorSpec> tensors) {
  uint64_t shared = 0, expert = 0, expert_sum = 0, expert_tensors = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t n = t.n_elements();
    if (t.name.find("_exps.") != std::string::npos && t.ne.size() >= 3) {
      expert += n / t.ne[2];
      expert_sum += t.ne[2];
      ++expert_tensors;
    } else {
      shared += n;
    }
  }
  if (expert_tensors == 0) return rounded_count(shared);
  return std::to_string(expert_sum / expert_tensors) + "x" + rounded_count(shared + expert);
}

void write_model_metadata(const Deepseek4HParams& hp, MetadataFlavour flavour, std::span<const TensorSpec> tensors,
                          gguf::Writer& w, uint32_t n_nextn) {
  hp.validate();
  if (flavour == MetadataFlavour::Llama) {
    write_llama_keys(hp, tensors, n_nextn, w);
    return;
  }
  write_metadata(hp, w);
  if (n_nextn > 0) w.set_u32(key("nextn_predict_layers"), n_nextn);
}

void write_mtp_sidecar_metadata(const Deepseek4HParams& hp, gguf::Writer& w) {
  write_metadata(hp, w);
  w.set_string("general.architecture", std::string(kDs4MtpArch));
  w.set_string("general.name", hp.name + " MTP support");
  w.set_u32(key("nextn_predict_layers"), 1);
  w.set_u32(key("mtp_layer_count"), 1);
}

}  // namespace ds4::model
