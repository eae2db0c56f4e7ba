#include "model/deepseek4_mtp.h"

#include <string>
#include <utility>

namespace ds4::model {

Deepseek4HParams with_mtp_block(const Deepseek4HParams& hp) {
  Deepseek4HParams all = hp;
  all.n_layer = hp.n_layer + 1;
  all.compress_ratios.push_back(0);
  if (!all.swiglu_clamp_exp.empty()) all.swiglu_clamp_exp.push_back(hp.swiglu_clamp_exp.back());
  if (!all.swiglu_clamp_shexp.empty()) all.swiglu_clamp_shexp.push_back(hp.swiglu_clamp_shexp.back());
  return all;
}

std::vector<TensorSpec> mtp_tensors(const Deepseek4HParams& hp, MtpLayout layout) {
  const uint32_t il = hp.n_layer;
  const auto l = static_cast<int32_t>(il);
  const uint64_t embd = hp.n_embd, hc = hp.hc_count;
  // The block: layer n_layer of a model one layer longer (ratio 0, not a hash layer).
  std::vector<TensorSpec> block;
  for (TensorSpec& s : deepseek4_tensors(with_mtp_block(hp)))
    if (s.layer == l) block.push_back(std::move(s));

  std::vector<TensorSpec> out;
  if (layout == MtpLayout::Ds4Sidecar) {
    const std::string p = "mtp.0.";
    out.push_back({p + "hc_head_base.weight", TensorKind::OutputHcBase, l, {hc}});
    out.push_back({p + "hc_head_fn.weight", TensorKind::OutputHcFn, l, {hp.hc_dim(), hc}});
    out.push_back({p + "hc_head_scale.weight", TensorKind::OutputHcScale, l, {1}});
    out.push_back({p + "e_proj.weight", TensorKind::MtpEProj, l, {embd, embd}});
    out.push_back({p + "h_proj.weight", TensorKind::MtpHProj, l, {embd, embd}});
    out.push_back({p + "enorm.weight", TensorKind::MtpENorm, l, {embd}});
    out.push_back({p + "hnorm.weight", TensorKind::MtpHNorm, l, {embd}});
    out.push_back({p + "norm.weight", TensorKind::MtpNorm, l, {embd}});
    const std::string blk = "blk." + std::to_string(il) + ".";
    for (TensorSpec& s : block) {
      s.name = p + s.name.substr(blk.size());
      out.push_back(std::move(s));
    }
    return out;
  }
  const std::string n = "blk." + std::to_string(il) + ".nextn.";
  out.push_back({tensor_name(TensorKind::TokenEmbd, 0), TensorKind::TokenEmbd, -1, {embd, hp.n_vocab}});
  for (TensorSpec& s : block) out.push_back(std::move(s));
  out.push_back({n + "eh_proj.weight", TensorKind::MtpEhProj, l, {2 * embd, embd}});
  out.push_back({n + "enorm.weight", TensorKind::MtpENorm, l, {embd}});
  out.push_back({n + "hnorm.weight", TensorKind::MtpHNorm, l, {embd}});
  out.push_back({n + "shared_head_norm.weight", TensorKind::MtpNorm, l, {embd}});
  // The MTP block's hc_head takes the place of the model's (llama.cpp's
  // converter keeps only the embedding, output norm and head of the model).
  out.push_back({tensor_name(TensorKind::OutputHcFn, 0), TensorKind::OutputHcFn, -1, {hp.hc_dim(), hc}});
  out.push_back({tensor_name(TensorKind::OutputHcBase, 0), TensorKind::OutputHcBase, -1, {hc}});
  out.push_back({tensor_name(TensorKind::OutputHcScale, 0), TensorKind::OutputHcScale, -1, {1}});
  out.push_back({tensor_name(TensorKind::OutputNorm, 0), TensorKind::OutputNorm, -1, {embd}});
  out.push_back({tensor_name(TensorKind::Output, 0), TensorKind::Output, -1, {embd, hp.n_vocab}});
  return out;
}

}  // namespace ds4::model
