#include "backend/cuda/moe_layer.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/moe_layer.h"
#include "backend/cpu/ops_moe.h"
#include "backend/cuda/expert_products.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/route.h"
#include "backend/cuda/stream_scratch.h"
#include "backend/expert_groups.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

[[noreturn]] void fail(int layer, const std::string& what) {
  throw Error("GPU MoE layer " + std::to_string(layer) + ": " + what);
}

// Each expert type's activation form, when all three have one (the decode
// kernels' types); false sends decode through the prefill path too.
bool expert_forms(const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& down,
                  backend::Numerics numerics, ActQuant forms[3]) {
  return activation_quant(gate.type, numerics, forms[0]) && activation_quant(up.type, numerics, forms[1]) &&
         activation_quant(down.type, numerics, forms[2]);
}

}  // namespace

DeviceMoeLayer::DeviceMoeLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp,
                               backend::Numerics numerics, MoePart part)
    : numerics_(numerics),
      part_(part),
      share_rank_(part == MoePart::Partner ? 1 : 0),
      share_size_(part == MoePart::Whole ? 1 : 2),
      index_(static_cast<int>(layer.index)),
      n_embd_(static_cast<int>(hp.n_embd)),
      n_expert_(static_cast<int>(hp.n_expert)),
      n_used_(static_cast<int>(hp.n_expert_used)),
      n_vocab_(static_cast<int>(hp.n_vocab)),
      n_ff_(static_cast<int>(hp.n_ff_exp)),
      n_ff_shared_(static_cast<int>(hp.n_ff_exp * hp.n_expert_shared)),
      hash_routed_(hp.is_hash_layer(layer.index)),
      eps_(hp.rms_eps),
      scale_(hp.expert_weights_scale),
      clamp_exp_(hp.swiglu_clamp_exp.at(layer.index)),
      clamp_shexp_(hp.clamp_shexp(layer.index)) {
  // The CPU layer's shape checks and their messages.
  const cpu::MoeLayer checked(layer, hp, numerics);
  const uint64_t d = hp.n_embd, ne = hp.n_expert;
  gate_exps_ = upload_expert_share(layer.ffn_gate_exps, n_ff_, n_expert_, share_rank_, share_size_);
  up_exps_ = upload_expert_share(layer.ffn_up_exps, n_ff_, n_expert_, share_rank_, share_size_);
  down_exps_ = upload_expert_share(layer.ffn_down_exps, n_embd_, n_expert_, share_rank_, share_size_);
  if (part == MoePart::Partner) return;  // the home routes; the shared expert is the home's
  norm_ = upload_f32(layer.ffn_norm, d);
  gate_inp_ = upload_matrix(layer.ffn_gate_inp);
  gate_shexp_ = upload_matrix(layer.ffn_gate_shexp);
  up_shexp_ = upload_matrix(layer.ffn_up_shexp);
  down_shexp_ = upload_matrix(layer.ffn_down_shexp);
  if (hash_routed_) {
    // The device reads the table unchecked: every id must name an expert.
    std::vector<int32_t> table(static_cast<size_t>(layer.ffn_gate_tid2eid.nbytes / sizeof(int32_t)));
    std::memcpy(table.data(), layer.ffn_gate_tid2eid.data, table.size() * sizeof(int32_t));
    for (size_t i = 0; i < table.size(); ++i)
      if (table[i] < 0 || table[i] >= n_expert_)
        fail(index_, "ffn_gate_tid2eid names expert " + std::to_string(table[i]) + " for token " +
                         std::to_string(i / static_cast<size_t>(n_used_)) + " (" + std::to_string(n_expert_) +
                         " experts)");
    tid2eid_ = DeviceBuffer(table.size() * sizeof(int32_t));
    tid2eid_.upload(table.data(), table.size() * sizeof(int32_t));
  } else if (layer.exp_probs_b.present()) {
    bias_ = upload_f32(layer.exp_probs_b, ne);
  }
}

void DeviceMoeLayer::forward(const float* X, const int32_t* token_ids, int64_t n, float* OUT, DeviceProducts& P,
                             int32_t* ids_out, float* weights_out) const {
  if (n <= 0) return;
  const cudaStream_t stream = P.stream();
  const int64_t pairs = n * n_used_;
  // xn, then weights and ids.
  const StreamScratch pass(static_cast<size_t>(n * n_embd_ + 2 * pairs) * sizeof(float), stream);
  float* xn = pass.as<float>();
  float* weights = xn + n * n_embd_;
  auto* ids = reinterpret_cast<int32_t*>(weights + pairs);
  route(X, token_ids, n, xn, ids, weights, P);
  experts(xn, ids, weights, n, OUT, P);
  if (ids_out)
    cuda_check(cudaMemcpyAsync(ids_out, ids, static_cast<size_t>(pairs) * 4, cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync", current_device());
  if (weights_out)
    cuda_check(cudaMemcpyAsync(weights_out, weights, static_cast<size_t>(pairs) * 4, cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync", current_device());
}

void DeviceMoeLayer::route(const float* X, const int32_t* token_ids, int64_t n, float* xn, int32_t* ids, float* weights,
                           DeviceProducts& P) const {
  if (part_ == MoePart::Partner) fail(index_, "a tensor-parallel partner does not route");
  if (n <= 0) return;
  if (hash_routed_)
    for (int64_t t = 0; t < n; ++t)
      if (token_ids[t] < 0 || token_ids[t] >= n_vocab_)
        fail(index_, "token id " + std::to_string(token_ids[t]) + " outside [0, " + std::to_string(n_vocab_) + ")");
  const cudaStream_t stream = P.stream();
  // logits, then the token ids (hash layers).
  const StreamScratch pass(static_cast<size_t>(n * n_expert_ + n) * sizeof(float), stream);
  float* logits = pass.as<float>();
  auto* tokens = reinterpret_cast<int32_t*>(logits + n * n_expert_);
  rms_norm_rows(X, norm_.as<float>(), xn, n, n_embd_, eps_, numerics_, stream);
  P.run(gate_inp_, 0, xn, n, logits, n_expert_);
  RouteRows route;
  route.logits = logits;
  route.bias = bias_.size() > 0 ? bias_.as<float>() : nullptr;
  if (hash_routed_) {
    pass.upload(static_cast<size_t>(n * n_expert_) * sizeof(float), token_ids,
                static_cast<size_t>(n) * sizeof(int32_t));
    route.tid2eid = tid2eid_.as<int32_t>();
    route.tokens = tokens;
  }
  route.n_tokens = n;
  route.n_expert = n_expert_;
  route.k = n_used_;
  route.scale = scale_;
  route.ids = ids;
  route.weights = weights;
  route_rows(route, numerics_, stream);
}

void DeviceMoeLayer::experts(const float* xn, const int32_t* ids, const float* weights, int64_t n, float* OUT,
                             DeviceProducts& P) const {
  if (n <= 0) return;
  const cudaStream_t stream = P.stream();
  const int64_t d = n_embd_, pairs = n * n_used_;
  // Routed down rows (pairs x d), shared (n x d).
  const bool shared_here = part_ != MoePart::Partner;
  const StreamScratch pass(static_cast<size_t>(pairs * d + (shared_here ? n * d : 0)) * sizeof(float), stream);
  float* down = pass.as<float>();
  float* shared = shared_here ? down + pairs * d : nullptr;

  ActQuant forms[3];
  if (n <= kMatvecTokens && expert_forms(gate_exps_, up_exps_, down_exps_, numerics_, forms))
    routed_decode(xn, ids, weights, n, down, P);
  else
    routed_prefill(xn, ids, weights, n, down, P);

  // The shared expert over every token, unweighted.
  if (shared_here) {
    const StreamScratch mid(static_cast<size_t>(3 * n * n_ff_shared_) * sizeof(float), stream);
    float* g = mid.as<float>();
    float* u = g + n * n_ff_shared_;
    float* m = u + n * n_ff_shared_;
    P.run(gate_shexp_, 0, xn, n, g, n_ff_shared_);
    P.run(up_shexp_, 0, xn, n, u, n_ff_shared_);
    swiglu_clamp_rows(g, u, nullptr, m, n, n_ff_shared_, clamp_shexp_, numerics_, stream);
    P.run(down_shexp_, 0, m, n, shared, d);
  }
  moe_combine_rows(down, cpu::expert_weight_before_down(numerics_) ? nullptr : weights, shared, OUT, n, n_used_, d,
                   stream);
}

// A few tokens' n x k pairs: each product one launch, the expert ids read on
// the device (no host round trip); each pair's rows equal that token's alone.
void DeviceMoeLayer::routed_decode(const float* xn, const int32_t* ids, const float* weights, int64_t n, float* down,
                                   DeviceProducts& P) const {
  const cudaStream_t stream = P.stream();
  const int k = static_cast<int>(n) * n_used_;  // pairs
  ActQuant forms[3];
  expert_forms(gate_exps_, up_exps_, down_exps_, numerics_, forms);
  const int64_t act_bytes = std::max({activation_row_bytes(forms[0], n_embd_), activation_row_bytes(forms[1], n_embd_),
                                      activation_row_bytes(forms[2], n_ff_)});
  // The quantized activations first (the allocator's alignment), then the
  // token's xn once per pair and the gate, up and mid rows.
  const size_t acts_bytes = (static_cast<size_t>(k) * static_cast<size_t>(act_bytes) + 255) / 256 * 256;
  const StreamScratch scratch(acts_bytes + static_cast<size_t>(k) * static_cast<size_t>(n_embd_ + 3 * n_ff_) * 4,
                              stream);
  void* acts = scratch.as<void>();
  float* rep = scratch.as<float>(acts_bytes);
  float* g = rep + static_cast<int64_t>(k) * n_embd_;
  float* u = g + static_cast<int64_t>(k) * n_ff_;
  float* m = u + static_cast<int64_t>(k) * n_ff_;
  repeat_rows(xn, rep, n, n_used_, n_embd_, stream);
  // A share of the experts: each pair's expert as this GPU numbers its own,
  // -1 (zero rows) for the other GPU's.
  const StreamScratch local(share_size_ > 1 ? static_cast<size_t>(k) * sizeof(int32_t) : 0, stream);
  if (share_size_ > 1) {
    share_expert_ids(ids, local.as<int32_t>(), k, share_rank_, share_size_, stream);
    ids = local.as<int32_t>();
  }
  quantize_activations(forms[0], rep, acts, k, n_embd_, stream);
  matvec_experts(gate_exps_.type, gate_exps_.data.data(), n_ff_, n_embd_, ids, k, acts, g, n_ff_, stream);
  quantize_activations(forms[1], rep, acts, k, n_embd_, stream);
  matvec_experts(up_exps_.type, up_exps_.data.data(), n_ff_, n_embd_, ids, k, acts, u, n_ff_, stream);
  swiglu_clamp_rows(g, u, cpu::expert_weight_before_down(numerics_) ? weights : nullptr, m, k, n_ff_, clamp_exp_,
                    numerics_, stream);
  quantize_activations(forms[2], m, acts, k, n_ff_, stream);
  matvec_experts(down_exps_.type, down_exps_.data.data(), n_embd_, n_ff_, ids, k, acts, down, n_embd_, stream);
}

// Each active expert once over its pairs (grouped on the host: the ids come
// back from the device first).
void DeviceMoeLayer::routed_prefill(const float* xn, const int32_t* ids, const float* weights, int64_t n, float* down,
                                    DeviceProducts& P) const {
  const cudaStream_t stream = P.stream();
  const int64_t pairs = n * n_used_;
  std::vector<int32_t> host_ids(static_cast<size_t>(pairs));
  cuda_check(cudaMemcpyAsync(host_ids.data(), ids, host_ids.size() * 4, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync from the GPU", current_device());
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", current_device());
  // A share of the experts: this GPU's numbered as its own, the other's
  // pairs grouped last and left zero.
  const int held = backend::share_expert_count(n_expert_, share_rank_, share_size_);
  const backend::ExpertGroups groups =
      share_size_ > 1 ? backend::group_pairs_by_expert(
                            backend::share_local_ids(host_ids, n_expert_, share_rank_, share_size_), held + 1)
                      : backend::group_pairs_by_expert(host_ids, n_expert_);
  ExpertProducts products(groups, n_used_, stream, share_size_ > 1 ? held : -1);
  const StreamScratch mid(static_cast<size_t>(3 * pairs * n_ff_) * sizeof(float), stream);
  float* g = mid.as<float>();
  float* u = g + pairs * n_ff_;
  float* m = u + pairs * n_ff_;
  products.run(P.gemm(), gate_exps_.type, gate_exps_.data.data(), n_ff_, n_embd_, xn, true, g);
  products.run(P.gemm(), up_exps_.type, up_exps_.data.data(), n_ff_, n_embd_, xn, true, u);
  swiglu_clamp_rows(g, u, cpu::expert_weight_before_down(numerics_) ? weights : nullptr, m, pairs, n_ff_, clamp_exp_,
                    numerics_, stream);
  products.run(P.gemm(), down_exps_.type, down_exps_.data.data(), n_embd_, n_ff_, m, false, down);
}

}  // namespace ds4::cuda
