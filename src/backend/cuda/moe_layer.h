// One layer's MoE sublayer on a GPU (backend/cpu/moe_layer.h, MODEL.md 4.8)
// for a batch of tokens: RMSNorm, router and routing (hash table or biased
// top-k, route.cu), the routed experts with clamped SwiGLU (up to
// kMatvecTokens tokens with quantized experts: one launch per product over
// all (token, expert) pairs, the expert ids read on the device, each pair as
// its token alone gets it; more: each active expert once over its tokens
// through cuBLAS, expert_products.h), the shared expert, and the sum in the
// CPU's slot order. Within the GPU products' and ops' error of the CPU
// layer: the check is test_cuda_layers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_tensor.h"
#include "backend/numerics.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4::cuda {

// Which part of a layer's MoE one GPU holds. Tensor parallel in pairs
// (backend/gpu_placement.h place_pairs) splits the routed experts: the home
// (backend::TensorShare rank 0 of 2) holds everything but the odd routed
// experts, the partner (rank 1) only those.
enum class MoePart { Whole, Home, Partner };

class DeviceMoeLayer {
 public:
  // Copies `layer`'s MoE weights of `part` to the current GPU (the CPU
  // layer's shape checks; the hash table's expert ids checked against
  // n_expert).
  DeviceMoeLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, backend::Numerics numerics,
                 MoePart part = MoePart::Whole);

  // OUT (n x n_embd) = routed + shared experts of X (n x n_embd), device
  // memory; token_ids (host, n) pick the experts on hash layers, where they
  // must lie in [0, n_vocab) (ds4::Error, nothing queued, otherwise).
  // ids / weights (device, n x k; may be null) receive the selection.
  // route then experts; on a Home, OUT lacks the partner's experts.
  void forward(const float* X, const int32_t* token_ids, int64_t n, float* OUT, DeviceProducts& products,
               int32_t* ids = nullptr, float* weights = nullptr) const;

  // The steps of forward. route: xn (n x n_embd) = the normed input, ids and
  // weights (n x k) its routing; not on a Partner (ds4::Error).
  void route(const float* X, const int32_t* token_ids, int64_t n, float* xn, int32_t* ids, float* weights,
             DeviceProducts& products) const;
  // OUT (n x n_embd) = the experts this GPU holds of the routed pairs (the
  // others' rows count zero), plus the shared expert where it is held, in
  // the CPU's slot order.
  void experts(const float* xn, const int32_t* ids, const float* weights, int64_t n, float* OUT,
               DeviceProducts& products) const;

  MoePart part() const { return part_; }
  int n_embd() const { return n_embd_; }
  int n_used() const { return n_used_; }

 private:
  void routed_decode(const float* xn, const int32_t* ids, const float* weights, int64_t n, float* down,
                     DeviceProducts& products) const;
  void routed_prefill(const float* xn, const int32_t* ids, const float* weights, int64_t n, float* down,
                      DeviceProducts& products) const;

  backend::Numerics numerics_;
  MoePart part_;
  int share_rank_ = 0, share_size_ = 1;
  int index_, n_embd_, n_expert_, n_used_, n_vocab_, n_ff_, n_ff_shared_;
  bool hash_routed_;
  float eps_, scale_, clamp_exp_, clamp_shexp_;
  DeviceBuffer norm_, bias_, tid2eid_;
  DeviceTensor gate_inp_, gate_exps_, up_exps_, down_exps_, gate_shexp_, up_shexp_, down_shexp_;
};

}  // namespace ds4::cuda
