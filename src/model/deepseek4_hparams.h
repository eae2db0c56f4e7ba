// Hyperparameters of the `deepseek4` model family (DeepSeek V4 Flash / Pro and
// the small synthetic models the tests use), the rules a file of this family
// must satisfy, and their GGUF metadata form (keys `deepseek4.*`, written the
// way llama.cpp's loader reads them: exact scalar types, arrays of length
// block_count).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::gguf {
class File;
class Writer;
}  // namespace ds4::gguf

namespace ds4::model {

inline constexpr std::string_view kDeepseek4Arch = "deepseek4";
// llama.cpp's expert_gating_func id of sqrt(softplus(logit)), the only router
// score function of the family.
inline constexpr uint32_t kGatingSqrtSoftplus = 4;

struct Deepseek4HParams {
  std::string name = "deepseek4";  // general.name (informational)

  uint32_t n_layer = 0;
  uint32_t n_ctx_train = 0;  // context_length
  uint32_t n_embd = 0;
  uint32_t n_vocab = 0;      // rows of token_embd/output = tokenizer table length

  // Attention: n_head query heads over ONE shared KV row per token that serves
  // as both key and value, so key length = value length = head_dim.
  uint32_t n_head = 0;
  uint32_t n_head_kv = 1;
  uint32_t head_dim = 0;      // attention.key_length = attention.value_length
  uint32_t n_rot = 0;         // rope dims, the last n_rot dims of each head (and indexer head)
  uint32_t q_lora_rank = 0;
  uint32_t o_groups = 0;      // attention.output_group_count
  uint32_t o_lora_rank = 0;
  uint32_t n_swa = 0;         // sliding window, rows incl. the current token

  // Per layer: 0 = sliding window only, 4 = overlapped compressor + indexer,
  // 128 = plain compressor.
  std::vector<uint32_t> compress_ratios;

  uint32_t indexer_n_head = 0;
  uint32_t indexer_head_dim = 0;  // attention.indexer.key_length
  uint32_t indexer_top_k = 0;

  // MoE.
  uint32_t n_expert = 0;
  uint32_t n_expert_used = 0;
  uint32_t n_expert_shared = 1;
  uint32_t n_ff_exp = 0;          // routed and shared expert width
  uint32_t n_hash_layers = 0;     // layers [0, n_hash_layers) route by token id
  uint32_t expert_gating_func = kGatingSqrtSoftplus;
  float expert_weights_scale = 1.5f;
  bool expert_weights_norm = true;
  std::vector<float> swiglu_clamp_exp;    // per layer
  std::vector<float> swiglu_clamp_shexp;  // per layer; empty = same as swiglu_clamp_exp

  // Hyper-connections.
  uint32_t hc_count = 4;
  uint32_t hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;

  float rms_eps = 1e-6f;

  // RoPE: plain base on ratio-0 layers; compressed layers use
  // compress_rope_freq_base with YaRN.
  float rope_freq_base = 10000.0f;
  float compress_rope_freq_base = 160000.0f;
  std::string rope_scaling_type = "yarn";
  float rope_scaling_factor = 16.0f;
  uint32_t rope_scaling_orig_ctx = 65536;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;

  // Derived sizes.
  uint32_t hc_dim() const { return hc_count * n_embd; }                  // flat HC state
  uint32_t hc_mix_dim() const { return (2 + hc_count) * hc_count; }      // pre + post + comb
  uint32_t q_dim() const { return n_head * head_dim; }
  uint32_t o_group_in() const { return n_head * head_dim / o_groups; }  // heads of one group
  uint32_t ratio(uint32_t layer) const { return compress_ratios.at(layer); }
  bool is_hash_layer(uint32_t layer) const { return layer < n_hash_layers; }
  float clamp_shexp(uint32_t layer) const {
    return swiglu_clamp_shexp.empty() ? swiglu_clamp_exp.at(layer) : swiglu_clamp_shexp.at(layer);
  }

  // Throws ds4::Error naming the first rule violated, e.g.
  // "deepseek4 hparams: indexer key length 96 must be a power of two >= 64".
  void validate() const;

  bool operator==(const Deepseek4HParams&) const = default;
};

// Presets. `tiny` and `small` are synthetic test models; `bench` has DeepSeek V4
// Flash's real widths with n_layer layers (default 2).
Deepseek4HParams preset_tiny();
Deepseek4HParams preset_small();
Deepseek4HParams preset_bench(uint32_t n_layer = 2);
// Flash and Pro exactly as published (43 / 61 layers).
Deepseek4HParams preset_flash();
Deepseek4HParams preset_pro();
// "tiny", "small", "bench", "flash", "pro"; nullopt for other names.
std::optional<Deepseek4HParams> preset_by_name(std::string_view name);

// Compress-ratio schedule of the bench preset: llama.cpp needs a ratio-4
// layer, so layers alternate 4, 128 from layer 0 (Flash itself starts 0, 0).
std::vector<uint32_t> bench_compress_ratios(uint32_t n_layer);

// Sets n_layer and resizes the per-layer arrays: compress ratios keep their
// pattern (the preset's schedule extended by its alternating 4/128 tail),
// clamps repeat their last value.
void resize_layers(Deepseek4HParams& hp, uint32_t n_layer);

// Validates, then writes general.architecture/name and every deepseek4.* key.
void write_metadata(const Deepseek4HParams& hp, gguf::Writer& w);

// Throws ds4::Error unless general.architecture (when present) is deepseek4;
// ds4's MTP sidecar is named as such.
void check_architecture(const gguf::File& f);

// Reads every deepseek4.* key llama.cpp and ds4 use, then validates.
// Missing or mistyped keys throw ds4::Error naming the file and key;
// per-layer arrays may be longer than block_count (Flash's carries an MTP
// entry) and are cut to block_count; a file with nextn_predict_layers > 0 (MTP
// inside the main file, llama.cpp's converter layout) is refused.
Deepseek4HParams read_metadata(const gguf::File& f);
// The same for a file whose main stack is the first n_layer of its blocks
// (the caller has decided how block_count and nextn_predict_layers relate,
// see deepseek4_config.h): block_count and nextn_predict_layers are not read,
// and per-layer arrays are cut to n_layer. Float keys may be stored as f32,
// f64 or an integer type, as ds4's loader allows.
Deepseek4HParams read_metadata_layers(const gguf::File& f, uint32_t n_layer);

// Multi-line human summary used by tools.
std::string describe(const Deepseek4HParams& hp);

}  // namespace ds4::model
