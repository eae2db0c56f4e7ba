#include "model/deepseek4_hparams.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"

namespace ds4::model {
namespace {

// llama.cpp's fixed-size per-layer and per-expert tables.
constexpr uint32_t kMaxLayers = 512;
constexpr uint32_t kMaxExperts = 1024;
// The FP8 KV simulation rounds the non-rope part of each row in blocks of 64.
constexpr uint32_t kFp8Block = 64;

std::string key(std::string_view suffix) {
  std::string k(kDeepseek4Arch);
  k += '.';
  k += suffix;
  return k;
}

[[noreturn]] void violated(const std::string& rule) { throw Error("deepseek4 hparams: " + rule); }

bool is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string join(const std::vector<uint32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

void require_positive(uint32_t v, const char* what) {
  if (v == 0) violated(std::string(what) + " must be at least 1");
}

void require_positive_finite(float v, const char* what) {
  if (!(std::isfinite(v) && v > 0.0f)) violated(std::string(what) + " must be a positive finite number");
}

// Flash's layout: two sliding-only layers, then ratio 4 on even and 128 on odd layers.
std::vector<uint32_t> flash_compress_ratios(uint32_t n_layer) {
  std::vector<uint32_t> r(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) r[il] = il < 2 ? 0 : (il % 2 == 0 ? 4 : 128);
  return r;
}

}  // namespace

void Deepseek4HParams::validate() const {
  if (n_layer == 0 || n_layer > kMaxLayers)
    violated("block count " + std::to_string(n_layer) + " must be 1.." + std::to_string(kMaxLayers));
  require_positive(n_ctx_train, "context length");
  require_positive(n_embd, "embedding length");
  require_positive(n_vocab, "vocab size");
  require_positive(n_head, "head count");
  require_positive(head_dim, "head dim (key length)");
  require_positive(q_lora_rank, "q LoRA rank");
  require_positive(o_groups, "output group count");
  require_positive(o_lora_rank, "output LoRA rank");
  require_positive(n_swa, "sliding window");

  if (n_head_kv != 1)
    violated("KV head count " + std::to_string(n_head_kv) + " must be 1 (one shared KV row per token)");
  if (n_head % o_groups != 0)
    violated("output group count " + std::to_string(o_groups) + " must divide head count " + std::to_string(n_head));

  if (n_rot == 0 || n_rot % 2 != 0) violated("rope dims " + std::to_string(n_rot) + " must be even and at least 2");
  if (n_rot > head_dim)
    violated("rope dims " + std::to_string(n_rot) + " must not exceed head dim " + std::to_string(head_dim));
  if ((head_dim - n_rot) % kFp8Block != 0)
    violated("head dim " + std::to_string(head_dim) + " minus rope dims " + std::to_string(n_rot) +
             " must be a multiple of 64 (FP8 KV blocks)");

  if (compress_ratios.size() != n_layer)
    violated("compress ratios list has " + std::to_string(compress_ratios.size()) + " entries, block count is " +
             std::to_string(n_layer));
  bool any_ratio4 = false;
  for (uint32_t il = 0; il < n_layer; ++il) {
    const uint32_t r = compress_ratios[il];
    if (r != 0 && r != 4 && r != 128)
      violated("compress ratio " + std::to_string(r) + " of layer " + std::to_string(il) + " must be 0, 4 or 128");
    any_ratio4 |= r == 4;
  }
  if (!any_ratio4) violated("compress ratios [" + join(compress_ratios) + "] need at least one ratio-4 layer");

  require_positive(indexer_n_head, "indexer head count");
  require_positive(indexer_top_k, "indexer top-k");
  if (indexer_head_dim < 64 || !is_pow2(indexer_head_dim))
    violated("indexer key length " + std::to_string(indexer_head_dim) +
             " must be a power of two >= 64 (Hadamard rotation)");
  if (n_rot > indexer_head_dim)
    violated("rope dims " + std::to_string(n_rot) + " must not exceed indexer key length " +
             std::to_string(indexer_head_dim));

  if (n_expert == 0 || n_expert > kMaxExperts)
    violated("expert count " + std::to_string(n_expert) + " must be 1.." + std::to_string(kMaxExperts));
  if (n_expert_used == 0 || n_expert_used > n_expert)
    violated("experts used " + std::to_string(n_expert_used) + " must be 1..expert count " + std::to_string(n_expert));
  require_positive(n_expert_shared, "shared expert count");
  require_positive(n_ff_exp, "expert FF length");
  if (n_hash_layers > n_layer)
    violated("hash layer count " + std::to_string(n_hash_layers) + " exceeds block count " + std::to_string(n_layer));
  if (expert_gating_func != kGatingSqrtSoftplus)
    violated("expert gating function " + std::to_string(expert_gating_func) + " must be 4 (sqrt-softplus)");
  require_positive_finite(expert_weights_scale, "expert weights scale");

  if (swiglu_clamp_exp.size() != n_layer)
    violated("swiglu clamp list has " + std::to_string(swiglu_clamp_exp.size()) + " entries, block count is " +
             std::to_string(n_layer));
  if (!swiglu_clamp_shexp.empty() && swiglu_clamp_shexp.size() != n_layer)
    violated("shared-expert swiglu clamp list has " + std::to_string(swiglu_clamp_shexp.size()) +
             " entries, block count is " + std::to_string(n_layer));
  for (float c : swiglu_clamp_exp)
    if (!(std::isfinite(c) && c >= 0.0f)) violated("swiglu clamp values must be finite and >= 0");
  for (float c : swiglu_clamp_shexp)
    if (!(std::isfinite(c) && c >= 0.0f)) violated("swiglu clamp values must be finite and >= 0");

  if (hc_count != 4) violated("hyper-connection count " + std::to_string(hc_count) + " must be 4");
  require_positive(hc_sinkhorn_iters, "Sinkhorn iteration count");
  require_positive_finite(hc_eps, "hyper-connection epsilon");
  require_positive_finite(rms_eps, "RMS norm epsilon");
  require_positive_finite(rope_freq_base, "rope base");
  require_positive_finite(compress_rope_freq_base, "compressed-layer rope base");
  if (rope_scaling_type != "yarn")
    violated("rope scaling type '" + rope_scaling_type + "' must be 'yarn' (compressed layers use YaRN)");
  require_positive_finite(rope_scaling_factor, "rope scaling factor");
  require_positive(rope_scaling_orig_ctx, "rope scaling original context");
  require_positive_finite(yarn_beta_fast, "YaRN beta fast");
  require_positive_finite(yarn_beta_slow, "YaRN beta slow");
}

std::vector<uint32_t> bench_compress_ratios(uint32_t n_layer) {
  std::vector<uint32_t> r(n_layer);
  for (uint32_t il = 0; il < n_layer; ++il) r[il] = il % 2 == 0 ? 4 : 128;
  return r;
}

void resize_layers(Deepseek4HParams& hp, uint32_t n_layer) {
  auto& r = hp.compress_ratios;
  while (r.size() < n_layer) {
    // Continue the alternating compressed tail: 4 after anything but 4.
    r.push_back(!r.empty() && r.back() == 4 ? 128 : 4);
  }
  r.resize(n_layer);
  auto resize_clamps = [n_layer](std::vector<float>& c) {
    if (c.empty()) return;
    const float last = c.back();
    c.resize(n_layer, last);
  };
  resize_clamps(hp.swiglu_clamp_exp);
  if (hp.swiglu_clamp_exp.empty()) hp.swiglu_clamp_exp.assign(n_layer, 10.0f);
  resize_clamps(hp.swiglu_clamp_shexp);
  // Keep at least one top-k routed layer when the preset has hash layers.
  hp.n_hash_layers = std::min(hp.n_hash_layers, n_layer > 1 ? n_layer - 1 : 0u);
  hp.n_layer = n_layer;
}

Deepseek4HParams preset_flash() {
  Deepseek4HParams hp;
  hp.name = "deepseek4-flash";
  hp.n_layer = 43;
  hp.n_ctx_train = 1048576;
  hp.n_embd = 4096;
  hp.n_vocab = 129280;
  hp.n_head = 64;
  hp.head_dim = 512;
  hp.n_rot = 64;
  hp.q_lora_rank = 1024;
  hp.o_groups = 8;
  hp.o_lora_rank = 1024;
  hp.n_swa = 128;
  hp.compress_ratios = flash_compress_ratios(hp.n_layer);
  hp.indexer_n_head = 64;
  hp.indexer_head_dim = 128;
  hp.indexer_top_k = 512;
  hp.n_expert = 256;
  hp.n_expert_used = 6;
  hp.n_expert_shared = 1;
  hp.n_ff_exp = 2048;
  hp.n_hash_layers = 3;
  hp.expert_weights_scale = 1.5f;
  hp.swiglu_clamp_exp.assign(hp.n_layer, 10.0f);
  return hp;
}

Deepseek4HParams preset_pro() {
  Deepseek4HParams hp = preset_flash();
  hp.name = "deepseek4-pro";
  hp.n_layer = 61;
  hp.n_embd = 7168;
  hp.n_head = 128;
  hp.q_lora_rank = 1536;
  hp.o_groups = 16;
  hp.o_lora_rank = 1024;
  hp.n_expert = 384;
  hp.n_ff_exp = 3072;
  hp.indexer_top_k = 1024;
  hp.expert_weights_scale = 2.5f;
  hp.compress_ratios.assign(hp.n_layer, 0);
  for (uint32_t il = 0; il < hp.n_layer; ++il) hp.compress_ratios[il] = il < 2 ? 128 : (il % 2 == 0 ? 4 : 128);
  hp.swiglu_clamp_exp.assign(hp.n_layer, 10.0f);
  return hp;
}

Deepseek4HParams preset_bench(uint32_t n_layer) {
  Deepseek4HParams hp = preset_flash();
  hp.name = "deepseek4-bench";
  hp.n_layer = n_layer;
  hp.compress_ratios = bench_compress_ratios(n_layer);
  hp.swiglu_clamp_exp.assign(n_layer, 10.0f);
  hp.n_hash_layers = std::min(3u, n_layer > 1 ? n_layer - 1 : 0u);
  return hp;
}

Deepseek4HParams preset_tiny() {
  Deepseek4HParams hp;
  hp.name = "deepseek4-tiny";
  hp.n_layer = 6;
  hp.n_ctx_train = 4096;
  hp.n_embd = 256;  // a K-quant super-block: every mix can quantise every matrix
  hp.n_vocab = 512;
  hp.n_head = 4;
  hp.head_dim = 128;
  hp.n_rot = 64;
  hp.q_lora_rank = 128;
  hp.o_groups = 2;
  hp.o_lora_rank = 64;
  hp.n_swa = 8;
  // Every attention kind, two ratio-4 layers apart so the indexer runs on
  // more than one cache; the first layers are hash routed as in Flash.
  hp.compress_ratios = {0, 4, 128, 4, 128, 4};
  hp.indexer_n_head = 4;
  hp.indexer_head_dim = 128;
  hp.indexer_top_k = 4;  // << 150 compressed rows at 600 tokens
  hp.n_expert = 16;
  hp.n_expert_used = 4;
  hp.n_expert_shared = 1;
  hp.n_ff_exp = 256;
  hp.n_hash_layers = 2;
  hp.swiglu_clamp_exp.assign(hp.n_layer, 10.0f);
  return hp;
}

Deepseek4HParams preset_small() {
  Deepseek4HParams hp;
  hp.name = "deepseek4-small";
  hp.n_layer = 8;
  hp.n_ctx_train = 8192;
  hp.n_embd = 512;
  hp.n_vocab = 1024;
  hp.n_head = 8;
  hp.head_dim = 512;  // Flash's head: 448 FP8 dims + 64 rope dims
  hp.n_rot = 64;
  hp.q_lora_rank = 256;
  hp.o_groups = 4;
  hp.o_lora_rank = 128;
  hp.n_swa = 32;
  hp.compress_ratios = flash_compress_ratios(hp.n_layer);
  hp.indexer_n_head = 8;
  hp.indexer_head_dim = 128;
  hp.indexer_top_k = 16;
  hp.n_expert = 16;
  hp.n_expert_used = 4;
  hp.n_expert_shared = 1;
  hp.n_ff_exp = 256;
  hp.n_hash_layers = 3;
  hp.swiglu_clamp_exp.assign(hp.n_layer, 10.0f);
  return hp;
}

std::optional<Deepseek4HParams> preset_by_name(std::string_view name) {
  if (name == "tiny") return preset_tiny();
  if (name == "small") return preset_small();
  if (name == "bench") return preset_bench();
  if (name == "flash") return preset_flash();
  if (name == "pro") return preset_pro();
  return std::nullopt;
}

void write_metadata(const Deepseek4HParams& hp, gguf::Writer& w) {
  hp.validate();
  w.set_string("general.architecture", std::string(kDeepseek4Arch));
  w.set_string("general.name", hp.name);
  // llama.cpp reads each scalar with an exact type: u32 counts, f32 floats.
  w.set_u32(key("block_count"), hp.n_layer);
  w.set_u32(key("context_length"), hp.n_ctx_train);
  w.set_u32(key("embedding_length"), hp.n_embd);
  w.set_u32(key("vocab_size"), hp.n_vocab);
  w.set_u32(key("attention.head_count"), hp.n_head);
  w.set_u32(key("attention.head_count_kv"), hp.n_head_kv);
  w.set_u32(key("attention.key_length"), hp.head_dim);
  w.set_u32(key("attention.value_length"), hp.head_dim);
  w.set_u32(key("rope.dimension_count"), hp.n_rot);
  w.set_f32(key("rope.freq_base"), hp.rope_freq_base);
  w.set_string(key("rope.scaling.type"), hp.rope_scaling_type);
  w.set_f32(key("rope.scaling.factor"), hp.rope_scaling_factor);
  w.set_u32(key("rope.scaling.original_context_length"), hp.rope_scaling_orig_ctx);
  w.set_f32(key("rope.scaling.yarn_beta_fast"), hp.yarn_beta_fast);
  w.set_f32(key("rope.scaling.yarn_beta_slow"), hp.yarn_beta_slow);
  w.set_f32(key("attention.layer_norm_rms_epsilon"), hp.rms_eps);
  w.set_u32(key("attention.q_lora_rank"), hp.q_lora_rank);
  w.set_u32(key("attention.sliding_window"), hp.n_swa);
  w.set_u32(key("attention.output_group_count"), hp.o_groups);
  w.set_u32(key("attention.output_lora_rank"), hp.o_lora_rank);
  w.set_array_u32(key("attention.compress_ratios"), hp.compress_ratios);
  w.set_f32(key("attention.compress_rope_freq_base"), hp.compress_rope_freq_base);
  w.set_u32(key("attention.indexer.head_count"), hp.indexer_n_head);
  w.set_u32(key("attention.indexer.key_length"), hp.indexer_head_dim);
  w.set_u32(key("attention.indexer.top_k"), hp.indexer_top_k);
  w.set_u32(key("expert_count"), hp.n_expert);
  w.set_u32(key("expert_used_count"), hp.n_expert_used);
  w.set_u32(key("expert_shared_count"), hp.n_expert_shared);
  w.set_u32(key("expert_feed_forward_length"), hp.n_ff_exp);
  w.set_u32(key("expert_gating_func"), hp.expert_gating_func);
  w.set_f32(key("expert_weights_scale"), hp.expert_weights_scale);
  w.set_bool(key("expert_weights_norm"), hp.expert_weights_norm);
  w.set_array_f32(key("swiglu_clamp_exp"), hp.swiglu_clamp_exp);
  if (!hp.swiglu_clamp_shexp.empty()) w.set_array_f32(key("swiglu_clamp_shexp"), hp.swiglu_clamp_shexp);
  w.set_u32(key("hash_layer_count"), hp.n_hash_layers);
  w.set_u32(key("hyper_connection.count"), hp.hc_count);
  w.set_u32(key("hyper_connection.sinkhorn_iterations"), hp.hc_sinkhorn_iters);
  w.set_f32(key("hyper_connection.epsilon"), hp.hc_eps);
}

void check_architecture(const gguf::File& f) {
  if (auto arch = f.find_string("general.architecture"); arch && *arch == "deepseek4_mtp_support") {
    throw Error(f.path() + ": general.architecture is 'deepseek4_mtp_support': ds4's MTP draft sidecar (the mtp.0.* "
                           "block), not a model; open the model's own file");
  }
  if (auto arch = f.find_string("general.architecture"); arch && *arch != kDeepseek4Arch)
    throw Error(f.path() + ": general.architecture is '" + *arch + "', expected 'deepseek4'");
}

namespace {

// The per-layer array a of key k, at least n_layer long, cut to n_layer.
template <typename T>
std::vector<T> cut_to_layers(const gguf::File& f, const std::string& k, std::vector<T> a, uint32_t n_layer) {
  if (a.size() < n_layer)
    throw Error(f.path() + ": metadata key '" + k + "' has " + std::to_string(a.size()) +
                " entries, block_count is " + std::to_string(n_layer));
  a.resize(n_layer);
  return a;
}

// A per-layer array at least n_layer long (or a scalar repeated), cut to n_layer.
std::vector<float> per_layer_f32(const gguf::File& f, const std::string& k, uint32_t n_layer) {
  const gguf::Value& v = f.get(k);
  if (!v.is_array()) return std::vector<float>(n_layer, v.as_f32());
  return cut_to_layers(f, k, v.array_f32(), n_layer);
}

// ds4's loader accepts float keys stored as f32, f64, u32 or i32.
float value_float(const gguf::Value& v) {
  if (gguf::is_integer_type(v.type())) return static_cast<float>(v.as_i64());
  return v.as_f32();
}

float get_float(const gguf::File& f, const std::string& k) { return value_float(f.get(k)); }

std::optional<float> find_float(const gguf::File& f, const std::string& k) {
  const gguf::Value* v = f.find(k);
  if (!v) return std::nullopt;
  return value_float(*v);
}

uint32_t scalar_or_uniform_u32(const gguf::File& f, const std::string& k) {
  const gguf::Value& v = f.get(k);
  if (!v.is_array()) return v.as_u32();
  const std::vector<uint32_t> a = v.array_u32();
  if (a.empty() || std::any_of(a.begin(), a.end(), [&](uint32_t x) { return x != a[0]; }))
    throw Error(f.path() + ": metadata key '" + k + "' varies per layer, which deepseek4 does not allow");
  return a[0];
}

// The vocabulary: deepseek4.vocab_size where written (ds4's files), else the
// tokenizer's token count, as llama.cpp reads it (its converter writes no
// vocab_size for this architecture).
uint32_t vocab_size(const gguf::File& f) {
  if (f.find(key("vocab_size"))) return f.get_u32(key("vocab_size"));
  const gguf::Value* tokens = f.find_array("tokenizer.ggml.tokens");
  if (tokens == nullptr)
    throw Error(f.path() + ": neither metadata key '" + key("vocab_size") +
                "' nor 'tokenizer.ggml.tokens' gives the vocabulary size");
  if (tokens->size() == 0 || tokens->size() > std::numeric_limits<uint32_t>::max())
    throw Error(f.path() + ": 'tokenizer.ggml.tokens' has " + std::to_string(tokens->size()) + " tokens");
  return static_cast<uint32_t>(tokens->size());
}

}  // namespace

Deepseek4HParams read_metadata(const gguf::File& f) {
  check_architecture(f);
  const uint32_t block_count = f.get_u32(key("block_count"));
  // llama.cpp's converter appends the MTP block as blk.<n_layer> and counts it
  // in block_count; ds4 keeps it in a separate file. Only the latter is read
  // here (deepseek4_config.h resolves both layouts).
  if (auto nextn = f.find_u32(key("nextn_predict_layers")); nextn && *nextn != 0)
    throw Error(f.path() + ": metadata key '" + key("nextn_predict_layers") + "' is " + std::to_string(*nextn) +
                "; MTP blocks inside the main model file are not supported");
  return read_metadata_layers(f, block_count);
}

Deepseek4HParams read_metadata_layers(const gguf::File& f, uint32_t n_layer) {
  check_architecture(f);
  Deepseek4HParams hp;
  hp.name = f.find_string("general.name").value_or("");
  hp.n_layer = n_layer;
  hp.n_ctx_train = f.get_u32(key("context_length"));
  hp.n_embd = f.get_u32(key("embedding_length"));
  hp.n_vocab = vocab_size(f);
  hp.n_head = scalar_or_uniform_u32(f, key("attention.head_count"));
  hp.n_head_kv = scalar_or_uniform_u32(f, key("attention.head_count_kv"));
  hp.head_dim = f.get_u32(key("attention.key_length"));
  const uint32_t value_length = f.get_u32(key("attention.value_length"));
  if (value_length != hp.head_dim)
    throw Error(f.path() + ": deepseek4 hparams: value length " + std::to_string(value_length) +
                " must equal key length " + std::to_string(hp.head_dim) + " (K = V)");
  hp.n_rot = f.get_u32(key("rope.dimension_count"));
  hp.rope_freq_base = get_float(f, key("rope.freq_base"));
  hp.rope_scaling_type = f.find_string(key("rope.scaling.type")).value_or("yarn");
  hp.rope_scaling_factor = get_float(f, key("rope.scaling.factor"));
  hp.rope_scaling_orig_ctx = f.get_u32(key("rope.scaling.original_context_length"));
  hp.yarn_beta_fast = find_float(f, key("rope.scaling.yarn_beta_fast")).value_or(32.0f);
  hp.yarn_beta_slow = find_float(f, key("rope.scaling.yarn_beta_slow")).value_or(1.0f);
  hp.rms_eps = get_float(f, key("attention.layer_norm_rms_epsilon"));
  hp.q_lora_rank = f.get_u32(key("attention.q_lora_rank"));
  hp.n_swa = f.get_u32(key("attention.sliding_window"));
  hp.o_groups = f.get_u32(key("attention.output_group_count"));
  hp.o_lora_rank = f.get_u32(key("attention.output_lora_rank"));

  const std::string ratios_key = key("attention.compress_ratios");
  hp.compress_ratios = cut_to_layers(f, ratios_key, f.get_array(ratios_key).array_u32(), hp.n_layer);
  hp.compress_rope_freq_base = get_float(f, key("attention.compress_rope_freq_base"));

  hp.indexer_n_head = f.get_u32(key("attention.indexer.head_count"));
  hp.indexer_head_dim = f.get_u32(key("attention.indexer.key_length"));
  hp.indexer_top_k = f.get_u32(key("attention.indexer.top_k"));

  hp.n_expert = f.get_u32(key("expert_count"));
  hp.n_expert_used = scalar_or_uniform_u32(f, key("expert_used_count"));
  hp.n_expert_shared = f.get_u32(key("expert_shared_count"));
  hp.n_ff_exp = scalar_or_uniform_u32(f, key("expert_feed_forward_length"));
  // ds4's own files may omit the gating key; the family has one score function.
  hp.expert_gating_func = f.find_u32(key("expert_gating_func")).value_or(kGatingSqrtSoftplus);
  hp.expert_weights_scale = get_float(f, key("expert_weights_scale"));
  hp.expert_weights_norm = f.get_bool(key("expert_weights_norm"));
  hp.swiglu_clamp_exp = per_layer_f32(f, key("swiglu_clamp_exp"), hp.n_layer);
  if (f.find(key("swiglu_clamp_shexp")))
    hp.swiglu_clamp_shexp = per_layer_f32(f, key("swiglu_clamp_shexp"), hp.n_layer);
  hp.n_hash_layers = f.get_u32(key("hash_layer_count"));
  for (const char* k : {"expert_group_count", "expert_group_used_count"}) {
    if (auto g = f.find_u32(key(k)); g && *g != 0)
      throw Error(f.path() + ": metadata key '" + key(k) + "' is " + std::to_string(*g) +
                  "; deepseek4 has no expert groups (must be 0 or absent)");
  }

  hp.hc_count = f.get_u32(key("hyper_connection.count"));
  hp.hc_sinkhorn_iters = f.get_u32(key("hyper_connection.sinkhorn_iterations"));
  hp.hc_eps = get_float(f, key("hyper_connection.epsilon"));

  try {
    hp.validate();
  } catch (const Error& e) {
    throw Error(f.path() + ": " + e.what());
  }
  return hp;
}

std::string describe(const Deepseek4HParams& hp) {
  std::ostringstream s;
  s << "layers " << hp.n_layer << ", embd " << hp.n_embd << ", vocab " << hp.n_vocab << ", ctx " << hp.n_ctx_train
    << "\n"
    << "attention: " << hp.n_head << " heads x " << hp.head_dim << " (rope " << hp.n_rot << "), q LoRA "
    << hp.q_lora_rank << ", out " << hp.o_groups << " groups x " << hp.o_lora_rank << ", window " << hp.n_swa << "\n"
    << "compress ratios [" << join(hp.compress_ratios) << "], indexer " << hp.indexer_n_head << " x "
    << hp.indexer_head_dim << " top-k " << hp.indexer_top_k << "\n"
    << "experts " << hp.n_expert << " (" << hp.n_expert_used << " used, " << hp.n_expert_shared << " shared) x FF "
    << hp.n_ff_exp << ", hash layers " << hp.n_hash_layers << ", HC " << hp.hc_count << " / Sinkhorn "
    << hp.hc_sinkhorn_iters;
  return s.str();
}

}  // namespace ds4::model
