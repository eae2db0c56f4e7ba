#include "model/deepseek4_memory.h"

#include <algorithm>

#include "core/error.h"
#include "model/deepseek4_weights.h"

namespace ds4::model {
namespace {

constexpr uint64_t kFrontierElemBytes = 4;  // frontiers hold f32 partial sums and scores
constexpr uint64_t kIndexerRatio = 4;

// Rows x columns of one compressor's kv (and likewise its score) frontier.
uint64_t frontier_values(uint64_t ratio, uint64_t width) {
  const uint64_t coff = ratio == 4 ? 2 : 1;  // ratio 4 keeps the previous window's lane too
  return coff * ratio * coff * width;
}

}  // namespace

uint64_t WeightBytes::total() const {
  uint64_t t = 0;
  for (uint64_t b : by_family) t += b;
  return t;
}

WeightBytes weight_bytes(const Deepseek4Weights& w) {
  WeightBytes b;
  for (const TensorView* t : w.all()) b.by_family[static_cast<size_t>(family_of(t->kind))] += t->nbytes;
  return b;
}

uint64_t decode_weight_bytes_per_token(const Deepseek4Weights& w, const Deepseek4HParams& hp) {
  uint64_t total = 0;
  for (const TensorView* t : w.all()) {
    switch (t->kind) {
      case TensorKind::TokenEmbd:
      case TensorKind::FfnGateTid2Eid:
        total += t->row_bytes;
        break;
      case TensorKind::FfnGateExps:
      case TensorKind::FfnUpExps:
      case TensorKind::FfnDownExps:
        total += t->matrix_bytes() * hp.n_expert_used;
        break;
      default:
        total += t->nbytes;
    }
  }
  return total;
}

WeightBytes weight_bytes(const Deepseek4HParams& hp, QuantMix mix) {
  WeightBytes b;
  for (const TensorSpec& s : deepseek4_tensors(hp)) {
    const auto n = ggml_nbytes(tensor_type(mix, s), s.n_elements());
    if (!n) throw Error("weight bytes: tensor '" + s.name + "' does not fit its type");
    b.by_family[static_cast<size_t>(s.family())] += *n;
  }
  return b;
}

double kv_values_per_token(const Deepseek4HParams& hp) {
  double v = 0.0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const uint32_t r = hp.ratio(il);
    if (r == 0) continue;
    v += static_cast<double>(hp.head_dim) / r;
    if (r == kIndexerRatio) v += static_cast<double>(hp.indexer_head_dim) / kIndexerRatio;
  }
  return v;
}

double kv_bytes_per_token(const Deepseek4HParams& hp, uint32_t elem_bytes) {
  return kv_values_per_token(hp) * elem_bytes;
}

uint64_t kv_compressed_bytes(const Deepseek4HParams& hp, uint64_t n_tokens, uint32_t elem_bytes) {
  uint64_t values = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const uint64_t r = hp.ratio(il);
    if (r == 0) continue;
    values += n_tokens / r * hp.head_dim;
    if (r == kIndexerRatio) values += n_tokens / kIndexerRatio * hp.indexer_head_dim;
  }
  return values * elem_bytes;
}

KvStateBytes kv_layer_state_bytes(const Deepseek4HParams& hp, uint32_t il, uint64_t n_ctx, uint32_t elem_bytes) {
  KvStateBytes k;
  const uint64_t r = hp.ratio(il);
  k.raw_window = std::min<uint64_t>(hp.n_swa, n_ctx) * hp.head_dim * elem_bytes;
  if (r == 0) return k;
  k.compressed_attn = (n_ctx / r + 2) * hp.head_dim * elem_bytes;
  k.frontiers = 2 * frontier_values(r, hp.head_dim) * kFrontierElemBytes;  // kv + score
  if (r == kIndexerRatio) {
    k.compressed_index = (n_ctx / kIndexerRatio + 2) * hp.indexer_head_dim * elem_bytes;
    k.frontiers += 2 * frontier_values(kIndexerRatio, hp.indexer_head_dim) * kFrontierElemBytes;
  }
  return k;
}

KvStateBytes kv_state_bytes(const Deepseek4HParams& hp, uint64_t n_ctx, uint32_t elem_bytes) {
  KvStateBytes k;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const KvStateBytes layer = kv_layer_state_bytes(hp, il, n_ctx, elem_bytes);
    k.raw_window += layer.raw_window;
    k.compressed_attn += layer.compressed_attn;
    k.compressed_index += layer.compressed_index;
    k.frontiers += layer.frontiers;
  }
  return k;
}

}  // namespace ds4::model
