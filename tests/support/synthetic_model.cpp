#include "support/synthetic_model.h"

#include "core/gguf_writer.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "quant/quant.h"

namespace ds4::test {

SyntheticModel::SyntheticModel(const model::Deepseek4HParams& hp, model::QuantMix mix, uint64_t seed)
    : dir_("ds4-synthetic-model-") {
  gguf::Writer w;
  model::write_metadata(hp, w);
  model::make_synthetic_tokenizer(hp.n_vocab).write(w);
  model::add_synthetic_tensors(w, hp, mix, seed, /*n_threads=*/2);
  path_ = dir_.file("model.gguf");
  w.write(path_);
  model_ = std::make_unique<model::Deepseek4Model>(model::Deepseek4Model::open(path_));
}

std::vector<float> dequantize_tensor(const model::TensorView& t) {
  std::vector<float> out(t.ne[0] * t.n_rows);
  for (uint64_t r = 0; r < t.n_rows; ++r)
    quant::dequantize_row(t.type, t.row(r), out.data() + r * t.ne[0], static_cast<int64_t>(t.ne[0]));
  return out;
}

}  // namespace ds4::test
