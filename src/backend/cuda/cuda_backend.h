// The forward pass on NVIDIA GPUs behind backend::Backend (--backend cuda):
// whole layers per GPU as backend/gpu_placement places them (weights plus the
// context's KV state, scratch reserved; a layout that does not fit is refused
// before anything is loaded), the hidden states handed from one GPU to the
// next at the layer boundaries. Each session's KV state lives on the GPUs of
// its layers; snapshots, payloads and session files go through the CPU
// backend's format (the state is copied to a cpu::Session and back), so a
// session saved here loads on the CPU and the other way round.
//
// --gpu-tensor-parallel (backend::place_pairs): GPUs in pairs, the home
// holding the layers less their odd routed experts, the partner those; per
// MoE sublayer the home routes, sends the normed input and routing to the
// partner (PairLink: NCCL), both evaluate their experts, and the partner's
// part is added onto the home's. The partner holds no session state.
//
// Either numerics: Default (f16 KV cache, ds4's steps) or Quality (f32 KV
// cache, llama.cpp's steps, as the CPU's --quality). A batch's
// parts run together, as on the CPU: every weight read once for all
// sessions' tokens; each session's attention over its own state. Up to
// kMatvecTokens tokens a chunk take the decode kernels, whose per-token
// results do not depend on the batch: a batched decode step leaves each
// session as its step alone would, bit for bit (quantized weights).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention_layer.h"
#include "backend/cuda/device_tensor.h"
#include "backend/cuda/layer_kv.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/pair_link.h"
#include "backend/cuda/phase_profile.h"
#include "backend/gpu_placement.h"
#include "backend/numerics.h"

namespace ds4::cpu {
class Session;
}

namespace ds4::cuda {

struct CudaBackendOptions {
  std::vector<int> devices;  // CUDA device numbers, in layer order; empty: device 0
  backend::VramBudget vram;  // --gpu-vram; empty: auto
  int64_t max_ctx = 4096;    // the longest session context the placement reserves KV state for
  // --gpu-tensor-parallel: devices are homes, then their partners in the same
  // order (backend::place_pairs); each pair splits its layers' routed experts.
  bool tensor_parallel = false;
  // Tests' stand-in where one GPU is all there is: a pair may name one GPU
  // twice (its memory halved between the two; device copies, no NCCL).
  bool one_gpu_pairs = false;
  // --gpu-prefill: quantized weights' prefill products on the int8 tensor
  // cores (exact to the CPU) or through cuBLAS on dequantized f16.
  PrefillProducts prefill = PrefillProducts::Int8TensorCores;
};

class CudaBackend;

class CudaSession final : public backend::Session {
 public:
  int64_t n_ctx() const override { return n_ctx_; }
  std::span<const int32_t> tokens() const override { return tokens_; }
  std::span<const float> logits() const override { return logits_; }
  bool consistent() const override { return consistent_; }
  void reset() override;
  std::unique_ptr<backend::Session> snapshot() const override;
  void restore(const backend::Session& snapshot) override;
  size_t state_bytes() const override;

  const CudaBackend& backend() const { return *backend_; }

 private:
  friend class CudaBackend;
  CudaSession(const CudaBackend& backend, int64_t n_ctx);

  const CudaBackend* backend_;
  int64_t n_ctx_;
  std::vector<DeviceLayerKv> layers_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  bool consistent_ = true;
};

class CudaBackend final : public backend::Backend {
 public:
  // Places and loads `model` (which must outlive this object). ds4::Error
  // when no usable GPU is there, a device is not usable, the layout does not
  // fit (naming the GPU and the shortfall).
  CudaBackend(const model::Deepseek4Model& model, backend::Numerics numerics, const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const model::Deepseek4Model& model() const override { return *model_; }
  backend::Numerics numerics() const override { return numerics_; }
  int64_t hidden_size() const override { return hc_dim_; }
  std::unique_ptr<backend::Session> new_session(int64_t n_ctx) const override;
  bool owns(const backend::Session& session) const override;
  void eval(std::span<const backend::Part> parts, backend::LayerRange range = {}) override;
  using backend::Backend::eval;
  void eval_head(const float* hidden, int64_t n, float* logits) override;
  void set_progress(Progress progress) override { progress_ = std::move(progress); }
  void set_prefill_chunk(int n) override;
  int prefill_chunk() const override { return chunk_; }
  std::vector<uint8_t> save_state(const backend::Session& session) const override;
  void load_state(std::span<const uint8_t> payload, backend::Session& session) const override;
  std::vector<uint8_t> save_layers(const backend::Session& session, backend::LayerRange range) const override;
  void load_layers(std::span<const uint8_t> state, backend::Session& session, backend::LayerRange range) const override;
  void save_session_file(const std::string& path, const backend::Session& session) const override;
  void load_session_file(const std::string& path, backend::Session& session) const override;

  // Where the layers went, a line per GPU (backend::describe).
  const std::vector<backend::GpuShare>& placement() const { return shares_; }

  // The session's state as a CPU session of the same model, and back
  // (ds4::Error, session unchanged, when it does not fit).
  cpu::Session to_cpu(const CudaSession& session) const;
  void from_cpu(const cpu::Session& cpu, CudaSession& session) const;

 private:
  friend class CudaSession;
  struct Gpu;
  struct HcWeights {
    DeviceTensor fn;           // hc_dim -> mixes
    DeviceBuffer scale, base;  // f32
  };
  struct ChunkBuffers;
  // A tensor-parallel pair: the partner GPU of a home, the link between them,
  // the partner's part of each of the home's layers.
  struct Pair {
    std::unique_ptr<Gpu> partner;
    std::unique_ptr<PairLink> link;
  };
  struct PairBuffers;

  CudaSession& session_of(const backend::Part& part, size_t index) const;
  void check(const CudaSession& session, std::span<const int32_t> tokens) const;
  struct TokenPlace {
    size_t part;
    int64_t pos;
    int64_t index;  // in the part's tokens
  };
  // One chunk of the parts' flattened tokens through layers [begin, end).
  void eval_chunk(std::span<const backend::Part> parts, std::span<CudaSession* const> sessions,
                  std::span<const int32_t> tokens, std::span<const TokenPlace> places, int begin, int end, bool head);
  void finish_chunk(std::span<const backend::Part> parts, std::span<CudaSession* const> sessions,
                    std::span<const int32_t> tokens, std::span<const TokenPlace> places, const ChunkBuffers& b,
                    bool head);
  void hc_pre(ChunkBuffers& b, int64_t m, const HcWeights& w, Gpu& gpu);
  void hc_post(ChunkBuffers& b, int64_t m);
  // The MoE sublayer of layer il on b.x into b.f: on its GPU, or split
  // across its pair (the routed inputs to the partner, its part added back).
  void moe(int il, ChunkBuffers& b, std::span<const int32_t> tokens, Gpu& gpu,
           std::vector<std::unique_ptr<PairBuffers>>& pair_buffers);
  // Logits (g x n_vocab, host) of g hidden states on the last GPU.
  void head_rows(const float* H, int64_t g, float* logits_host);
  Gpu& gpu_of_layer(int il) const;
  void fill_layers(CudaSession& session) const;

  const model::Deepseek4Model* model_;
  backend::Numerics numerics_;
  int n_layer_ = 0, n_embd_ = 0, hc_dim_ = 0, n_vocab_ = 0, sinkhorn_iters_ = 20;
  float rms_eps_ = 1e-6f, hc_eps_ = 1e-6f;
  int64_t max_ctx_ = 0;
  int chunk_ = 4096;
  Progress progress_;
  int64_t progress_done_ = 0, progress_total_ = 0;
  std::vector<backend::GpuShare> shares_;
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::vector<int> layer_gpu_;  // index into gpus_
  std::vector<Pair> pairs_;     // tensor parallel: one per home GPU (gpus_ order)
  std::vector<int> layer_pair_;  // index into pairs_, -1 for a layer alone on its GPU
  std::vector<int> devices_;     // every GPU used, homes and partners (DS4_CUDA_PROFILE waits on them)
  PhaseProfile profile_;
  std::vector<std::unique_ptr<DeviceAttentionLayer>> attn_;
  std::vector<std::unique_ptr<DeviceMoeLayer>> moe_;
  std::vector<std::unique_ptr<DeviceMoeLayer>> partner_moe_;  // tensor parallel: the odd experts, on the partner
  std::vector<HcWeights> hc_attn_, hc_ffn_;
  DeviceTensor token_embd_;
  HcWeights hc_head_;
  DeviceBuffer output_norm_;
  DeviceTensor output_;
};

}  // namespace ds4::cuda
