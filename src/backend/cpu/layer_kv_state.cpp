#include "backend/cpu/layer_kv_state.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/fp16.h"

namespace ds4::cpu {

LayerKvState::LayerKvState(const model::LayerWeights &layer, const model::Deepseek4HParams &hp, Numerics numerics,
                           int64_t reserve_ctx)
    : numerics_(numerics),
      ratio_(static_cast<int>(layer.compress_ratio)),
      head_dim_(static_cast<int>(hp.head_dim)),
      index_dim_(layer.compress_ratio == 4 ? static_cast<int>(hp.indexer_head_dim) : 0),
      n_swa_(static_cast<int>(hp.n_swa)) {
  if (n_swa_ <= 0) throw Error("layer " + std::to_string(layer.index) + ": sliding window of 0 rows");
  raw_.resize(static_cast<size_t>(n_swa_) * head_dim_);
  raw_pos_.resize(static_cast<size_t>(n_swa_));
  if (ratio_ != 0) attn_comp_.emplace(layer, hp, CompressorRole::Attention, numerics);
  if (ratio_ == 4) index_comp_.emplace(layer, hp, CompressorRole::Indexer, numerics);
  if (ratio_ != 0 && reserve_ctx > 0) {
    const auto rows = static_cast<size_t>(reserve_ctx / ratio_ + 2);
    comp_.reserve(rows * static_cast<size_t>(head_dim_));
    if (ratio_ == 4) index_.reserve(rows * static_cast<size_t>(index_dim_));
  }
}

void LayerKvState::reset() {
  raw_next_ = raw_count_ = 0;
  comp_.clear();
  index_.clear();
  n_comp_ = n_index_ = 0;
  if (attn_comp_) attn_comp_->reset();
  if (index_comp_) index_comp_->reset();
}

void LayerKvState::store(std::vector<float> &dst, std::span<const float> row) const {
  const size_t at = dst.size();
  dst.insert(dst.end(), row.begin(), row.end());
  // Default: ds4's cache holds every row f16-rounded (trap T16).
  if (numerics_ == Numerics::Default)
    for (size_t i = at; i < dst.size(); ++i) dst[i] = f16_round(dst[i]);
}

void LayerKvState::push_raw(std::span<const float> row, int64_t pos) {
  if (row.size() != static_cast<size_t>(head_dim_)) throw Error("push_raw: row is not head_dim wide");
  float *slot = raw_.data() + static_cast<size_t>(raw_next_) * head_dim_;
  for (int i = 0; i < head_dim_; ++i)
    slot[i] = numerics_ == Numerics::Default ? f16_round(row[static_cast<size_t>(i)]) : row[static_cast<size_t>(i)];
  raw_pos_[static_cast<size_t>(raw_next_)] = pos;
  raw_next_ = (raw_next_ + 1) % n_swa_;
  raw_count_ = std::min(raw_count_ + 1, n_swa_);
}

void LayerKvState::append_compressed(std::span<const float> row) {
  if (row.size() != static_cast<size_t>(head_dim_)) throw Error("append_compressed: row is not head_dim wide");
  store(comp_, row);
  ++n_comp_;
}

void LayerKvState::append_index(std::span<const float> row) {
  if (index_dim_ == 0 || row.size() != static_cast<size_t>(index_dim_))
    throw Error(
        "append_index: no index rows on this layer, or row is not "
        "indexer_head_dim wide");
  store(index_, row);
  ++n_index_;
}

void LayerKvState::restore_raw(std::span<const float> rows, int64_t first_pos) {
  const size_t width = static_cast<size_t>(head_dim_);
  if (rows.size() % width != 0 || rows.size() / width > static_cast<size_t>(n_swa_))
    throw Error("restore_raw: " + std::to_string(rows.size()) + " floats are not at most " + std::to_string(n_swa_) +
                " rows of " + std::to_string(head_dim_));
  const int n = static_cast<int>(rows.size() / width);
  // Slots 0..n-1 in position order; the ring continues from there exactly as
  // if the rows had been pushed one by one.
  std::copy(rows.begin(), rows.end(), raw_.begin());
  for (int i = 0; i < n; ++i) raw_pos_[static_cast<size_t>(i)] = first_pos + i;
  raw_count_ = n;
  raw_next_ = n % n_swa_;
}

void LayerKvState::restore_compressed(std::span<const float> rows) {
  if (ratio_ == 0 && !rows.empty()) throw Error("restore_compressed: no compressed rows on this layer");
  if (rows.size() % static_cast<size_t>(head_dim_) != 0)
    throw Error("restore_compressed: " + std::to_string(rows.size()) + " floats are not whole rows of " +
                std::to_string(head_dim_));
  comp_.assign(rows.begin(), rows.end());
  n_comp_ = static_cast<int64_t>(rows.size() / static_cast<size_t>(head_dim_));
}

void LayerKvState::restore_index(std::span<const float> rows) {
  if (index_dim_ == 0) {
    if (!rows.empty()) throw Error("restore_index: no index rows on this layer");
    return;
  }
  if (rows.size() % static_cast<size_t>(index_dim_) != 0)
    throw Error("restore_index: " + std::to_string(rows.size()) + " floats are not whole rows of " +
                std::to_string(index_dim_));
  index_.assign(rows.begin(), rows.end());
  n_index_ = static_cast<int64_t>(rows.size() / static_cast<size_t>(index_dim_));
}

size_t LayerKvState::raw_bytes() const { return raw_.size() * sizeof(float) + raw_pos_.size() * sizeof(int64_t); }
size_t LayerKvState::compressed_bytes() const { return static_cast<size_t>(n_comp_) * head_dim_ * sizeof(float); }
size_t LayerKvState::index_bytes() const { return static_cast<size_t>(n_index_) * index_dim_ * sizeof(float); }

size_t LayerKvState::frontier_bytes() const {
  size_t n = 0;
  for (const auto *c : {&attn_comp_, &index_comp_})
    if (*c) n += 2 * static_cast<size_t>((*c)->state_rows()) * (*c)->state_width() * sizeof(float);
  return n;
}

}  // namespace ds4::cpu
