// One layer's attention sublayer on a GPU (backend/cpu/attention_layer.h,
// MODEL.md 4.2-4.7), for a batch of consecutive tokens of one session, in
// either numerics: the q LoRA and kv projections with their norms, RoPE and
// (Default) the KV rows' FP8 step; the batch's raw rows and the rows its
// closed windows compress stored first (as the CPU's cache keeps them: f16
// in Default, f32 in Quality); then, per
// token, the rows it may see (backend/attention_batch_plan.h: its window,
// and the compressed rows the indexer allows on ratio-4 layers, all of them
// on ratio 128) and attention with the sink; inverse RoPE and the grouped
// output LoRA. Every token's result is the CPU's token-by-token one within
// the GPU products' and ops' error (cuBLAS accumulation, expf, the order of
// sums): the check is test_cuda_layers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/attention_dims.h"
#include "backend/cpu/ops_rope.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/device_tensor.h"
#include "backend/cuda/layer_kv.h"
#include "backend/numerics.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4::cuda {

class DeviceAttentionLayer : private backend::AttentionDims {
 public:
  // Copies `layer`'s attention weights to the current GPU. ds4::Error on
  // shapes the CPU layer refuses.
  DeviceAttentionLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, backend::Numerics numerics);

  // A session's empty state for this layer, for n_ctx tokens.
  DeviceLayerKv new_state(int64_t n_ctx, cudaStream_t stream) const;

  // OUT (n x n_embd) = the sublayer's output for X (n x n_embd, the HC-mixed
  // input), the tokens at positions pos0 .. pos0 + n - 1 following what
  // `state` holds (updated). Device memory; queued on products.stream().
  // ds4::Error when the compressed rows would outgrow the state's context.
  void forward(const float* X, int64_t n, int64_t pos0, DeviceLayerKv& state, float* OUT,
               DeviceProducts& products) const;
  // n tokens of possibly several sessions (batched decode): token t goes to
  // position pos[t] of *states[t]; a session's tokens are together and in
  // position order, following what its state holds. The projections run once
  // for all tokens, each session's cache update and rows on its own state,
  // one attention launch for all. ds4::Error, nothing changed, on a state of
  // another layer, a session's tokens apart or out of order, or no room.
  void forward_tokens(const float* X, int64_t n, std::span<DeviceLayerKv* const> states, std::span<const int64_t> pos,
                      float* OUT, DeviceProducts& products) const;

 private:
  struct RopeTables;
  // One session's tokens [t0, t1) of a batch.
  struct Run {
    int64_t t0 = 0, t1 = 0;
    DeviceLayerKv* state = nullptr;
    int64_t pos0 = 0;
  };
  std::vector<Run> runs_of(std::span<DeviceLayerKv* const> states, std::span<const int64_t> pos) const;
  // A session's tokens and its index cache.
  struct IndexRun {
    int64_t t0, t1;
    const char* rows;
  };
  // Indices of the compressed rows each token may attend to (the indexer's
  // top-k on ratio-4 layers once a token sees more than top_k rows).
  void select_rows(const float* xn, const float* qr, int64_t n, const RopeTables& rope,
                   std::span<const IndexRun> index_runs, const int32_t* index_visible, int64_t max_visible,
                   int32_t* allowed, int32_t* n_allowed, DeviceProducts& products) const;

  const model::LayerWeights* w_;
  model::Deepseek4HParams hp_;
  backend::Numerics numerics_;
  int index_heads_ = 0, index_dim_ = 0, top_k_ = 0;
  cpu::RopeParams rope_;
  DeviceBuffer attn_norm_, q_a_norm_, kv_norm_, sinks_;
  DeviceBuffer group_ids_;  // 0 .. o_groups - 1: decode's grouped output as one routed-expert launch
  DeviceTensor q_a_, q_b_, kv_, out_a_, out_b_;
  DeviceTensor comp_kv_, comp_gate_, index_kv_, index_gate_, index_q_b_, index_proj_;
  // Owned by pointer: the sessions' states point at them.
  std::unique_ptr<DeviceCompressor> attn_comp_, index_comp_;
};

}  // namespace ds4::cuda
