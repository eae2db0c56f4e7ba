#include "backend/cuda/layer_kv.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/fp16.h"

namespace ds4::cuda {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("GPU KV state: " + what); }

// Rows as stored on the GPU (value_bytes each) -> f32 values, and the CPU's
// stored rows -> the GPU's bytes. Default's rows are f16 bits both sides;
// Quality's f32 both sides: nothing is rounded either way.
std::vector<float> stored_to_f32(const std::vector<char>& bytes, bool f32_rows) {
  if (f32_rows) {
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  }
  std::vector<float> v(bytes.size() / sizeof(uint16_t));
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + i * sizeof(uint16_t), sizeof(uint16_t));
    v[i] = f16_to_f32(h);
  }
  return v;
}

void append_bytes(const void* row, int64_t bytes, std::vector<char>& out) {
  const char* p = static_cast<const char*>(row);
  out.insert(out.end(), p, p + bytes);
}

}  // namespace

DeviceLayerKv::DeviceLayerKv(const model::LayerWeights& layer, const model::Deepseek4HParams& hp,
                             backend::Numerics numerics, int64_t n_ctx, const DeviceCompressor* attn,
                             const DeviceCompressor* index, cudaStream_t stream)
    : attn_(attn),
      index_comp_(index),
      numerics_(numerics),
      value_bytes_(numerics == backend::Numerics::Quality ? 4 : 2),
      ratio_(static_cast<int>(layer.compress_ratio)),
      head_dim_(static_cast<int>(hp.head_dim)),
      index_dim_(layer.compress_ratio == 4 ? static_cast<int>(hp.indexer_head_dim) : 0),
      n_swa_(static_cast<int>(hp.n_swa)) {
  if (n_swa_ <= 0) fail("layer " + std::to_string(layer.index) + " has a sliding window of 0 rows");
  if ((ratio_ != 0) != (attn != nullptr) || (ratio_ == 4) != (index != nullptr))
    fail("layer " + std::to_string(layer.index) + " of ratio " + std::to_string(ratio_) +
         " needs its compressors (attention on ratio 4 and 128, indexer on ratio 4)");
  const auto row = static_cast<size_t>(row_bytes());
  for (DeviceBuffer& r : ring_) r = DeviceBuffer(static_cast<size_t>(n_swa_) * row);
  ring_pos.assign(static_cast<size_t>(n_swa_), 0);
  if (ratio_ != 0) {
    capacity_ = n_ctx / ratio_ + 2;
    compressed_ = DeviceBuffer(static_cast<size_t>(capacity_) * row);
    attn_frontier.emplace(attn->new_frontier(stream));
  }
  if (ratio_ == 4) {
    index_ = DeviceBuffer(static_cast<size_t>(capacity_) * static_cast<size_t>(index_row_bytes()));
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
  const auto row = static_cast<size_t>(row_bytes());
  size_t n = static_cast<size_t>(n_swa_) * (row + sizeof(int64_t));
  n += static_cast<size_t>(n_compressed) * row;
  n += static_cast<size_t>(n_index) * static_cast<size_t>(index_row_bytes());
  for (const DeviceCompressor* c : {attn_, index_comp_})
    if (c) n += 2 * static_cast<size_t>(c->state_rows()) * static_cast<size_t>(c->state_width()) * sizeof(float);
  return n;
}

void DeviceLayerKv::check_kind(const cpu::LayerKvState& cpu) const {
  if (cpu.numerics() != numerics_ || cpu.ratio() != ratio_ || cpu.head_dim() != head_dim_ ||
      cpu.index_dim() != index_dim_ || cpu.n_swa() != n_swa_)
    fail("the CPU state is for another kind of layer or numerics");
}

void DeviceLayerKv::save(cpu::LayerKvState& out) const {
  check_kind(out);
  const auto row = static_cast<size_t>(row_bytes());
  // The window oldest first: slot (next - count + i) mod n_swa.
  std::vector<char> ring_bytes(static_cast<size_t>(n_swa_) * row), window;
  ring_[ring_current_].download(ring_bytes.data(), ring_bytes.size());
  window.reserve(static_cast<size_t>(ring_count) * row);
  for (int i = 0; i < ring_count; ++i) {
    const auto slot = static_cast<size_t>((ring_next - ring_count + i + n_swa_) % n_swa_);
    window.insert(window.end(), ring_bytes.begin() + static_cast<ptrdiff_t>(slot * row),
                  ring_bytes.begin() + static_cast<ptrdiff_t>((slot + 1) * row));
  }
  const int64_t first_pos =
      ring_count > 0 ? ring_pos[static_cast<size_t>((ring_next - ring_count + n_swa_) % n_swa_)] : 0;
  std::vector<char> comp(static_cast<size_t>(n_compressed) * row);
  std::vector<char> idx(static_cast<size_t>(n_index) * static_cast<size_t>(index_row_bytes()));
  if (!comp.empty()) compressed_.download(comp.data(), comp.size());
  if (!idx.empty()) index_.download(idx.data(), idx.size());
  out.restore_raw(stored_to_f32(window, f32_rows()), first_pos);
  out.restore_compressed(stored_to_f32(comp, f32_rows()));
  out.restore_index(stored_to_f32(idx, f32_rows()));
  if (attn_frontier)
    attn_->download(*attn_frontier, out.attn_compressor()->state_kv(), out.attn_compressor()->state_score());
  if (index_frontier)
    index_comp_->download(*index_frontier, out.index_compressor()->state_kv(), out.index_compressor()->state_score());
}

void DeviceLayerKv::load(const cpu::LayerKvState& in, cudaStream_t stream) {
  check_kind(in);
  if (in.n_compressed() > capacity_ || in.n_index() > capacity_)
    fail(std::to_string(in.n_compressed()) + " compressed rows do not fit the " + std::to_string(capacity_) +
         " this context has room for");
  // The window into slots 0 .. count - 1, oldest first (as restore_raw lays
  // it), the rest of the ring zero.
  std::vector<char> window, comp, idx;
  window.reserve(static_cast<size_t>(n_swa_) * static_cast<size_t>(row_bytes()));
  // Rows as the CPU stores them: f16 bits (Default) or f32 in place (Quality).
  const bool f16 = !f32_rows();
  for (int i = 0; i < in.raw_count(); ++i) {
    append_bytes(f16 ? static_cast<const void*>(in.raw_row_f16(i)) : in.raw_row(i, nullptr), row_bytes(), window);
    ring_pos[static_cast<size_t>(i)] = in.raw_pos(i);
  }
  window.resize(static_cast<size_t>(n_swa_) * static_cast<size_t>(row_bytes()), 0);
  for (int64_t c = 0; c < in.n_compressed(); ++c)
    append_bytes(f16 ? static_cast<const void*>(in.compressed_row_f16(c)) : in.compressed_row(c, nullptr), row_bytes(),
                 comp);
  for (int64_t c = 0; c < in.n_index(); ++c)
    append_bytes(f16 ? static_cast<const void*>(in.index_rows().f16_row(c)) : in.index_row(c, nullptr),
                 index_row_bytes(), idx);
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", current_device());
  ring_current_ = 0;
  ring_[0].upload(window.data(), window.size());
  ring_count = in.raw_count();
  ring_next = in.raw_count() % n_swa_;
  if (!comp.empty()) compressed_.upload(comp.data(), comp.size());
  if (!idx.empty()) index_.upload(idx.data(), idx.size());
  n_compressed = in.n_compressed();
  n_index = in.n_index();
  if (attn_frontier)
    attn_->upload(*attn_frontier, in.attn_compressor()->state_kv(), in.attn_compressor()->state_score());
  if (index_frontier)
    index_comp_->upload(*index_frontier, in.index_compressor()->state_kv(), in.index_compressor()->state_score());
}

}  // namespace ds4::cuda
