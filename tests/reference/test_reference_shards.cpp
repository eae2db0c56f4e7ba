// Shard sets written by ds4-gguf split (core/gguf_split.h) are llama.cpp
// shard sets: llama.cpp's loader, opening the first shard, finds the others by
// name, checks their split.no and the tensor total, and computes the same
// logits as on the single file they were split from, bit for bit (same
// engine, same batch). And the merge of the shards is that single file.
// (Our engine on shards against the single file: test_model_shards.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/gguf_split.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "reference_client.h"
#include "support/file_io.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4 {
namespace {

TEST(ReferenceShards, LlamaCppLoadsOurShardsAndAgreesWithTheSingleFile) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q4, 41);
  const std::vector<int32_t> tokens = test::random_tokens(static_cast<uint32_t>(m.hparams().n_vocab), 24, 5);
  const std::vector<float> want = reference::logits(m.path(), tokens, 1);

  const gguf::File src = gguf::File::open(m.path());
  test::TempDir dir;
  gguf::SplitOptions by_layers;
  by_layers.by = gguf::SplitOptions::By::Layers;
  by_layers.layer_starts = {3};
  gguf::SplitOptions by_size;
  by_size.by = gguf::SplitOptions::By::Size;
  by_size.max_bytes = src.tensor_data_bytes() / 5;
  by_size.no_tensor_first_split = true;
  for (const auto& [o, prefix] : {std::pair{by_layers, "layers"}, std::pair{by_size, "size"}}) {
    const std::vector<std::string> shards = gguf::write_split(src, gguf::plan_split(src, o), dir.file(prefix));
    ASSERT_GE(shards.size(), 2u);
    const std::vector<float> got = reference::logits(shards.front(), tokens, 1);
    EXPECT_TRUE(got == want) << prefix << ": llama.cpp's logits on the " << shards.size()
                             << " shards differ from its logits on the single file";
    const std::string merged = dir.file(std::string(prefix) + "-merged.gguf");
    gguf::write_merged(gguf::File::open(shards.front()), merged);
    EXPECT_EQ(test::read_bytes(merged), test::read_bytes(m.path())) << prefix;
  }
}

}  // namespace
}  // namespace ds4
