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
#include "model/imatrix.h"
#include "model/quant_mix.h"
#include "model/requantize.h"
#include "quant/quant.h"
#include "reference_client.h"
#include "requantize_parity.h"
#include "support/file_io.h"
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
  const model::RequantizeInput in = model::gguf_input(source);
  const std::vector<model::TensorPlan> plan = model::plan_requantize(in, o);
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

// An importance matrix file of ours (GGUF form) and a legacy .dat, read by
// llama-quantize's loading rules in the runner and by ds4-quantize's
// Imatrix: the quantized bytes must agree. The sums are random and positive,
// the counts random, one matrix of one expert tensor with count 0 (its
// importance is 1 everywhere) and one fractional count (llama-quantize rounds it).
model::Imatrix random_imatrix(const gguf::File& source, uint64_t seed) {
  model::Imatrix m;
  m.datasets = {"random"};
  m.chunk_count = 3;
  m.chunk_size = 512;
  uint64_t state = seed;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) & 0xffffff) / static_cast<float>(1 << 24);
  };
  for (const gguf::TensorInfo& t : source.tensors()) {
    if (t.n_dims() < 2 || !t.name.ends_with(".weight") || t.type == GgmlType::I32) continue;
    const uint64_t n_mat = t.dim(2) * t.dim(3);
    model::ImatrixEntry e;
    for (uint64_t i = 0; i < n_mat * t.ne[0]; ++i) e.sums.push_back(0.01f + 3.0f * next());
    for (uint64_t j = 0; j < n_mat; ++j) e.counts.push_back(static_cast<float>(1 + static_cast<int>(next() * 40)));
    if (n_mat > 1) {
      e.counts[1] = 0.0f;
      e.counts[2] = 7.4f;
    }
    m.entries.emplace(t.name, std::move(e));
  }
  return m;
}

// The legacy .dat of the same entries (ncall = each entry's first count).
void write_legacy(const model::Imatrix& m, const std::string& path) {
  std::vector<uint8_t> b;
  auto put = [&b](const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
  const auto n = static_cast<int32_t>(m.entries.size());
  put(&n, 4);
  for (const auto& [name, e] : m.entries) {
    const auto len = static_cast<int32_t>(name.size());
    const auto ncall = static_cast<int32_t>(e.counts[0]), nval = static_cast<int32_t>(e.sums.size());
    put(&len, 4);
    put(name.data(), name.size());
    put(&ncall, 4);
    put(&nval, 4);
    put(e.sums.data(), e.sums.size() * 4);
  }
  const int32_t chunks = 3, dlen = 6;
  put(&chunks, 4);
  put(&dlen, 4);
  put("random", 6);
  test::write_bytes(path, b);
}

TEST_F(Requantize, AnImatrixFileDrivesBothQuantizersAlike) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  const gguf::File source = gguf::File::open(source_->path());
  test::TempDir dir("ds4-requantize-imatrix-");
  const model::Imatrix ours = random_imatrix(source, 99);
  ours.save(dir.file("imatrix.gguf"));
  write_legacy(ours, dir.file("imatrix.dat"));
  const std::pair<const char*, const char*> cases[] = {
      {"IQ2_XXS", "imatrix.gguf"}, {"Q4_K_M", "imatrix.gguf"}, {"IQ4_XS", "imatrix.dat"}};
  ThreadPool pool(2);
  for (const auto& [preset, file] : cases) {
    const std::string theirs_path = dir.file(std::string(preset) + ".gguf");
    reference::quantize_model_with_imatrix(source_->path(), preset, dir.file(file), theirs_path);
    const gguf::File theirs = gguf::File::open(theirs_path);
    const model::Imatrix loaded = model::Imatrix::load(dir.file(file));
    EXPECT_EQ(loaded.legacy, std::string(file).ends_with(".dat"));
    EXPECT_EQ(loaded.entries.size(), ours.entries.size());
    EXPECT_EQ(loaded.chunk_count, 3u);
    const int compared =
        reference::expect_requantized_like(source, theirs, &loaded, pool, std::string(preset) + " with " + file);
    std::printf("[requantize] %-8s with %s: %d quantized tensors equal\n", preset, file, compared);
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaQuantizePresets, Requantize, testing::ValuesIn(kPresets),
                         [](const testing::TestParamInfo<Preset>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ds4
