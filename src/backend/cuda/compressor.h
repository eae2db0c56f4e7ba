// One layer's KV compressor on a GPU (backend/cpu/compressor.h, MODEL.md 4.5):
// a whole batch of tokens at once. backend::plan_compressor_batch says, from
// the positions alone, which rows each window closed in the batch pools and
// where the frontier's rows come from afterwards; the GPU adds ape to the
// batch's scores, pools every closed window in one launch, finishes the rows
// (RMSNorm, RoPE at the window start, the role's QAT step) and rebuilds the
// frontier by gathering rows into its second buffer. The rows equal the CPU
// compressor's within the GPU ops' stated error (expf, the RMSNorm sum's
// order); the frontier holds exactly the values the CPU's would.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "backend/compressor_plan.h"
#include "backend/cpu/compressor.h"
#include "backend/cpu/ops_rope.h"
#include "backend/cuda/device_buffer.h"
#include "backend/numerics.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4::cuda {

class DeviceCompressor {
 public:
  // A session's frontier (state_rows x state_width kv and scores, f32) on the
  // GPU, in two buffers: a batch reads one and writes the other.
  class Frontier {
   public:
    Frontier() = default;
    const float* kv() const { return kv_[current_].as<float>(); }
    const float* score() const { return score_[current_].as<float>(); }

   private:
    friend class DeviceCompressor;
    DeviceBuffer kv_[2], score_[2];
    int current_ = 0;
  };

  // Binds `layer`'s compressor of `role` (the CPU compressor's checks and
  // error messages) and copies its ape and norm weights, as f32, to the
  // current GPU.
  DeviceCompressor(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, cpu::CompressorRole role,
                   backend::Numerics numerics);

  int ratio() const { return host_.ratio(); }
  int dim() const { return host_.dim(); }
  int state_rows() const { return host_.state_rows(); }
  int state_width() const { return host_.state_width(); }
  cpu::CompressorRole role() const { return host_.role(); }

  // An empty frontier (kv 0, scores cpu::kPoolEmptyScore) on the current GPU.
  Frontier new_frontier(cudaStream_t stream) const;
  void reset(Frontier& frontier, cudaStream_t stream) const;

  // Feeds batch tokens first_pos .. first_pos + n - 1: kv and score are their
  // projections (n x state_width, device; score gets ape added in place).
  // The rows of the windows the batch closes go to out (plan.n_windows() x
  // dim, device) in order; the returned plan says which token closed each.
  backend::CompressorPlan push_batch(Frontier& frontier, const float* kv, float* score, int64_t first_pos, int64_t n,
                                     float* out, cudaStream_t stream) const;

  // The frontier to and from the host (row-major, as cpu::Compressor's
  // state_kv() / state_score()): session snapshots and payloads.
  void download(const Frontier& frontier, std::span<float> kv, std::span<float> score) const;
  void upload(Frontier& frontier, std::span<const float> kv, std::span<const float> score) const;

 private:
  void finish_rows(const backend::CompressorPlan& plan, float* out, cudaStream_t stream) const;

  cpu::Compressor host_;  // shapes, checks, ape and norm as f32 (its frontier is never used)
  backend::Numerics numerics_;
  float eps_;
  int n_rot_;
  cpu::RopeParams rope_;
  DeviceBuffer ape_, norm_;
};

}  // namespace ds4::cuda
