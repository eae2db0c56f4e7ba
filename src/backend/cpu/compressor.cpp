#include "backend/cpu/compressor.h"

#include <algorithm>
#include <string>

#include "backend/cpu/matvec.h"
#include "backend/cpu/ops_compressor_pool.h"
#include "backend/cpu/ops_norm.h"
#include "backend/cpu/ops_qat.h"
#include "core/error.h"
#include "quant/quant.h"

namespace ds4::cpu {
namespace {

[[noreturn]] void fail(const model::LayerWeights& layer, const std::string& what) {
  throw Error("compressor of layer " + std::to_string(layer.index) + ": " + what);
}

}  // namespace

Compressor::Compressor(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, CompressorRole role,
                       Numerics numerics)
    : w_(role == CompressorRole::Attention ? layer.attn_compressor : layer.indexer_compressor),
      role_(role),
      numerics_(numerics),
      ratio_(static_cast<int>(layer.compress_ratio)),
      coff_(layer.compress_ratio == 4 ? 2 : 1),
      dim_(static_cast<int>(role == CompressorRole::Attention ? hp.head_dim : hp.indexer_head_dim)),
      n_rot_(static_cast<int>(hp.n_rot)),
      eps_(hp.rms_eps),
      rope_(rope_params(hp, layer.compress_ratio, numerics)) {
  if (ratio_ != 4 && ratio_ != 128) fail(layer, "ratio " + std::to_string(ratio_) + " has no compressor");
  if (role == CompressorRole::Indexer && ratio_ != 4) fail(layer, "the indexer compressor exists on ratio-4 layers only");
  if (!w_.present() || !w_.gate.present() || !w_.ape.present() || !w_.norm.present())
    fail(layer, "weights missing");
  const int width = state_width();
  if (w_.kv.ne[1] != static_cast<uint64_t>(width) || w_.gate.ne[1] != static_cast<uint64_t>(width) ||
      w_.ape.ne[0] != static_cast<uint64_t>(width) || w_.ape.ne[1] != static_cast<uint64_t>(ratio_) ||
      w_.norm.ne[0] != static_cast<uint64_t>(dim_))
    fail(layer, "weight shapes do not match ratio " + std::to_string(ratio_) + " and D " + std::to_string(dim_));
  // Hadamard-128 is the only rotation DeepSeek V4 defines for index rows.
  if (role == CompressorRole::Indexer && dim_ != kHadamardSize)
    fail(layer, "indexer key length " + std::to_string(dim_) + " is not 128");
  if (role == CompressorRole::Attention && (dim_ - n_rot_) % kFp8BlockSize != 0)
    fail(layer, "head_dim - n_rot is not a multiple of the FP8 block");

  ape_.resize(static_cast<size_t>(ratio_) * width);
  for (int k = 0; k < ratio_; ++k)
    quant::dequantize_row(w_.ape.type, w_.ape.row(static_cast<uint64_t>(k)), ape_.data() + static_cast<size_t>(k) * width,
                          width);
  norm_.resize(static_cast<size_t>(dim_));
  quant::dequantize_row(w_.norm.type, w_.norm.data, norm_.data(), dim_);

  state_kv_.resize(static_cast<size_t>(state_rows()) * width);
  state_score_.resize(state_kv_.size());
  kvc_.resize(static_cast<size_t>(width));
  scc_.resize(static_cast<size_t>(width));
  reset();
}

void Compressor::reset() {
  std::fill(state_kv_.begin(), state_kv_.end(), 0.0f);
  std::fill(state_score_.begin(), state_score_.end(), kPoolEmptyScore);
}

std::optional<std::vector<float>> Compressor::step(std::span<const float> xn, int64_t pos, ThreadPool* pool) {
  ActivationBatch x;
  x.reset(xn.data(), 1, static_cast<int64_t>(xn.size()), static_cast<int64_t>(xn.size()), numerics_);
  project(x, kvc_.data(), scc_.data(), pool);
  return push(kvc_.data(), scc_.data(), pos);
}

void Compressor::project(ActivationBatch& xn, float* kv, float* score, ThreadPool* pool) const {
  const int64_t width = state_width();
  if (xn.n_rows() == 1) {
    // Decode: both products in one pool run.
    xn.prepare(w_.kv.type, pool);
    xn.prepare(w_.gate.type, pool);
    const MatvecJob jobs[] = {{&w_.kv, -1, xn.rows(w_.kv.type)[0], kv}, {&w_.gate, -1, xn.rows(w_.gate.type)[0], score}};
    matvec_many(jobs, xn.numerics(), pool);
    return;
  }
  matmul(w_.kv, -1, xn, kv, width, pool);
  matmul(w_.gate, -1, xn, score, width, pool);
}

std::optional<std::vector<float>> Compressor::push(const float* kv, const float* score, int64_t pos) {
  const int width = state_width();
  const int k = static_cast<int>(pos % ratio_);
  const float* ape = ape_.data() + static_cast<size_t>(k) * width;
  const int r = ratio_ == 4 ? 4 + k : k;
  float* state_kv = state_kv_.data() + static_cast<ptrdiff_t>(r) * width;
  float* state_score = state_score_.data() + static_cast<ptrdiff_t>(r) * width;
  std::copy(kv, kv + width, state_kv);
  for (int j = 0; j < width; ++j) state_score[j] = score[j] + ape[j];
  if ((pos + 1) % ratio_ != 0) return std::nullopt;

  // Candidates: ratio 4 = previous window's lane A (rows 0..3, columns 0..D-1)
  // then this window's lane B (rows 4..7, columns D..2D-1); ratio 128 = all rows.
  std::vector<const float*> scores, kvs;
  const int n_prev = ratio_ == 4 ? 4 : 0;
  for (int i = 0; i < state_rows(); ++i) {
    const size_t off = static_cast<size_t>(i) * width + (ratio_ == 4 && i >= 4 ? static_cast<size_t>(dim_) : 0);
    scores.push_back(state_score_.data() + off);
    kvs.push_back(state_kv_.data() + off);
  }
  std::vector<float> y(static_cast<size_t>(dim_));
  compressor_pool(scores, kvs, n_prev, y, numerics_);
  finish(y, pos + 1 - ratio_);

  // This window becomes the next one's previous window.
  if (ratio_ == 4) {
    std::copy(state_kv_.begin() + 4 * width, state_kv_.end(), state_kv_.begin());
    std::copy(state_score_.begin() + 4 * width, state_score_.end(), state_score_.begin());
  }
  return y;
}

void Compressor::finish(std::span<float> y, int64_t window_start) const {
  rms_norm(y, norm_, y, eps_, numerics_);
  rope_apply(y.subspan(static_cast<size_t>(dim_ - n_rot_)), rope_cache(rope_, window_start, /*inverse=*/false));
  if (role_ == CompressorRole::Attention) {
    if (numerics_ == Numerics::Default) fp8_e4m3_round_trip(y.first(static_cast<size_t>(dim_ - n_rot_)));
    return;
  }
  std::span<float, kHadamardSize> row(y.data(), kHadamardSize);
  if (numerics_ == Numerics::Default)
    indexer_qat(row);
  else
    hadamard128(row);
}

}  // namespace ds4::cpu
