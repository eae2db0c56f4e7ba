#include "backend/attention_dims.h"

#include <string>

#include "core/error.h"

namespace ds4::backend {
namespace {

constexpr int kFp8BlockSize = 64;  // the KV rows' FP8 round trip (MODEL.md 3)

}  // namespace

AttentionDims::AttentionDims(const model::LayerWeights& layer, const model::Deepseek4HParams& hp)
    : ratio_(static_cast<int>(layer.compress_ratio)),
      n_embd_(static_cast<int>(hp.n_embd)),
      n_head_(static_cast<int>(hp.n_head)),
      head_dim_(static_cast<int>(hp.head_dim)),
      n_rot_(static_cast<int>(hp.n_rot)),
      q_lora_(static_cast<int>(hp.q_lora_rank)),
      o_groups_(static_cast<int>(hp.o_groups)),
      o_lora_(static_cast<int>(hp.o_lora_rank)),
      n_swa_(static_cast<int>(hp.n_swa)),
      eps_(hp.rms_eps) {
  if (o_groups_ < 1 || n_head_ % o_groups_ != 0 || (head_dim_ - n_rot_) % kFp8BlockSize != 0)
    throw Error("attention layer " + std::to_string(layer.index) + ": heads or head_dim do not fit");
}

}  // namespace ds4::backend
