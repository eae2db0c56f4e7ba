// A tiny random-weight deepseek4 model written to a temporary GGUF and opened,
// for tests of the forward-pass pieces; plus whole-tensor dequantisation for
// the double-precision transcriptions those tests compare against.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "model/quant_mix.h"
#include "support/temp_dir.h"

namespace ds4::test {

class SyntheticModel {
 public:
  // Writes hp's tensors in `mix` with `seed` (synthetic tokenizer) and opens the file.
  SyntheticModel(const model::Deepseek4HParams& hp, model::QuantMix mix, uint64_t seed);

  const model::Deepseek4Model& model() const { return *model_; }
  const model::Deepseek4HParams& hparams() const { return model_->hparams(); }
  const model::LayerWeights& layer(int il) const { return model_->weights().layers.at(static_cast<size_t>(il)); }
  const std::string& path() const { return path_; }

 private:
  TempDir dir_;
  std::string path_;
  std::unique_ptr<model::Deepseek4Model> model_;
};

// Every row of t (all experts of a 3-D tensor) dequantised to f32, row-major.
std::vector<float> dequantize_tensor(const model::TensorView& t);

}  // namespace ds4::test
