// One attention layer's dimensions as the sublayers read them, and the
// shape rules both backends' attention layers hold them to (backend/cpu and
// backend/cuda attention_layer): the output groups split the heads evenly,
// and the KV rows' non-rope dims are whole FP8 blocks (MODEL.md 3). Held as a
// base of each layer class, so the layers use the fields by name.
#pragma once

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4::backend {

struct AttentionDims {
  // ds4::Error naming the layer when the shape rules do not hold.
  AttentionDims(const model::LayerWeights& layer, const model::Deepseek4HParams& hp);

  int ratio_ = 0, n_embd_ = 0, n_head_ = 0, head_dim_ = 0, n_rot_ = 0, q_lora_ = 0;
  int o_groups_ = 0, o_lora_ = 0, n_swa_ = 0;
  float eps_ = 1e-6f;
};

}  // namespace ds4::backend
