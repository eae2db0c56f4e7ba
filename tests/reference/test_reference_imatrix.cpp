// ds4-imatrix against llama-imatrix: the runner's imatrix mode collects by
// llama-imatrix's rules (tools/imatrix: which products, the 16-row rule, one
// count per dense tensor, per-expert counts, chunks with BOS) from
// llama.cpp's own activations, and ds4-imatrix must write the same file: the
// same entries in the same shapes, the same counts, and sums that agree to
// float noise. On an F32 model (where --quality follows llama.cpp closely)
// the first layer's attention inputs depend only on the tokens, so they pin
// the tokenization (a text with control- and user-defined-token literals)
// and the chunking; the deeper entries hold the whole forward pass to it.
// Then the files cross over: ours (groups merged, the default; and its
// legacy .dat) drives llama_model_quantize and ds4-quantize to the same
// bytes; llama-imatrix's
// own per-group attn_output_a entry is refused by llama_model_quantize (its
// size is not the tensor's row), which is why the default merges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/imatrix.h"
#include "reference_client.h"
#include "requantize_parity.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

#ifndef DS4_BIN_DIR
#error "DS4_BIN_DIR must be defined"
#endif

namespace ds4 {
namespace {

constexpr int64_t kCtx = 64;
constexpr int64_t kChunks = 5;

// Words, numbers, punctuation, CJK and the literals that tell the
// tokenizations apart: control tokens (stay text for llama-imatrix) and
// user-defined ones (become their ids); a trailing newline (dropped by -f).
std::string corpus() {
  const char* words[] = {"the", "model", "quantize", "matrix", "importance", "layer", "expert", "token",
                         "chunk", "context", "42", "3.14", "(x)", "don't", "naïve", "東京", "<think>",
                         "</think>", "｜DSML｜", "<｜User｜>", "<｜begin▁of▁sentence｜>", "\n\n", "—", "α+β"};
  std::string text;
  uint64_t state = 7;
  while (text.size() < 4000) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    text += words[(state >> 33) % std::size(words)];
    text += (state >> 20) % 5 == 0 ? ", " : " ";
  }
  return text + "\n";
}

double relative_l2(const std::vector<float>& want, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(want[i]) - got[i]) * (static_cast<double>(want[i]) - got[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool is_layer0_attention_input(const std::string& name) {
  for (const char* t : {"attn_q_a", "attn_kv", "attn_q_b", "hc_attn_fn"})
    if (name == "blk.0." + std::string(t) + ".weight") return true;
  return false;
}

class ReferenceImatrix : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    model::Deepseek4HParams hp = model::preset_tiny();
    hp.head_dim = 256;  // the parity shape of test_reference_forward
    model_ = new test::SyntheticModel(hp, model::QuantMix::F32, 3);
    dir_ = new test::TempDir("ds4-ref-imatrix-");
    const std::string text = corpus();
    test::write_bytes(dir_->file("text.txt"), std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete model_;
  }
  static std::string file(const std::string& name) { return dir_->file(name); }
  // ds4-imatrix over the corpus into `out`.
  static void ours(const std::string& out, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"-m", model_->path(), "-f", file("text.txt"), "-o", out,
                                  "-c", std::to_string(kCtx), "--chunks", std::to_string(kChunks), "-t", "2", "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    const test::ProcessResult r = test::run_app(DS4_BIN_DIR, "ds4-imatrix", args);
    ASSERT_TRUE(r.ok()) << "ds4-imatrix " << r.describe() << ": " << r.err_text();
  }
  static test::SyntheticModel* model_;
  static test::TempDir* dir_;
};

test::SyntheticModel* ReferenceImatrix::model_ = nullptr;
test::TempDir* ReferenceImatrix::dir_ = nullptr;

TEST_F(ReferenceImatrix, SameEntriesCountsAndSumsAsLlamaImatrix) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  reference::imatrix(model_->path(), corpus(), kCtx, kChunks, file("theirs.gguf"));
  ours(file("ours_groups.gguf"), {"--per-group"});
  const model::Imatrix theirs = model::Imatrix::load(file("theirs.gguf"));
  const model::Imatrix mine = model::Imatrix::load(file("ours_groups.gguf"));
  EXPECT_EQ(mine.chunk_count, theirs.chunk_count);
  EXPECT_EQ(mine.chunk_size, theirs.chunk_size);
  EXPECT_EQ(mine.chunk_count, static_cast<uint32_t>(kChunks));
  ASSERT_EQ(mine.entries.size(), theirs.entries.size());

  const uint32_t n_hash = model_->hparams().n_hash_layers;
  const uint32_t n_used = model_->hparams().n_expert_used;
  double worst_dense = 0, worst_expert = 0, worst_layer0 = 0;
  int routing_diffs = 0;
  for (const auto& [name, want] : theirs.entries) {
    SCOPED_TRACE(name);
    const auto it = mine.entries.find(name);
    ASSERT_NE(it, mine.entries.end()) << "missing from ds4-imatrix's file";
    const model::ImatrixEntry& got = it->second;
    ASSERT_EQ(got.sums.size(), want.sums.size());
    ASSERT_EQ(got.counts.size(), want.counts.size());
    const double rel = relative_l2(want.sums, got.sums);
    if (want.counts.size() == 1) {
      // Dense: the rows of every chunk, whatever the routing.
      EXPECT_EQ(got.counts[0], want.counts[0]);
      EXPECT_EQ(want.counts[0], static_cast<float>(kChunks * kCtx));
      EXPECT_LE(rel, 2e-3);
      worst_dense = std::max(worst_dense, rel);
      if (is_layer0_attention_input(name)) {
        EXPECT_LE(rel, 1e-5) << "the first layer's inputs depend only on the tokens";
        worst_layer0 = std::max(worst_layer0, rel);
      }
      continue;
    }
    // Routed experts: every token's n_used rows; the hash layers route by
    // token id alone, so their counts are the tokens' exactly.
    double total_want = 0, total_got = 0;
    for (size_t e = 0; e < want.counts.size(); ++e) {
      total_want += want.counts[e];
      total_got += got.counts[e];
      routing_diffs += want.counts[e] != got.counts[e];
    }
    EXPECT_EQ(total_want, static_cast<double>(kChunks * kCtx * n_used));
    EXPECT_EQ(total_got, total_want);
    const int layer = std::stoi(name.substr(4));
    if (static_cast<uint32_t>(layer) < n_hash) {
      EXPECT_EQ(got.counts, want.counts) << "hash-routed layer";
    }
    EXPECT_LE(rel, 5e-2);
    worst_expert = std::max(worst_expert, rel);
  }
  // A routing decision may flip on a near-tie; more than a few is a defect.
  EXPECT_LE(routing_diffs, 8);
  std::printf("[imatrix] %zu entries vs llama-imatrix's rules: relative L2 worst dense %.3g, experts %.3g, "
              "layer-0 inputs %.3g; %d expert counts differ\n",
              theirs.entries.size(), worst_dense, worst_expert, worst_layer0, routing_diffs);
}

TEST_F(ReferenceImatrix, OursDrivesLlamaQuantizeAndTheirsIsRefusedThere) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  ours(file("ours.gguf"));
  ours(file("ours_groups2.gguf"), {"--per-group"});
  const model::Imatrix merged = model::Imatrix::load(file("ours.gguf"));
  const model::Imatrix groups = model::Imatrix::load(file("ours_groups2.gguf"));
  EXPECT_EQ(merged.chunk_count, static_cast<uint32_t>(kChunks));
  // The default form: attn_output_a's groups' mean under the rows' count.
  const uint64_t n_groups = model_->hparams().o_groups;
  int grouped = 0;
  for (const auto& [name, g] : groups.entries) {
    SCOPED_TRACE(name);
    const model::ImatrixEntry& m = merged.entries.at(name);
    if (name.find("attn_output_a") == std::string::npos) {
      EXPECT_EQ(m.sums, g.sums);
      EXPECT_EQ(m.counts, g.counts);
      continue;
    }
    ++grouped;
    const size_t width = g.sums.size() / n_groups;
    ASSERT_EQ(m.sums.size(), width);
    for (size_t j = 0; j < width; ++j) {
      float sum = 0;
      for (uint64_t k = 0; k < n_groups; ++k) sum += g.sums[k * width + j];
      EXPECT_EQ(m.sums[j], sum / static_cast<float>(n_groups));
    }
    EXPECT_EQ(m.counts, g.counts);
  }
  EXPECT_EQ(grouped, static_cast<int>(model_->hparams().n_layer));

  // llama_model_quantize with our file, and ds4-quantize with the same file
  // and its types: the same bytes. The same for our legacy .dat of it
  // (combined from the GGUF alone: llama-imatrix's --in-file and
  // --output-format dat), which llama.cpp reads with its own loader.
  const test::ProcessResult dat = test::run_app(
      DS4_BIN_DIR, "ds4-imatrix",
      {"--in-file", file("ours.gguf"), "-c", std::to_string(kCtx), "--output-format", "dat", "-o", file("ours.dat")});
  ASSERT_TRUE(dat.ok()) << dat.err_text();
  const gguf::File source = gguf::File::open(model_->path());
  ThreadPool pool(2);
  for (const char* imatrix_file : {"ours.gguf", "ours.dat"}) {
    const std::string theirs_path = file(std::string("Q4_K_M-") + imatrix_file);
    reference::quantize_model_with_imatrix(model_->path(), "Q4_K_M", file(imatrix_file), theirs_path);
    const gguf::File theirs = gguf::File::open(theirs_path);
    const model::Imatrix loaded = model::Imatrix::load(file(imatrix_file));
    const int compared = reference::expect_requantized_like(source, theirs, &loaded, pool, imatrix_file);
    EXPECT_GT(compared, 100);
    std::printf("[imatrix] Q4_K_M from ds4-imatrix's %s: %d quantized tensors equal to llama_model_quantize's\n",
                imatrix_file, compared);
  }

  // llama.cpp refuses llama-imatrix's own form of the grouped product.
  try {
    reference::quantize_model_with_imatrix(model_->path(), "Q4_K_M", file("ours_groups2.gguf"), file("refused.gguf"));
    ADD_FAILURE() << "llama_model_quantize took a per-group attn_output_a entry";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_output_a"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds4
