// One layer's KV state of one session on a GPU (backend/cpu/layer_kv_state.h,
// MODEL.md 6), its rows kept as the CPU's cache keeps them in the numerics
// (Default: rounded to f16, the f16 bits; Quality: f32): the raw window's ring of
// n_swa rows (two buffers: a batch reads one and writes the other), the
// append-only compressed and index rows with room for the context, and the
// compressors' frontiers. Positions and counts live on the host, where the
// batch plans are made. save / load copy it to and from the CPU's state, so
// session snapshots and payloads go through the CPU's format.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "backend/cpu/layer_kv_state.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/device_buffer.h"
#include "backend/numerics.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4::cuda {

class DeviceLayerKv {
 public:
  // For `layer` and a context of n_ctx tokens (compressed and index rows:
  // n_ctx / ratio + 2, as the CPU reserves); attn / index: the layer's
  // device compressors (null where it has none; they must outlive this).
  DeviceLayerKv(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, backend::Numerics numerics,
                int64_t n_ctx, const DeviceCompressor* attn, const DeviceCompressor* index, cudaStream_t stream);

  // Empty window, no compressed rows, empty frontiers.
  void reset(cudaStream_t stream);

  // The whole state into `out` (a CPU state for the same layer in the same
  // numerics; its rows replaced) and back. ds4::Error, nothing changed, when
  // the other state does not fit (its numerics, widths, or more compressed
  // rows than this state has room for). Synchronous.
  void save(cpu::LayerKvState& out) const;
  void load(const cpu::LayerKvState& in, cudaStream_t stream);

  // Bytes of state, counted as cpu::LayerKvState::bytes() counts them (the
  // window's whole ring, the rows held, each frontier's kv and scores once).
  size_t bytes() const;

  backend::Numerics numerics() const { return numerics_; }
  // Bytes of one stored value: 2 (f16 bits, Default) or 4 (f32, Quality).
  int value_bytes() const { return value_bytes_; }
  bool f32_rows() const { return value_bytes_ == 4; }
  int ratio() const { return ratio_; }
  int head_dim() const { return head_dim_; }
  int index_dim() const { return index_dim_; }
  int n_swa() const { return n_swa_; }
  int64_t capacity() const { return capacity_; }

  // The ring: slot s at ring_row(s) (head_dim values); count rows, next
  // slot to write; ring_pos[s] the position of slot s's row.
  const char* ring_row(int64_t s) const { return ring_[ring_current_].as<char>() + s * row_bytes(); }
  char* next_ring() { return ring_[1 - ring_current_].as<char>(); }
  void swap_ring() { ring_current_ = 1 - ring_current_; }
  int ring_count = 0;
  int ring_next = 0;
  std::vector<int64_t> ring_pos;

  // Compressed and index rows (head_dim, resp. index_dim values each).
  char* compressed_row(int64_t c) const { return compressed_.as<char>() + c * row_bytes(); }
  char* index_row(int64_t c) const { return index_.as<char>() + c * index_row_bytes(); }
  int64_t row_bytes() const { return static_cast<int64_t>(head_dim_) * value_bytes_; }
  int64_t index_row_bytes() const { return static_cast<int64_t>(index_dim_) * value_bytes_; }
  int64_t n_compressed = 0;
  int64_t n_index = 0;

  std::optional<DeviceCompressor::Frontier> attn_frontier, index_frontier;

 private:
  // ds4::Error unless `cpu` is a state of this kind of layer and numerics.
  void check_kind(const cpu::LayerKvState& cpu) const;

  const DeviceCompressor* attn_;
  const DeviceCompressor* index_comp_;
  backend::Numerics numerics_;
  int value_bytes_;
  int ratio_, head_dim_, index_dim_, n_swa_;
  int64_t capacity_ = 0;
  DeviceBuffer ring_[2];
  int ring_current_ = 0;
  DeviceBuffer compressed_, index_;
};

}  // namespace ds4::cuda
