#include "backend/cuda/layer_kv.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/fp16.h"

namespace ds4::cuda {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("GPU KV state: " + what); }

std::vector<float> to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = f16_to_f32(bits[i]);
  return v;
}

}  // namespace

DeviceLayerKv::DeviceLayerKv(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, int64_t n_ctx,
                             const DeviceCompressor* attn, const DeviceCompressor* index, cudaStream_t stream)
    : attn_(attn),
      index_comp_(index),
      ratio_(static_cast<int>(layer.compress_ratio)),
      head_dim_(static_cast<int>(hp.head_dim)),
      index_dim_(layer.compress_ratio == 4 ? static_cast<int>(hp.indexer_head_dim) : 0),
      n_swa_(static_cast<int>(hp.n_swa)) {
  if (n_swa_ <= 0) fail("layer " + std::to_string(layer.index) + " has a sliding window of 0 rows");
  if ((ratio_ != 0) != (attn != nullptr) || (ratio_ == 4) != (index != nullptr))
    fail("layer " + std::to_string(layer.index) + " of ratio " + std::to_string(ratio_) +
         " needs its compressors (attention on ratio 4 and 128, indexer on ratio 4)");
  const size_t row_bytes = static_cast<size_t>(head_dim_) * sizeof(uint16_t);
  for (DeviceBuffer& r : ring_) r = DeviceBuffer(static_cast<size_t>(n_swa_) * row_bytes);
  ring_pos.assign(static_cast<size_t>(n_swa_), 0);
  if (ratio_ != 0) {
    capacity_ = n_ctx / ratio_ + 2;
    compressed_ = DeviceBuffer(static_cast<size_t>(capacity_) * row_bytes);
    attn_frontier.emplace(attn->new_frontier(stream));
  }
  if (ratio_ == 4) {
    index_ = DeviceBuffer(static_cast<size_t>(capacity_) * static_cast<size_t>(index_dim_) * sizeof(uint16_t));
    index_frontier.emplace(index->new_frontier(stream));
  }
}

void DeviceLayerKv::reset(cudaStream_t stream) {
  ring_count = ring_next = 0;
  ring_current_ = 0;
  n_compressed = n_index = 0;
  if (attn_frontier) attn_->reset(*attn_frontier, stream);
  if (index_frontier) index_comp_->reset(*index_frontier, stream);
}

size_t DeviceLayerKv::bytes() const {
  const auto hd = static_cast<size_t>(head_dim_);
  size_t n = static_cast<size_t>(n_swa_) * (hd * sizeof(uint16_t) + sizeof(int64_t));
  n += static_cast<size_t>(n_compressed) * hd * sizeof(uint16_t);
  n += static_cast<size_t>(n_index) * static_cast<size_t>(index_dim_) * sizeof(uint16_t);
  for (const DeviceCompressor* c : {attn_, index_comp_})
    if (c) n += 2 * static_cast<size_t>(c->state_rows()) * static_cast<size_t>(c->state_width()) * sizeof(float);
  return n;
}

void DeviceLayerKv::save(cpu::LayerKvState& out) const {
  if (out.numerics() != backend::Numerics::Default || out.ratio() != ratio_ || out.head_dim() != head_dim_ ||
      out.index_dim() != index_dim_ || out.n_swa() != n_swa_)
    fail("the CPU state is for another kind of layer or numerics");
  const auto hd = static_cast<size_t>(head_dim_);
  // The window oldest first: slot (next - count + i) mod n_swa.
  std::vector<uint16_t> ring_bits(static_cast<size_t>(n_swa_) * hd), window;
  ring_[ring_current_].download(ring_bits.data(), ring_bits.size() * sizeof(uint16_t));
  window.reserve(static_cast<size_t>(ring_count) * hd);
  for (int i = 0; i < ring_count; ++i) {
    const auto slot = static_cast<size_t>((ring_next - ring_count + i + n_swa_) % n_swa_);
    window.insert(window.end(), ring_bits.begin() + static_cast<ptrdiff_t>(slot * hd),
                  ring_bits.begin() + static_cast<ptrdiff_t>((slot + 1) * hd));
  }
  const int64_t first_pos =
      ring_count > 0 ? ring_pos[static_cast<size_t>((ring_next - ring_count + n_swa_) % n_swa_)] : 0;
  std::vector<uint16_t> comp(static_cast<size_t>(n_compressed) * hd);
  std::vector<uint16_t> idx(static_cast<size_t>(n_index) * static_cast<size_t>(index_dim_));
  if (!comp.empty()) compressed_.download(comp.data(), comp.size() * sizeof(uint16_t));
  if (!idx.empty()) index_.download(idx.data(), idx.size() * sizeof(uint16_t));
  out.restore_raw(to_f32(window), first_pos);
  out.restore_compressed(to_f32(comp));
  out.restore_index(to_f32(idx));
  if (attn_frontier)
    attn_->download(*attn_frontier, out.attn_compressor()->state_kv(), out.attn_compressor()->state_score());
  if (index_frontier)
    index_comp_->download(*index_frontier, out.index_compressor()->state_kv(), out.index_compressor()->state_score());
}

void DeviceLayerKv::load(const cpu::LayerKvState& in, cudaStream_t stream) {
  if (in.numerics() != backend::Numerics::Default || in.ratio() != ratio_ || in.head_dim() != head_dim_ ||
      in.index_dim() != index_dim_ || in.n_swa() != n_swa_)
    fail("the CPU state is for another kind of layer or numerics");
  if (in.n_compressed() > capacity_ || in.n_index() > capacity_)
    fail(std::to_string(in.n_compressed()) + " compressed rows do not fit the " + std::to_string(capacity_) +
         " this context has room for");
  const auto hd = static_cast<size_t>(head_dim_);
  // The window into slots 0 .. count - 1, oldest first (as restore_raw lays it).
  std::vector<uint16_t> window(static_cast<size_t>(n_swa_) * hd, 0);
  for (int i = 0; i < in.raw_count(); ++i) {
    const uint16_t* row = in.raw_row_f16(i);
    std::copy(row, row + hd, window.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(i) * hd));
    ring_pos[static_cast<size_t>(i)] = in.raw_pos(i);
  }
  std::vector<uint16_t> comp(static_cast<size_t>(in.n_compressed()) * hd);
  for (int64_t c = 0; c < in.n_compressed(); ++c) {
    const uint16_t* row = in.compressed_row_f16(c);
    std::copy(row, row + hd, comp.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(c) * hd));
  }
  const auto id = static_cast<size_t>(index_dim_);
  std::vector<uint16_t> idx(static_cast<size_t>(in.n_index()) * id);
  for (int64_t c = 0; c < in.n_index(); ++c) {
    const uint16_t* row = in.index_rows().f16_row(c);
    std::copy(row, row + id, idx.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(c) * id));
  }
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", current_device());
  ring_current_ = 0;
  ring_[0].upload(window.data(), window.size() * sizeof(uint16_t));
  ring_count = in.raw_count();
  ring_next = in.raw_count() % n_swa_;
  if (!comp.empty()) compressed_.upload(comp.data(), comp.size() * sizeof(uint16_t));
  if (!idx.empty()) index_.upload(idx.data(), idx.size() * sizeof(uint16_t));
  n_compressed = in.n_compressed();
  n_index = in.n_index();
  if (attn_frontier)
    attn_->upload(*attn_frontier, in.attn_compressor()->state_kv(), in.attn_compressor()->state_score());
  if (index_frontier)
    index_comp_->upload(*index_frontier, in.index_compressor()->state_kv(), in.index_compressor()->state_score());
}

}  // namespace ds4::cuda
