// Files written by ds4-mkmodel, run by llama.cpp's own deepseek4 graph: every
// preset x quant mix must load, give finite and non-degenerate logits, give the
// same logits when run again, and generate greedily. This proves the generator's
// files are real deepseek4 models (and their tokenizers work) before our engine is
// compared against them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "reference_client.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

#ifndef DS4_BIN_DIR
#error "DS4_BIN_DIR must be defined"
#endif

namespace ds4 {
namespace {

namespace fs = std::filesystem;

// 160 positions: past the sliding windows (8 / 32), past one 128-token compressed
// row, and far past the indexer's top-k, so every attention path does real work.
constexpr int kTokens = 160;
constexpr int kGenerate = 16;
constexpr uint64_t kSeed = 7;
// One thread: ctest runs two tests at once on two cores, and ggml's spinning
// threads slow down several-fold when they share cores. Results are the same.
constexpr int kThreads = 1;

struct Case {
  std::string preset;
  std::string mix;
  bool batch_invariant;  // F32/Q8_0 weights: llama.cpp's logits do not depend on the ubatch
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.preset + "_" + info.param.mix;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}
// Readable parameter in test listings (ctest shows it after the name).
void PrintTo(const Case& c, std::ostream* os) { *os << c.preset << " " << c.mix; }

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class ReferenceModels : public testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { dir_ = new test::TempDir("ds4-refmodels-"); }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // Writes the model with ds4-mkmodel; the path, or a test failure.
  static std::string make_model(const Case& c, const fs::path& dir) {
    const std::string mkmodel = std::string(DS4_BIN_DIR) + "/ds4-mkmodel";
    const std::string out = (dir / (c.preset + "-" + c.mix + ".gguf")).string();
    const test::ProcessResult r = test::run_process(
        {mkmodel, "--preset", c.preset, "--mix", c.mix, "--seed", std::to_string(kSeed), "--out", out});
    if (!r.ok()) {
      ADD_FAILURE() << "ds4-mkmodel --preset " << c.preset << " --mix " << c.mix << " failed (" << r.describe()
                    << "): " << r.err_text();
      return {};
    }
    return out;
  }

  static test::TempDir* dir_;  // generated models, one suite's worth
};
test::TempDir* ReferenceModels::dir_ = nullptr;

std::vector<int32_t> token_list(int32_t n_vocab) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
  std::vector<int32_t> t(kTokens);
  for (auto& id : t) id = pick(rng);
  return t;
}

TEST_P(ReferenceModels, LlamaCppRunsTheFile) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  const Case& c = GetParam();
  const std::string model = make_model(c, dir_->path());
  ASSERT_FALSE(model.empty());
  const auto file_bytes = fs::file_size(model);

  // The vocabulary size from llama.cpp itself: the logits row length of one token.
  const size_t n_vocab = reference::logits(model, {0}, kThreads).size();
  ASSERT_GE(n_vocab, 2u);
  const std::vector<int32_t> tokens = token_list(static_cast<int32_t>(n_vocab));

  const std::vector<float> logits = reference::logits(model, tokens, kThreads);
  ASSERT_EQ(logits.size(), tokens.size() * n_vocab);
  auto row = [&](size_t i) { return logits.data() + i * n_vocab; };

  // Finite everywhere.
  size_t non_finite = 0;
  for (float v : logits) non_finite += !std::isfinite(v);
  ASSERT_EQ(non_finite, 0u) << "of " << logits.size() << " logits";

  // Non-degenerate: every row has spread, and no two positions give the same row
  // (each position sees a different context and rotary phase).
  double min_std = INFINITY;
  for (size_t i = 0; i < tokens.size(); ++i) {
    double sum = 0, sum2 = 0;
    for (size_t v = 0; v < n_vocab; ++v) {
      sum += row(i)[v];
      sum2 += static_cast<double>(row(i)[v]) * row(i)[v];
    }
    const double mean = sum / n_vocab;
    const double sd = std::sqrt(std::max(0.0, sum2 / n_vocab - mean * mean));
    min_std = std::min(min_std, sd);
    EXPECT_GT(sd, 0.0) << "position " << i << " has constant logits";
  }
  std::set<std::vector<float>> distinct;
  for (size_t i = 0; i < tokens.size(); ++i) distinct.emplace(row(i), row(i) + n_vocab);
  EXPECT_EQ(distinct.size(), tokens.size()) << "some positions have identical logits rows";

  // Deterministic: a second, uncached run gives the same bits.
  {
    const fs::path fresh_cache = dir_->path() / ("cache-" + case_name({c, 0}));
    ScopedEnv env("DS4_REFERENCE_CACHE", fresh_cache.string());
    const std::vector<float> again = reference::logits(model, tokens, kThreads);
    ASSERT_EQ(again.size(), logits.size());
    EXPECT_EQ(std::memcmp(again.data(), logits.data(), logits.size() * sizeof(float)), 0)
        << "llama.cpp gave different logits on a second run";
    std::error_code ec;
    fs::remove_all(fresh_cache, ec);
  }

  // Batch invariance of the reference settings (flash attention off, F32 KV): the
  // same logits in ubatches of 16 as in one batch, where REFERENCE.md says it holds.
  const std::vector<float> split = reference::logits(model, tokens, kThreads, 16);
  ASSERT_EQ(split.size(), logits.size());
  double max_split_diff = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    max_split_diff = std::max(max_split_diff, static_cast<double>(std::fabs(split[i] - logits[i])));
  if (c.batch_invariant) {
    EXPECT_EQ(max_split_diff, 0.0) << "logits depend on the ubatch size";
  }

  // Greedy generation: valid ids, and the first one is the argmax of the last row
  // (up to a near-tie, as that row comes from a decode with one output).
  const std::vector<int32_t> gen = reference::greedy(model, tokens, kGenerate, kThreads);
  ASSERT_EQ(gen.size(), static_cast<size_t>(kGenerate));
  for (int32_t id : gen) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(n_vocab));
  }
  const float* last = row(tokens.size() - 1);
  const size_t best = static_cast<size_t>(std::max_element(last, last + n_vocab) - last);
  if (gen[0] >= 0 && static_cast<size_t>(gen[0]) < n_vocab) {
    EXPECT_LE(last[best] - last[gen[0]], 1e-3f * std::max(1.0f, std::fabs(last[best])))
        << "greedy's first token " << gen[0] << " is not the argmax " << best << " of the last logits row";
  }

  // The file's tokenizer works in llama.cpp: some text gives ids below n_vocab.
  const std::vector<int32_t> ids = reference::tokenize(model, "The quick brown fox jumps over the lazy dog.");
  EXPECT_FALSE(ids.empty());
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(n_vocab));
  }

  std::printf("%-6s %-8s %8.2f MB  vocab %zu  min row std %.4g  ubatch-16 max diff %.3g  greedy %d %d %d ...\n",
              c.preset.c_str(), c.mix.c_str(), static_cast<double>(file_bytes) / 1e6, n_vocab, min_std,
              max_split_diff, gen[0], gen[1], gen[2]);
  std::error_code ec;
  fs::remove(model, ec);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* preset : {"tiny", "small"})
    for (const char* mix : {"f32", "f16", "q8_0", "ds4-q2", "ds4-q4", "mxfp4", "bf16", "llama-convert", "q6_K",
                            "iq3_xxs", "q3_K", "q5_K", "iq4_xs", "legacy"}) {
      const std::string_view m(mix);
      cases.push_back({preset, mix, m == "f32" || m == "q8_0"});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(PresetsAndMixes, ReferenceModels, testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace ds4
