#include "backend/cpu/layer_kv_state.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ds4::cpu {

LayerKvState::LayerKvState(const model::LayerWeights &layer, const model::Deepseek4HParams &hp, Numerics numerics,
                           int64_t reserve_ctx)
    : numerics_(numerics),
      ratio_(static_cast<int>(layer.compress_ratio)),
      head_dim_(static_cast<int>(hp.head_dim)),
      index_dim_(layer.compress_ratio == 4 ? static_cast<int>(hp.indexer_head_dim) : 0),
      n_swa_(static_cast<int>(hp.n_swa)),
      raw_(head_dim_, numerics),
      comp_(head_dim_, numerics),
      index_(index_dim_, numerics) {
  if (n_swa_ <= 0) throw Error("layer " + std::to_string(layer.index) + ": sliding window of 0 rows");
  raw_.resize(n_swa_);
  raw_pos_.resize(static_cast<size_t>(n_swa_));
  // A layer in a shard not present here (another pipeline stage's) keeps no state.
  if (!layer.attn_norm.present()) return;
  if (ratio_ != 0) attn_comp_.emplace(layer, hp, CompressorRole::Attention, numerics);
  if (ratio_ == 4) index_comp_.emplace(layer, hp, CompressorRole::Indexer, numerics);
  if (ratio_ != 0 && reserve_ctx > 0) {
    const int64_t rows = reserve_ctx / ratio_ + 2;
    comp_.reserve(rows);
    if (ratio_ == 4) index_.reserve(rows);
  }
}

void LayerKvState::reset() {
  raw_next_ = raw_count_ = 0;
  comp_.clear();
  index_.clear();
  if (attn_comp_) attn_comp_->reset();
  if (index_comp_) index_comp_->reset();
}

// KvRows rounds to f16 in Default: ds4's cache holds every row f16-rounded (trap T16).
void LayerKvState::push_raw(std::span<const float> row, int64_t pos) {
  if (row.size() != static_cast<size_t>(head_dim_)) throw Error("push_raw: row is not head_dim wide");
  raw_.set(raw_next_, row);
  raw_pos_[static_cast<size_t>(raw_next_)] = pos;
  raw_next_ = (raw_next_ + 1) % n_swa_;
  raw_count_ = std::min(raw_count_ + 1, n_swa_);
}

void LayerKvState::append_compressed(std::span<const float> row) {
  if (row.size() != static_cast<size_t>(head_dim_)) throw Error("append_compressed: row is not head_dim wide");
  comp_.append(row);
}

void LayerKvState::append_index(std::span<const float> row) {
  if (index_dim_ == 0 || row.size() != static_cast<size_t>(index_dim_))
    throw Error(
        "append_index: no index rows on this layer, or row is not "
        "indexer_head_dim wide");
  index_.append(row);
}

void LayerKvState::restore_raw(std::span<const float> rows, int64_t first_pos) {
  const size_t width = static_cast<size_t>(head_dim_);
  if (rows.size() % width != 0 || rows.size() / width > static_cast<size_t>(n_swa_))
    throw Error("restore_raw: " + std::to_string(rows.size()) + " floats are not at most " + std::to_string(n_swa_) +
                " rows of " + std::to_string(head_dim_));
  const int n = static_cast<int>(rows.size() / width);
  // Slots 0..n-1 in position order; the ring continues from there exactly as
  // if the rows had been pushed one by one. assign checks before it changes
  // anything; the ring then grows back to n_swa slots.
  raw_.assign(rows);
  raw_.resize(n_swa_);
  for (int i = 0; i < n; ++i) raw_pos_[static_cast<size_t>(i)] = first_pos + i;
  raw_count_ = n;
  raw_next_ = n % n_swa_;
}

void LayerKvState::restore_compressed(std::span<const float> rows) {
  if (ratio_ == 0 && !rows.empty()) throw Error("restore_compressed: no compressed rows on this layer");
  comp_.assign(rows);
}

void LayerKvState::restore_index(std::span<const float> rows) {
  if (index_dim_ == 0 && !rows.empty()) throw Error("restore_index: no index rows on this layer");
  index_.assign(rows);
}

size_t LayerKvState::raw_bytes() const { return raw_.bytes() + raw_pos_.size() * sizeof(int64_t); }
size_t LayerKvState::compressed_bytes() const { return comp_.bytes(); }
size_t LayerKvState::index_bytes() const { return index_.bytes(); }

size_t LayerKvState::frontier_bytes() const {
  size_t n = 0;
  for (const auto *c : {&attn_comp_, &index_comp_})
    if (*c) n += 2 * static_cast<size_t>((*c)->state_rows()) * (*c)->state_width() * sizeof(float);
  return n;
}

}  // namespace ds4::cpu
