#include "model/deepseek4_weights.h"

#include <charconv>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/gguf.h"

namespace ds4::model {
namespace {

constexpr GgmlType kF32Only[] = {GgmlType::F32};
constexpr GgmlType kI32Only[] = {GgmlType::I32};
// Every matrix takes every type with a dot kernel, as in llama.cpp:
// llama-quantize's presets put K- and IQ-types on attention, shared-expert,
// embedding and head matrices too (Q6_K on output and token_embd, Q2_K on
// token_embd of the IQ2 presets, IQ3_S on token_embd of IQ3_XXS, ...), and
// fall back where a row is not a multiple of 256 (Q4_0 for Q2_K/Q3_K, Q5_0
// for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K, IQ4_NL for the IQ presets);
// llama.cpp's converter keeps the checkpoint's BF16 matrices (token_embd,
// output, ffn_gate_inp) in BF16.
constexpr GgmlType kDense[] = {GgmlType::F32,     GgmlType::F16,    GgmlType::BF16,    GgmlType::Q8_0,
                               GgmlType::Q4_0,    GgmlType::Q4_1,   GgmlType::Q5_0,    GgmlType::Q5_1,
                               GgmlType::Q2_K,    GgmlType::Q3_K,   GgmlType::Q4_K,    GgmlType::Q5_K,
                               GgmlType::Q6_K,    GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                               GgmlType::IQ3_XXS, GgmlType::IQ3_S,  GgmlType::IQ1_S,   GgmlType::IQ1_M,
                               GgmlType::IQ4_NL,  GgmlType::IQ4_XS, GgmlType::MXFP4};
// Routed experts list the formats their files usually hold first (the
// error message names the types in this order).
constexpr GgmlType kRouted[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,   GgmlType::IQ3_XXS,
                                GgmlType::IQ3_S,   GgmlType::IQ1_S,  GgmlType::IQ1_M,   GgmlType::IQ4_NL,
                                GgmlType::IQ4_XS,  GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::Q4_K,
                                GgmlType::Q5_K,    GgmlType::Q6_K,   GgmlType::MXFP4,   GgmlType::Q4_0,
                                GgmlType::Q4_1,    GgmlType::Q5_0,   GgmlType::Q5_1,    GgmlType::F32,
                                GgmlType::F16,     GgmlType::BF16,   GgmlType::Q8_0};

std::string type_list(std::span<const GgmlType> types) {
  std::string s;
  for (GgmlType t : types) {
    if (!s.empty()) s += ", ";
    s += ggml_type_name(t);
  }
  return s;
}

// The view slot of one tensor kind in a layer (nullptr for global kinds).
TensorView* layer_slot(LayerWeights& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::HcAttnFn: return &l.hc_attn_fn;
    case TensorKind::HcAttnScale: return &l.hc_attn_scale;
    case TensorKind::HcAttnBase: return &l.hc_attn_base;
    case TensorKind::AttnNorm: return &l.attn_norm;
    case TensorKind::AttnQA: return &l.attn_q_a;
    case TensorKind::AttnQANorm: return &l.attn_q_a_norm;
    case TensorKind::AttnQB: return &l.attn_q_b;
    case TensorKind::AttnKv: return &l.attn_kv;
    case TensorKind::AttnKvNorm: return &l.attn_kv_norm;
    case TensorKind::AttnCompApe: return &l.attn_compressor.ape;
    case TensorKind::AttnCompKv: return &l.attn_compressor.kv;
    case TensorKind::AttnCompGate: return &l.attn_compressor.gate;
    case TensorKind::AttnCompNorm: return &l.attn_compressor.norm;
    case TensorKind::IndexerQB: return &l.indexer_q_b;
    case TensorKind::IndexerProj: return &l.indexer_proj;
    case TensorKind::IndexerCompApe: return &l.indexer_compressor.ape;
    case TensorKind::IndexerCompKv: return &l.indexer_compressor.kv;
    case TensorKind::IndexerCompGate: return &l.indexer_compressor.gate;
    case TensorKind::IndexerCompNorm: return &l.indexer_compressor.norm;
    case TensorKind::AttnSinks: return &l.attn_sinks;
    case TensorKind::AttnOutA: return &l.attn_output_a;
    case TensorKind::AttnOutB: return &l.attn_output_b;
    case TensorKind::HcFfnFn: return &l.hc_ffn_fn;
    case TensorKind::HcFfnScale: return &l.hc_ffn_scale;
    case TensorKind::HcFfnBase: return &l.hc_ffn_base;
    case TensorKind::FfnNorm: return &l.ffn_norm;
    case TensorKind::FfnGateInp: return &l.ffn_gate_inp;
    case TensorKind::ExpProbsB: return &l.exp_probs_b;
    case TensorKind::FfnGateTid2Eid: return &l.ffn_gate_tid2eid;
    case TensorKind::FfnGateExps: return &l.ffn_gate_exps;
    case TensorKind::FfnUpExps: return &l.ffn_up_exps;
    case TensorKind::FfnDownExps: return &l.ffn_down_exps;
    case TensorKind::FfnGateShexp: return &l.ffn_gate_shexp;
    case TensorKind::FfnUpShexp: return &l.ffn_up_shexp;
    case TensorKind::FfnDownShexp: return &l.ffn_down_shexp;
    default: return nullptr;
  }
}

TensorView* global_slot(Deepseek4Weights& w, TensorKind kind) {
  switch (kind) {
    case TensorKind::TokenEmbd: return &w.token_embd;
    case TensorKind::OutputHcFn: return &w.output_hc_fn;
    case TensorKind::OutputHcBase: return &w.output_hc_base;
    case TensorKind::OutputHcScale: return &w.output_hc_scale;
    case TensorKind::OutputNorm: return &w.output_norm;
    case TensorKind::Output: return &w.output;
    default: return nullptr;
  }
}

// The layer index of "blk.<N>.<rest>", or -1 for other names.
int64_t block_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  name.remove_prefix(4);
  uint32_t n = 0;
  const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
  if (ec != std::errc() || p == name.data() || p == name.data() + name.size() || *p != '.') return -1;
  return n;
}

}  // namespace

std::span<const GgmlType> allowed_types(TensorKind kind) {
  switch (family_of(kind)) {
    case TensorFamily::Norm:
    case TensorFamily::HcScale:
    case TensorFamily::HcBase:
    case TensorFamily::AttnSinks:
    case TensorFamily::RouterBias: return kF32Only;
    case TensorFamily::Tid2Eid: return kI32Only;
    case TensorFamily::RoutedGateUp:
    case TensorFamily::RoutedDown: return kRouted;
    default: return kDense;
  }
}

std::vector<const TensorView*> LayerWeights::all() const {
  std::vector<const TensorView*> v;
  for (const TensorView* t :
       {&hc_attn_fn, &hc_attn_scale, &hc_attn_base, &attn_norm, &attn_q_a, &attn_q_a_norm, &attn_q_b, &attn_kv,
        &attn_kv_norm, &attn_compressor.ape, &attn_compressor.kv, &attn_compressor.gate, &attn_compressor.norm,
        &indexer_q_b, &indexer_proj, &indexer_compressor.ape, &indexer_compressor.kv, &indexer_compressor.gate,
        &indexer_compressor.norm, &attn_sinks, &attn_output_a, &attn_output_b, &hc_ffn_fn, &hc_ffn_scale,
        &hc_ffn_base, &ffn_norm, &ffn_gate_inp, &exp_probs_b, &ffn_gate_tid2eid, &ffn_gate_exps, &ffn_up_exps,
        &ffn_down_exps, &ffn_gate_shexp, &ffn_up_shexp, &ffn_down_shexp}) {
    if (t->present()) v.push_back(t);
  }
  return v;
}

std::vector<const TensorView*> Deepseek4Weights::all() const {
  std::vector<const TensorView*> v;
  v.push_back(&token_embd);
  for (const LayerWeights& l : layers) {
    const std::vector<const TensorView*> layer = l.all();
    v.insert(v.end(), layer.begin(), layer.end());
  }
  for (const TensorView* t : {&output_hc_fn, &output_hc_base, &output_hc_scale, &output_norm, &output}) v.push_back(t);
  return v;
}

Deepseek4Weights bind_weights(const gguf::File& f, const Deepseek4Config& cfg) {
  const Deepseek4HParams& hp = cfg.hp;
  const std::vector<TensorSpec> specs = deepseek4_tensors(hp);
  const std::string& path = f.path();

  // Unexpected tensors first: a different variant should be named as such,
  // not reported through the first tensor it happens to lack.
  std::unordered_set<std::string_view> expected;
  for (const TensorSpec& s : specs) expected.insert(s.name);
  Deepseek4Weights w;
  uint64_t n_mtp = 0, n_vl = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (expected.count(t.name)) continue;
    const int64_t b = block_of(t.name);
    if (b >= hp.n_layer && b < int64_t{hp.n_layer} + cfg.mtp_layers_in_file) {
      w.ignored_tensors.push_back(t.name);
      ++n_mtp;
      continue;
    }
    if (b >= 0 && b < hp.n_layer && t.name == "blk." + std::to_string(b) + ".exp_probs_b_vl.bias") {
      w.ignored_tensors.push_back(t.name);
      ++n_vl;
      continue;
    }
    std::string why;
    if (b >= hp.n_layer) why = " (the model has " + std::to_string(hp.n_layer) + " layers)";
    else if (b >= 0)
      why = " (layer " + std::to_string(b) + " has compress ratio " + std::to_string(hp.ratio(static_cast<uint32_t>(b))) +
            (hp.is_hash_layer(static_cast<uint32_t>(b)) ? ", hash routed" : ", top-k routed") + ")";
    throw Error(path + ": unexpected tensor '" + t.name + "': not part of a deepseek4 model with these hyperparameters" +
                why);
  }
  if (n_mtp) w.notes.push_back("ignored " + std::to_string(n_mtp) + " MTP block tensor(s)");
  if (n_vl) w.notes.push_back("ignored " + std::to_string(n_vl) + " exp_probs_b_vl tensor(s) (image-token routing bias)");

  w.layers.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    w.layers[il].index = il;
    w.layers[il].compress_ratio = hp.ratio(il);
    w.layers[il].hash_routed = hp.is_hash_layer(il);
  }
  uint32_t missing_bias = 0;
  for (const TensorSpec& s : specs) {
    TensorView* slot = s.layer < 0 ? global_slot(w, s.kind) : layer_slot(w.layers[static_cast<size_t>(s.layer)], s.kind);
    if (!slot) throw Error(path + ": tensor '" + s.name + "' has no slot in the weight binding");  // programming error
    slot->kind = s.kind;
    const gguf::TensorInfo* t = f.find_tensor(s.name);
    if (!t) {
      if (!f.missing_shards().empty()) {  // another stage's shard, or a tensor a present layer lacks
        w.absent_tensors.push_back(s.name);
        continue;
      }
      if (s.kind == TensorKind::ExpProbsB) {
        // ds4's loader: the selection bias is optional; absent means zero.
        ++missing_bias;
        continue;
      }
      std::string why;
      if (s.kind == TensorKind::FfnGateTid2Eid) why = " (hash layers route by token id)";
      throw Error(path + ": tensor '" + s.name + "' missing" + why);
    }
    if (without_trailing_ones(t->ne) != s.ne)
      throw Error(path + ": tensor '" + s.name + "' has shape " + format_shape(t->ne) + ", expected " + format_shape(s.ne));
    const std::span<const GgmlType> allowed = allowed_types(s.kind);
    bool ok = false;
    for (GgmlType a : allowed) ok |= a == t->type;
    if (!ok)
      throw Error(path + ": tensor '" + s.name + "' has type " + std::string(ggml_type_name(t->type)) +
                  "; allowed: " + type_list(allowed));
    // The reader checks this at open; kept so a binding can never hand out a
    // view past the mapping.
    const uint64_t file_size = f.shards()[t->shard].bytes.size();
    if (t->file_offset > file_size || t->nbytes > file_size - t->file_offset)
      throw Error(path + ": tensor '" + s.name + "' data runs past the end of the file (truncated file?)");
    slot->name = t->name;
    slot->type = t->type;
    for (size_t i = 0; i < 4; ++i) slot->ne[i] = t->dim(i);
    slot->data = t->data;
    slot->nbytes = t->nbytes;
    slot->row_bytes = t->row_bytes();
    slot->n_rows = t->n_rows();
  }
  if (missing_bias)
    w.notes.push_back(std::to_string(missing_bias) + " top-k layer(s) without exp_probs_b: zero selection bias");

  for (const LayerWeights& l : w.layers) {
    if (l.ffn_gate_exps.type != l.ffn_up_exps.type)
      throw Error(path + ": tensors '" + std::string(l.ffn_gate_exps.name) + "' (" +
                  std::string(ggml_type_name(l.ffn_gate_exps.type)) + ") and '" + std::string(l.ffn_up_exps.name) +
                  "' (" + std::string(ggml_type_name(l.ffn_up_exps.type)) + ") must share a type");
  }
  return w;
}

void require_present(const Deepseek4Weights& w, const gguf::File& f, uint32_t begin, uint32_t end, bool embedding,
                     bool head, const std::string& what) {
  for (const std::string& name : w.absent_tensors) {
    const int64_t b = block_of(name);
    const bool needed = b >= 0 ? b >= int64_t{begin} && b < int64_t{end}
                               : (name == "token_embd.weight" ? embedding : head);
    if (!needed) continue;
    // exp_probs_b may be absent from a layer that is here (zero selection bias).
    if (b >= 0 && name.ends_with(".exp_probs_b.bias") && w.layers.at(static_cast<size_t>(b)).attn_norm.present()) continue;
    std::string shards;
    for (const std::string& p : f.missing_shards()) shards += (shards.empty() ? "" : ", ") + p;
    throw Error(f.path() + ": " + what + " needs tensor '" + name + "', which is in a shard not present here (" + shards +
                ")");
  }
}

}  // namespace ds4::model
