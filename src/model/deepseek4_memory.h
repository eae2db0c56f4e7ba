// Memory accounting for a deepseek4 shape: bytes of weights per tensor family,
// and the per-session attention state (MODEL.md §6-§7):
//   - raw window: every layer keeps the newest min(n_swa, ctx) KV rows of head_dim;
//   - compressed rows: a ratio-r layer (r = 4 or 128) gains one head_dim row
//     per r tokens, stored with capacity ctx/r + 2 rows;
//   - indexer rows: a ratio-4 layer gains one indexer_head_dim row per 4 tokens,
//     capacity ctx/4 + 2;
//   - compressor frontiers: the partial window of each compressor, kv and score
//     each coff*ratio rows x coff*D floats (main: D = head_dim, coff = 2 on
//     ratio 4; indexer: D = indexer_head_dim, coff 2, ratio 4). Always f32.
// Cached rows take elem_bytes each value: 4 for ds4's f32 buffers, 2 for f16.
#pragma once

#include <array>
#include <cstdint>

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"
#include "model/quant_mix.h"

namespace ds4::model {

struct Deepseek4Weights;

inline constexpr size_t kTensorFamilyCount = static_cast<size_t>(TensorFamily::RoutedDown) + 1;

struct WeightBytes {
  std::array<uint64_t, kTensorFamilyCount> by_family{};  // indexed by TensorFamily

  uint64_t of(TensorFamily f) const { return by_family[static_cast<size_t>(f)]; }
  uint64_t routed() const { return of(TensorFamily::RoutedGateUp) + of(TensorFamily::RoutedDown); }
  uint64_t total() const;
  uint64_t non_routed() const { return total() - routed(); }
};

// Bytes of the bound tensors (absent optional ones count 0).
WeightBytes weight_bytes(const Deepseek4Weights& w);
// Bytes the tensors of hp take in `mix`, without a file (planning).
WeightBytes weight_bytes(const Deepseek4HParams& hp, QuantMix mix);

struct KvStateBytes {
  uint64_t raw_window = 0;        // all layers
  uint64_t compressed_attn = 0;   // ratio 4 and 128 layers
  uint64_t compressed_index = 0;  // ratio-4 layers
  uint64_t frontiers = 0;         // main and indexer compressors, f32
  uint64_t total() const { return raw_window + compressed_attn + compressed_index + frontiers; }
};

// Weight bytes one decode step reads: every bound tensor whole, except
// token_embd and ffn_gate_tid2eid (one row each: the token's) and the routed
// expert tensors (ffn_gate/up/down_exps: n_expert_used of their n_expert
// matrices). The figure decode bandwidth is measured against (ds4-bench).
uint64_t decode_weight_bytes_per_token(const Deepseek4Weights& w, const Deepseek4HParams& hp);

// Cached values one token adds on average, summed over layers:
// head_dim/r per compressed layer plus indexer_head_dim/4 per ratio-4 layer
// (Flash: 21*160 + 20*4 = 3440). Exact as a double for every valid shape.
double kv_values_per_token(const Deepseek4HParams& hp);
double kv_bytes_per_token(const Deepseek4HParams& hp, uint32_t elem_bytes);

// Compressed and indexer rows live after n_tokens tokens (floor(n/r) rows per
// layer), in bytes; no capacity slack, no raw window, no frontiers.
uint64_t kv_compressed_bytes(const Deepseek4HParams& hp, uint64_t n_tokens, uint32_t elem_bytes);

// Whole state allocated for a context of n_ctx tokens (capacities as above).
KvStateBytes kv_state_bytes(const Deepseek4HParams& hp, uint64_t n_ctx, uint32_t elem_bytes);
// The share of layer il (kv_state_bytes is the sum over layers).
KvStateBytes kv_layer_state_bytes(const Deepseek4HParams& hp, uint32_t il, uint64_t n_ctx, uint32_t elem_bytes);

}  // namespace ds4::model
