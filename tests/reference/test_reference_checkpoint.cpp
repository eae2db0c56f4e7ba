// A random checkpoint in the official safetensors format
// (support/synthetic_checkpoint.h), converted by ds4-quantize's reader into
// llama.cpp's converter layout (BF16 / Q8_0 from FP8 / MXFP4 repacked from
// FP4 / F32 / I32), runs in llama.cpp's deepseek4 graph, and our --quality
// logits match llama.cpp's with the bars of test_reference_forward (the
// replicated bar where llama.cpp runs the kernels --quality replicates, else
// the regression guard). llama.cpp's own converter (Python, torch) does not
// run here, so its GGUF of the same checkpoint is not compared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/thread_pool.h"
#include "forward_parity.h"
#include "logits_comparison.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_metadata.h"
#include "model/deepseek4_mtp.h"
#include "model/deepseek4_model.h"
#include "model/hf_checkpoint.h"
#include "model/requantize.h"
#include "model/safetensors.h"
#include "reference_client.h"
#include "support/random_tokens.h"
#include "support/synthetic_checkpoint.h"
#include "support/temp_dir.h"

namespace ds4 {
namespace {

constexpr int kTokens = 160;

TEST(ReferenceCheckpoint, ConvertedCheckpointMatchesLlamaCpp) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  model::Deepseek4HParams hp = model::preset_tiny();
  hp.name = "deepseek4";
  hp.head_dim = 256;  // the parity shape of test_reference_forward
  test::TempDir dir("ds4-ref-checkpoint-");
  test::write_synthetic_checkpoint(hp, 21, dir.file("ckpt"));
  const model::SafetensorsSet set = model::SafetensorsSet::open(dir.file("ckpt"));
  const model::RequantizeInput in = model::checkpoint_input(set, model::hparams_from_config(dir.file("ckpt/config.json")));
  model::RequantizeOptions o;
  o.mix = model::QuantMix::LlamaConvert;
  const std::vector<model::TensorPlan> plan = model::plan_requantize(in, o);
  ThreadPool pool(2);
  const std::string path = dir.file("converted.gguf");
  model::requantize_writer(in, plan, o, pool).write(path);

  const auto tokens = test::random_tokens(hp.n_vocab, kTokens, 5);
  const std::vector<float> ref = reference::logits(path, tokens, 1);
  const model::Deepseek4Model m = model::Deepseek4Model::open(path);
  cpu::Forward fwd(m, cpu::Numerics::Quality, &pool);
  auto session = fwd.make_session(kTokens);
  std::vector<float> ours(ref.size());
  fwd.eval(session, tokens, ours.data());
  const auto c = reference::compare_logits(ref, ours, hp.n_vocab);
  std::printf("[checkpoint] llama-convert from safetensors: top-1 %d/%d, mean KL %.3g, worst %.3g of the range\n",
              c.top1_agree, kTokens, c.mean_kl, c.worst_rel);
  if (reference::replicated_kernels() && !reference::has_unconfirmed_kernels(model::QuantMix::LlamaConvert)) {
    EXPECT_GE(c.top1_agree, static_cast<int>(std::ceil(0.99 * kTokens)));
    EXPECT_LE(c.mean_kl, 1e-3);
  } else {
    EXPECT_GE(c.top1_agree, static_cast<int>(std::ceil(0.80 * kTokens)));
    EXPECT_LE(c.mean_kl, 0.02);
  }
}

// The converter's metadata flavour (no vocab_size, i32 compress ratios with
// the MTP entry, ...) is read by llama.cpp as ds4's is: the same logits; and
// llama.cpp's loader takes the MTP-only file of the nextn layout, every
// tensor of the block checked (load_mtp), as its draft model.
TEST(ReferenceCheckpoint, LlamaFlavourAndMtpFileLoadInLlamaCpp) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  model::Deepseek4HParams hp = model::preset_tiny();
  hp.name = "deepseek4";
  test::TempDir dir("ds4-ref-flavour-");
  test::write_synthetic_checkpoint(hp, 22, dir.file("ckpt"));
  const model::SafetensorsSet set = model::SafetensorsSet::open(dir.file("ckpt"));
  ThreadPool pool(2);
  auto write = [&](const model::RequantizeInput& in, const std::string& path) {
    model::RequantizeOptions o;
    o.mix = model::QuantMix::LlamaConvert;
    const std::vector<model::TensorPlan> plan = model::plan_requantize(in, o);
    model::requantize_writer(in, plan, o, pool).write(path);
  };
  using model::MetadataFlavour;
  write(model::checkpoint_input(set, hp, MetadataFlavour::Ds4), dir.file("ds4.gguf"));
  write(model::checkpoint_input(set, hp, MetadataFlavour::Llama), dir.file("llama.gguf"));
  write(model::checkpoint_mtp_input(set, hp, model::MtpLayout::LlamaNextn, MetadataFlavour::Llama),
        dir.file("mtp.gguf"));

  const auto tokens = test::random_tokens(hp.n_vocab, 24, 6);
  EXPECT_EQ(reference::logits(dir.file("ds4.gguf"), tokens, 1), reference::logits(dir.file("llama.gguf"), tokens, 1));
  const std::string info = reference::model_info(dir.file("mtp.gguf"), true);
  EXPECT_NE(info.find("\"n_layer_nextn\":1"), std::string::npos) << info;
  EXPECT_NE(info.find("\"n_vocab\":" + std::to_string(hp.n_vocab)), std::string::npos) << info;
}

}  // namespace
}  // namespace ds4
