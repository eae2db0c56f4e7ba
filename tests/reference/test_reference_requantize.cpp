// ds4-quantize's requantizer (model/requantize.h) against llama.cpp's own
// llama_model_quantize, byte for byte: one random f32 model is quantized by
// llama.cpp with each of llama-quantize's presets (as in
// test_reference_llama_presets, whose cached files these are), and by us with
// every tensor given the type llama.cpp gave it (--types-from its file). Every
// tensor of the two files must hold the same bytes: the same f32 values
// quantized by the same algorithms, row by row, per expert where an
// importance matrix applies. The presets llama.cpp refuses without an imatrix
// get the runner's importance from the weights (per column and expert, the
// float sum over rows of w^2), which the test computes the same way and hands
// to ours.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "model/requantize.h"
#include "quant/quant.h"
#include "reference_client.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4 {
namespace {

constexpr uint64_t kSeed = 11;  // test_reference_llama_presets' source: its cached llama.cpp files serve here

struct Preset {
  const char* name;
  bool imatrix;
};

const Preset kPresets[] = {
    {"Q8_0", false},  {"Q6_K", false},   {"Q5_K_M", false},  {"Q4_K_M", false}, {"Q4_K_S", false},
    {"Q3_K_M", false}, {"Q2_K", false},  {"IQ4_XS", true},   {"IQ3_XXS", true}, {"IQ2_XS", true},
    {"IQ2_XXS", true}, {"IQ1_M", true},  {"IQ2_S", true},    {"IQ2_M", true},
};

model::Deepseek4HParams parity_shape() {  // test_reference_llama_presets' shape
  auto hp = model::preset_tiny();
  hp.head_dim = 256;
  hp.n_expert = 8;
  hp.n_expert_used = 2;
  return hp;
}

// The runner's importance_from_weights: per expert, per column, the float sum
// over rows of w^2, in row order.
std::vector<float> runner_importance(const gguf::File& f, const std::string& name, uint64_t n_matrices,
                                     uint64_t cols) {
  const gguf::TensorInfo& t = f.tensor(name);
  const uint64_t rows = t.n_rows() / n_matrices;
  std::vector<float> sums(n_matrices * cols, 0.0f), row(cols);
  for (uint64_t m = 0; m < n_matrices; ++m) {
    for (uint64_t r = 0; r < rows; ++r) {
      quant::dequantize_row(t.type, t.data + (m * rows + r) * t.row_bytes(), row.data(), static_cast<int64_t>(cols));
      float* s = sums.data() + m * cols;
      for (uint64_t c = 0; c < cols; ++c) s[c] += row[c] * row[c];
    }
  }
  return sums;
}

class Requantize : public testing::TestWithParam<Preset> {
 protected:
  static void SetUpTestSuite() { source_ = new test::SyntheticModel(parity_shape(), model::QuantMix::F32, kSeed); }
  static void TearDownTestSuite() {
    delete source_;
    source_ = nullptr;
  }
  static test::SyntheticModel* source_;
};
test::SyntheticModel* Requantize::source_ = nullptr;

TEST_P(Requantize, EveryTensorEqualsLlamaQuantizesBytes) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  const Preset& p = GetParam();
  test::TempDir dir("ds4-requantize-");
  const std::string theirs_path = dir.file(std::string(p.name) + ".gguf");
  reference::quantize_model(source_->path(), p.name, p.imatrix, theirs_path);
  const gguf::File theirs = gguf::File::open(theirs_path);
  const gguf::File source = gguf::File::open(source_->path());

  model::RequantizeOptions o;
  o.types_from = &theirs;
  if (p.imatrix) {
    o.importance = [&source](const std::string& name, uint64_t n_matrices, uint64_t cols) {
      return runner_importance(source, name, n_matrices, cols);
    };
  }
  const std::vector<model::TensorPlan> plan = model::plan_requantize(source, o);
  ThreadPool pool(2);
  std::map<std::string, int> quantized;  // type -> tensors compared after quantizing
  int copied = 0;
  for (const model::TensorPlan& t : plan) {
    const gguf::TensorInfo& want = theirs.tensor(t.source->name);
    ASSERT_EQ(t.type, want.type) << t.source->name;
    std::vector<uint8_t> got(want.nbytes);
    model::requantize_tensor(t, o, pool, got);
    EXPECT_TRUE(std::ranges::equal(got, want.bytes()))
        << p.name << ": " << t.source->name << " as " << ggml_type_name(t.type) << " differs from llama.cpp's bytes";
    if (t.copy) {
      ++copied;
    } else {
      ++quantized[std::string(ggml_type_name(t.type))];
    }
  }
  std::string types;
  for (const auto& [type, n] : quantized) types += " " + type + " x" + std::to_string(n);
  std::printf("[requantize] %-8s %zu tensors equal: %d copied,%s\n", p.name, plan.size(), copied, types.c_str());
  EXPECT_FALSE(quantized.empty());
}

INSTANTIATE_TEST_SUITE_P(LlamaQuantizePresets, Requantize, testing::ValuesIn(kPresets),
                         [](const testing::TestParamInfo<Preset>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ds4
