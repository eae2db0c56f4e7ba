#include "model/deepseek4_tensors.h"

#include <unordered_map>

#include "core/error.h"
#include "core/gguf.h"

namespace ds4::model {
std::string format_shape(std::span<const uint64_t> ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

std::vector<uint64_t> without_trailing_ones(std::vector<uint64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

TensorFamily family_of(TensorKind kind) {
  switch (kind) {
    case TensorKind::TokenEmbd: return TensorFamily::Embedding;
    case TensorKind::Output: return TensorFamily::OutputHead;
    case TensorKind::OutputNorm:
    case TensorKind::AttnNorm:
    case TensorKind::AttnQANorm:
    case TensorKind::AttnKvNorm:
    case TensorKind::AttnCompNorm:
    case TensorKind::IndexerCompNorm:
    case TensorKind::FfnNorm:
    case TensorKind::MtpENorm:
    case TensorKind::MtpHNorm:
    case TensorKind::MtpNorm: return TensorFamily::Norm;
    case TensorKind::OutputHcFn:
    case TensorKind::HcAttnFn:
    case TensorKind::HcFfnFn: return TensorFamily::HcFn;
    case TensorKind::OutputHcScale:
    case TensorKind::HcAttnScale:
    case TensorKind::HcFfnScale: return TensorFamily::HcScale;
    case TensorKind::OutputHcBase:
    case TensorKind::HcAttnBase:
    case TensorKind::HcFfnBase: return TensorFamily::HcBase;
    case TensorKind::AttnQA:
    case TensorKind::AttnQB:
    case TensorKind::AttnKv:
    case TensorKind::AttnOutA:
    case TensorKind::AttnOutB:
    case TensorKind::MtpEProj:  // FP8 projections in the checkpoint, as attention's
    case TensorKind::MtpHProj:
    case TensorKind::MtpEhProj: return TensorFamily::AttnProjection;
    case TensorKind::AttnSinks: return TensorFamily::AttnSinks;
    case TensorKind::AttnCompKv:
    case TensorKind::AttnCompGate:
    case TensorKind::IndexerCompKv:
    case TensorKind::IndexerCompGate: return TensorFamily::CompressorProj;
    case TensorKind::AttnCompApe:
    case TensorKind::IndexerCompApe: return TensorFamily::CompressorApe;
    case TensorKind::IndexerQB:
    case TensorKind::IndexerProj: return TensorFamily::IndexerProj;
    case TensorKind::FfnGateInp: return TensorFamily::Router;
    case TensorKind::ExpProbsB: return TensorFamily::RouterBias;
    case TensorKind::FfnGateTid2Eid: return TensorFamily::Tid2Eid;
    case TensorKind::FfnGateShexp:
    case TensorKind::FfnUpShexp:
    case TensorKind::FfnDownShexp: return TensorFamily::SharedExpert;
    case TensorKind::FfnGateExps:
    case TensorKind::FfnUpExps: return TensorFamily::RoutedGateUp;
    case TensorKind::FfnDownExps: return TensorFamily::RoutedDown;
  }
  throw Error("deepseek4 tensors: unknown tensor kind");
}

std::string_view family_name(TensorFamily family) {
  switch (family) {
    case TensorFamily::Embedding: return "embedding";
    case TensorFamily::OutputHead: return "output head";
    case TensorFamily::Norm: return "norm";
    case TensorFamily::HcFn: return "HC fn";
    case TensorFamily::HcScale: return "HC scale";
    case TensorFamily::HcBase: return "HC base";
    case TensorFamily::AttnProjection: return "attention projection";
    case TensorFamily::AttnSinks: return "attention sinks";
    case TensorFamily::CompressorProj: return "compressor projection";
    case TensorFamily::CompressorApe: return "compressor ape";
    case TensorFamily::IndexerProj: return "indexer projection";
    case TensorFamily::Router: return "router";
    case TensorFamily::RouterBias: return "router bias";
    case TensorFamily::Tid2Eid: return "tid2eid";
    case TensorFamily::SharedExpert: return "shared expert";
    case TensorFamily::RoutedGateUp: return "routed gate/up";
    case TensorFamily::RoutedDown: return "routed down";
  }
  return "?";
}

std::string_view kind_stem(TensorKind kind) {
  switch (kind) {
    case TensorKind::TokenEmbd: return "token_embd";
    case TensorKind::OutputHcFn: return "output_hc_fn";
    case TensorKind::OutputHcBase: return "output_hc_base";
    case TensorKind::OutputHcScale: return "output_hc_scale";
    case TensorKind::OutputNorm: return "output_norm";
    case TensorKind::Output: return "output";
    case TensorKind::HcAttnFn: return "hc_attn_fn";
    case TensorKind::HcAttnScale: return "hc_attn_scale";
    case TensorKind::HcAttnBase: return "hc_attn_base";
    case TensorKind::AttnNorm: return "attn_norm";
    case TensorKind::AttnQA: return "attn_q_a";
    case TensorKind::AttnQANorm: return "attn_q_a_norm";
    case TensorKind::AttnQB: return "attn_q_b";
    case TensorKind::AttnKv: return "attn_kv";
    case TensorKind::AttnKvNorm: return "attn_kv_a_norm";
    case TensorKind::AttnCompApe: return "attn_compressor_ape";
    case TensorKind::AttnCompKv: return "attn_compressor_kv";
    case TensorKind::AttnCompGate: return "attn_compressor_gate";
    case TensorKind::AttnCompNorm: return "attn_compressor_norm";
    case TensorKind::IndexerQB: return "indexer.attn_q_b";
    case TensorKind::IndexerProj: return "indexer.proj";
    case TensorKind::IndexerCompApe: return "indexer_compressor_ape";
    case TensorKind::IndexerCompKv: return "indexer_compressor_kv";
    case TensorKind::IndexerCompGate: return "indexer_compressor_gate";
    case TensorKind::IndexerCompNorm: return "indexer_compressor_norm";
    case TensorKind::AttnSinks: return "attn_sinks";
    case TensorKind::AttnOutA: return "attn_output_a";
    case TensorKind::AttnOutB: return "attn_output_b";
    case TensorKind::HcFfnFn: return "hc_ffn_fn";
    case TensorKind::HcFfnScale: return "hc_ffn_scale";
    case TensorKind::HcFfnBase: return "hc_ffn_base";
    case TensorKind::FfnNorm: return "ffn_norm";
    case TensorKind::FfnGateInp: return "ffn_gate_inp";
    case TensorKind::ExpProbsB: return "exp_probs_b";
    case TensorKind::FfnGateTid2Eid: return "ffn_gate_tid2eid";
    case TensorKind::FfnGateExps: return "ffn_gate_exps";
    case TensorKind::FfnUpExps: return "ffn_up_exps";
    case TensorKind::FfnDownExps: return "ffn_down_exps";
    case TensorKind::FfnGateShexp: return "ffn_gate_shexp";
    case TensorKind::FfnUpShexp: return "ffn_up_shexp";
    case TensorKind::FfnDownShexp: return "ffn_down_shexp";
    case TensorKind::MtpEProj: return "e_proj";
    case TensorKind::MtpHProj: return "h_proj";
    case TensorKind::MtpEhProj: return "nextn.eh_proj";
    case TensorKind::MtpENorm: return "enorm";
    case TensorKind::MtpHNorm: return "hnorm";
    case TensorKind::MtpNorm: return "norm";
  }
  return "?";
}

bool is_global(TensorKind kind) {
  switch (kind) {
    case TensorKind::TokenEmbd:
    case TensorKind::OutputHcFn:
    case TensorKind::OutputHcBase:
    case TensorKind::OutputHcScale:
    case TensorKind::OutputNorm:
    case TensorKind::Output: return true;
    default: return false;
  }
}

std::string tensor_name(TensorKind kind, uint32_t layer) {
  std::string name;
  if (!is_global(kind)) name = "blk." + std::to_string(layer) + ".";
  name += kind_stem(kind);
  name += kind == TensorKind::ExpProbsB ? ".bias" : ".weight";
  return name;
}

uint64_t TensorSpec::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

std::vector<TensorSpec> deepseek4_tensors(const Deepseek4HParams& hp) {
  hp.validate();
  std::vector<TensorSpec> out;
  auto add = [&out](TensorKind kind, int32_t layer, std::vector<uint64_t> ne) {
    out.push_back(TensorSpec{tensor_name(kind, layer < 0 ? 0 : static_cast<uint32_t>(layer)), kind, layer,
                             std::move(ne)});
  };
  const uint64_t embd = hp.n_embd, vocab = hp.n_vocab, hd = hp.head_dim, q_lora = hp.q_lora_rank;
  const uint64_t hc = hp.hc_count, hc_dim = hp.hc_dim(), hc_mix = hp.hc_mix_dim();
  const uint64_t ff = hp.n_ff_exp, n_exp = hp.n_expert, idx_dim = hp.indexer_head_dim;

  add(TensorKind::TokenEmbd, -1, {embd, vocab});
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const auto l = static_cast<int32_t>(il);
    const uint64_t ratio = hp.ratio(il);
    add(TensorKind::HcAttnFn, l, {hc_dim, hc_mix});
    add(TensorKind::HcAttnScale, l, {3});
    add(TensorKind::HcAttnBase, l, {hc_mix});
    add(TensorKind::AttnNorm, l, {embd});
    add(TensorKind::AttnQA, l, {embd, q_lora});
    add(TensorKind::AttnQANorm, l, {q_lora});
    add(TensorKind::AttnQB, l, {q_lora, hp.q_dim()});
    add(TensorKind::AttnKv, l, {embd, hd});
    add(TensorKind::AttnKvNorm, l, {hd});
    if (ratio != 0) {
      // Ratio 4 overlaps windows with two lanes of width head_dim.
      const uint64_t coff = ratio == 4 ? 2 : 1;
      add(TensorKind::AttnCompApe, l, {coff * hd, ratio});
      add(TensorKind::AttnCompKv, l, {embd, coff * hd});
      add(TensorKind::AttnCompGate, l, {embd, coff * hd});
      add(TensorKind::AttnCompNorm, l, {hd});
    }
    if (ratio == 4) {
      add(TensorKind::IndexerQB, l, {q_lora, uint64_t{hp.indexer_n_head} * idx_dim});
      add(TensorKind::IndexerProj, l, {embd, hp.indexer_n_head});
      add(TensorKind::IndexerCompApe, l, {2 * idx_dim, ratio});
      add(TensorKind::IndexerCompKv, l, {embd, 2 * idx_dim});
      add(TensorKind::IndexerCompGate, l, {embd, 2 * idx_dim});
      add(TensorKind::IndexerCompNorm, l, {idx_dim});
    }
    add(TensorKind::AttnSinks, l, {hp.n_head});
    // Stored 2-D; llama.cpp views it as [group input, o_lora, groups].
    add(TensorKind::AttnOutA, l, {hp.o_group_in(), uint64_t{hp.o_lora_rank} * hp.o_groups});
    add(TensorKind::AttnOutB, l, {uint64_t{hp.o_lora_rank} * hp.o_groups, embd});
    add(TensorKind::HcFfnFn, l, {hc_dim, hc_mix});
    add(TensorKind::HcFfnScale, l, {3});
    add(TensorKind::HcFfnBase, l, {hc_mix});
    add(TensorKind::FfnNorm, l, {embd});
    add(TensorKind::FfnGateInp, l, {embd, n_exp});
    if (hp.is_hash_layer(il)) {
      add(TensorKind::FfnGateTid2Eid, l, {hp.n_expert_used, vocab});
    } else {
      add(TensorKind::ExpProbsB, l, {n_exp});
    }
    add(TensorKind::FfnGateExps, l, {embd, ff, n_exp});
    add(TensorKind::FfnUpExps, l, {embd, ff, n_exp});
    add(TensorKind::FfnDownExps, l, {ff, embd, n_exp});
    const uint64_t shff = ff * hp.n_expert_shared;
    add(TensorKind::FfnGateShexp, l, {embd, shff});
    add(TensorKind::FfnUpShexp, l, {embd, shff});
    add(TensorKind::FfnDownShexp, l, {shff, embd});
  }
  add(TensorKind::OutputHcFn, -1, {hc_dim, hc});
  add(TensorKind::OutputHcBase, -1, {hc});
  add(TensorKind::OutputHcScale, -1, {1});
  add(TensorKind::OutputNorm, -1, {embd});
  add(TensorKind::Output, -1, {embd, vocab});
  return out;
}

void validate_tensor_directory(const gguf::File& f, const Deepseek4HParams& hp) {
  const std::vector<TensorSpec> specs = deepseek4_tensors(hp);
  std::unordered_map<std::string_view, const TensorSpec*> by_name;
  for (const TensorSpec& s : specs) by_name.emplace(s.name, &s);
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (!by_name.count(t.name))
      throw Error(f.path() + ": tensor '" + t.name + "' is not part of a deepseek4 model with these hyperparameters");
  }
  for (const TensorSpec& s : specs) {
    const gguf::TensorInfo* t = f.find_tensor(s.name);
    if (!t) {
      std::string why;
      if (s.kind == TensorKind::FfnGateTid2Eid) why = " (hash layers route by token id)";
      throw Error(f.path() + ": tensor '" + s.name + "' missing" + why);
    }
    if (without_trailing_ones(t->ne) != s.ne)
      throw Error(f.path() + ": tensor '" + s.name + "' has shape " + format_shape(t->ne) + ", expected " +
                  format_shape(s.ne));
    if (s.kind == TensorKind::FfnGateTid2Eid && t->type != GgmlType::I32)
      throw Error(f.path() + ": tensor '" + s.name + "' has type " + std::string(ggml_type_name(t->type)) +
                  ", expected i32");
  }
}

}  // namespace ds4::model
