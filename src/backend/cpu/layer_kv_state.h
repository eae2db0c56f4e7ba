// What one layer keeps between tokens of a session (MODEL.md 6): the raw
// sliding window (the newest n_swa kv rows with their positions), the
// append-only compressed attention rows and, on ratio-4 layers, indexer rows,
// plus the compressors whose frontiers produce them. Rows are stored as the
// numerics' cache stores them (KvRows): Default rounds every row to f16 and
// keeps the f16 bits (half the bytes of ds4's f32 buffers of f16-exact
// values, same values), Quality keeps f32 (llama.cpp, F32 KV).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/compressor.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/numerics.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4::cpu {

class LayerKvState {
 public:
  // Binds the layer's compressors (none on ratio 0; attention on ratio 4 and
  // 128; indexer too on ratio 4); their weights stay in the model's mapping,
  // which must outlive this object. reserve_ctx > 0 reserves the compressed
  // row capacity MODEL.md 6 gives for that context (ctx/ratio + 2 rows).
  LayerKvState(const model::LayerWeights &layer, const model::Deepseek4HParams &hp, Numerics numerics,
               int64_t reserve_ctx = 0);

  // Empty window, no compressed rows, empty frontiers; capacity is kept.
  void reset();

  // Stores `row` (head_dim) as the window's newest row, rounded for storage;
  // when the window is full the oldest row is dropped.
  void push_raw(std::span<const float> row, int64_t pos);
  // Rows held (<= n_swa); i = 0 is the oldest.
  int raw_count() const { return raw_count_; }
  int64_t raw_pos(int i) const { return raw_pos_[static_cast<size_t>(raw_slot(i))]; }

  // Append-only, rounded for storage.
  void append_compressed(std::span<const float> row);
  void append_index(std::span<const float> row);
  int64_t n_compressed() const { return comp_.rows(); }
  int64_t n_index() const { return index_.rows(); }

  // A row as f32 (KvRows::row): a pointer into the state (Quality) or the
  // row converted into scratch (Default; head_dim, resp. index_dim floats).
  // Pointers into the state are invalidated by the next push or append.
  const float *raw_row(int i, float *scratch) const { return raw_.row(raw_slot(i), scratch); }
  const float *compressed_row(int64_t c, float *scratch) const { return comp_.row(c, scratch); }
  const float *index_row(int64_t c, float *scratch) const { return index_.row(c, scratch); }
  // Default (rows stored as f16): a row's f16 bits in place, no conversion;
  // for attention_with_sink_f16. Invalidated like the pointers above.
  bool rows_are_f16() const { return raw_.is_f16(); }
  const uint16_t *raw_row_f16(int i) const { return raw_.f16_row(raw_slot(i)); }
  const uint16_t *compressed_row_f16(int64_t c) const { return comp_.f16_row(c); }
  // The index rows as stored (the indexer reads f16 rows without a copy).
  const KvRows &index_rows() const { return index_; }

  // nullptr where the layer has none.
  Compressor *attn_compressor() { return attn_comp_ ? &*attn_comp_ : nullptr; }
  Compressor *index_compressor() { return index_comp_ ? &*index_comp_ : nullptr; }
  const Compressor *attn_compressor() const { return attn_comp_ ? &*attn_comp_ : nullptr; }
  const Compressor *index_compressor() const { return index_comp_ ? &*index_comp_ : nullptr; }

  // Restoring saved state (session payloads). The rows were rounded when they
  // were first stored, so they are copied verbatim, never rounded again.
  // restore_raw: the window becomes `rows` (a whole number of head_dim rows,
  // at most n_swa, oldest first) at positions first_pos, first_pos + 1, ...
  // restore_compressed / restore_index: the rows replace all held rows.
  // ds4::Error, state unchanged, when the sizes do not fit or (Default) a
  // value is not f16-exact, so could not have been stored. The compressor
  // frontiers are restored through their state_kv() / state_score() spans.
  void restore_raw(std::span<const float> rows, int64_t first_pos);
  void restore_compressed(std::span<const float> rows);
  void restore_index(std::span<const float> rows);

  // Bytes of state: the window's n_swa x head_dim buffer and positions, the
  // live compressed and index rows (rows at kv_elem_bytes(numerics) a value),
  // both compressors' frontiers (kv + score, always f32). Capacity reserved
  // but unused is not counted.
  size_t raw_bytes() const;
  size_t compressed_bytes() const;
  size_t index_bytes() const;
  size_t frontier_bytes() const;
  size_t bytes() const { return raw_bytes() + compressed_bytes() + index_bytes() + frontier_bytes(); }

  int ratio() const { return ratio_; }
  int head_dim() const { return head_dim_; }
  int index_dim() const { return index_dim_; }
  int n_swa() const { return n_swa_; }
  Numerics numerics() const { return numerics_; }

 private:
  int raw_slot(int i) const { return (raw_next_ - raw_count_ + i + n_swa_) % n_swa_; }
  Numerics numerics_;
  int ratio_ = 0, head_dim_ = 0, index_dim_ = 0, n_swa_ = 0;
  KvRows raw_;                    // n_swa x head_dim ring
  std::vector<int64_t> raw_pos_;  // position of each slot
  int raw_next_ = 0, raw_count_ = 0;
  KvRows comp_, index_;  // index_ is 0 wide (empty) on layers without an indexer
  std::optional<Compressor> attn_comp_, index_comp_;
};

}  // namespace ds4::cpu
