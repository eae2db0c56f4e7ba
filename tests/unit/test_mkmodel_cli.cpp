// The ds4-mkmodel command line, as outside checks use it: files for presets and
// overrides, byte-for-byte reproducibility, and one clear error line with exit
// status 1 for every value the family or the mix does not allow.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"
#include "model/synthetic_tokenizer.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

#ifndef DS4_BIN_DIR
#error "DS4_BIN_DIR must be defined"
#endif
#ifndef DS4_TEST_DATA_DIR
#error "DS4_TEST_DATA_DIR must be defined"
#endif

namespace ds4::model {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

// Runs ds4-mkmodel with args split at spaces (no shell); stdout and stderr
// together in .out.
test::ProcessResult mkmodel(const std::string& args) {
  std::vector<std::string> argv;
  std::istringstream words(args);
  for (std::string w; words >> w;) argv.push_back(w);
  return test::run_app(DS4_BIN_DIR, "ds4-mkmodel", argv, test::Stderr::kMergeIntoStdout);
}

TEST(MkmodelCli, WritesTheTinyPreset) {
  TempDir dir;
  const std::string out = dir.file("tiny.gguf");
  const test::ProcessResult r = mkmodel("--preset tiny --mix ds4-q2 --seed 1 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t n_tensors = deepseek4_tensors(preset_tiny()).size();
  EXPECT_NE(r.out.find(std::to_string(n_tensors) + " tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compress ratios [0,4,128,4,128,4]"), std::string::npos) << r.out;
  const gguf::File f = gguf::File::open(out);
  EXPECT_EQ(read_metadata(f), preset_tiny());
  EXPECT_NO_THROW(validate_tensor_directory(f, preset_tiny()));
  EXPECT_EQ(f.tensor("blk.0.ffn_gate_exps.weight").type, GgmlType::IQ2_XXS);
  EXPECT_EQ(f.tensor("blk.0.ffn_down_exps.weight").type, GgmlType::Q2_K);
}

TEST(MkmodelCli, SameArgumentsSameBytes) {
  TempDir dir;
  const std::string args = "--preset tiny --mix ds4-q4 --seed 9 --layers 3 --out ";
  ASSERT_EQ(mkmodel(args + dir.file("a.gguf") + " --threads 1").exit_code, 0);
  ASSERT_EQ(mkmodel(args + dir.file("b.gguf") + " --threads 2").exit_code, 0);
  ASSERT_EQ(mkmodel("--preset tiny --mix ds4-q4 --seed 10 --layers 3 --out " + dir.file("c.gguf")).exit_code, 0);
  const std::string a = test::read_text(dir.file("a.gguf"));
  EXPECT_TRUE(a == test::read_text(dir.file("b.gguf")));
  EXPECT_FALSE(a == test::read_text(dir.file("c.gguf")));
}

TEST(MkmodelCli, OverridesReachTheFile) {
  TempDir dir;
  const std::string out = dir.file("o.gguf");
  const test::ProcessResult r = mkmodel(
      "--preset tiny --mix q8_0 --seed 2 --out " + out +
      " --compress-ratios 4,0,128,4 --embd 512 --heads 8 --head-dim 192 --rope-dims 64 --q-lora 96"
      " --o-groups 4 --o-lora 32 --experts 8 --experts-used 3 --expert-ff 64 --hash-layers 1 --window 16"
      " --indexer-heads 2 --indexer-dim 64 --indexer-top-k 7 --vocab 300 --ctx 2048");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Deepseek4HParams hp = read_metadata(gguf::File::open(out));
  EXPECT_EQ(hp.compress_ratios, (std::vector<uint32_t>{4, 0, 128, 4}));
  EXPECT_EQ(hp.n_layer, 4u);
  EXPECT_EQ(hp.n_embd, 512u);
  EXPECT_EQ(hp.n_head, 8u);
  EXPECT_EQ(hp.head_dim, 192u);
  EXPECT_EQ(hp.q_lora_rank, 96u);
  EXPECT_EQ(hp.o_groups, 4u);
  EXPECT_EQ(hp.o_lora_rank, 32u);
  EXPECT_EQ(hp.n_expert, 8u);
  EXPECT_EQ(hp.n_expert_used, 3u);
  EXPECT_EQ(hp.n_ff_exp, 64u);
  EXPECT_EQ(hp.n_hash_layers, 1u);
  EXPECT_EQ(hp.n_swa, 16u);
  EXPECT_EQ(hp.indexer_n_head, 2u);
  EXPECT_EQ(hp.indexer_head_dim, 64u);
  EXPECT_EQ(hp.indexer_top_k, 7u);
  EXPECT_EQ(hp.n_vocab, 300u);
  EXPECT_EQ(hp.n_ctx_train, 2048u);
  EXPECT_NO_THROW(validate_tensor_directory(gguf::File::open(out), hp));
}

TEST(MkmodelCli, ImportsATokenizerJson) {
  TempDir dir;
  const std::string out = dir.file("t.gguf");
  const test::ProcessResult r = mkmodel("--preset tiny --mix ds4-q2 --out " + out + " --tokenizer " + DS4_TEST_DATA_DIR +
                        "/mkmodel_tokenizer.json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const gguf::File f = gguf::File::open(out);
  const TokenizerData t = TokenizerData::read(f);
  // The preset's 512 rows cover the fixture's 284 ids; the rest is padding.
  EXPECT_EQ(t.size(), 512u);
  EXPECT_EQ(read_metadata(f).n_vocab, 512u);
  EXPECT_EQ(t.tokens[261], "Ġthe");
  EXPECT_EQ(t.tokens[511], "[PAD511]");
}

TEST(MkmodelCli, BadValuesGiveOneErrorLine) {
  TempDir dir;
  const std::string out = dir.file("never.gguf");
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--kv-heads 2", "KV head count 2 must be 1"},
      {"--compress-ratios 0,128", "need at least one ratio-4 layer"},
      {"--compress-ratios 0,5,4", "compress ratio 5 of layer 1 must be 0, 4 or 128"},
      {"--compress-ratios 0,x", "'x' is not a non-negative integer"},
      {"--layers 3 --compress-ratios 0,4", "--layers 3 disagrees"},
      {"--layers 0", "--layers must be at least 1"},
      {"--indexer-dim 96", "indexer key length 96 must be a power of two >= 64"},
      {"--hc 3", "hyper-connection count 3 must be 4"},
      {"--heads 3", "output group count 2 must divide head count 3"},
      {"--rope-dims 256", "rope dims 256 must not exceed head dim 128"},
      {"--rope-dims 63", "rope dims 63 must be even"},
      {"--head-dim 160", "multiple of 64 (FP8 KV blocks)"},
      {"--experts-used 17", "experts used 17 must be 1..expert count 16"},
      {"--hash-layers 7", "hash layer count 7 exceeds block count 6"},
      {"--embd 288", "row length 288 is not a multiple of 256 (iq2_xxs blocks)"},
      {"--vocab 100", "vocab size 100 is below"},
      {"--mix q3_k", "--mix"},
      {"--preset huge", "--preset"},
      {"--heads x", "--heads"},
      {"--tokenizer /nonexistent/tokenizer.json", "--tokenizer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const test::ProcessResult r = mkmodel("--mix ds4-q2 --seed 1 --out " + out + " " + c.args);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "not one line: " << r.out;
    EXPECT_EQ(r.out.rfind("ds4-mkmodel: error: ", 0), 0u) << r.out;
    EXPECT_FALSE(fs::exists(out));
  }
  const test::ProcessResult missing = mkmodel("--preset tiny");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("--out"), std::string::npos) << missing.out;
  const test::ProcessResult help = mkmodel("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--compress-ratios"), std::string::npos);
}

}  // namespace
}  // namespace ds4::model
