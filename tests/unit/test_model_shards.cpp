// A model split into shards (ds4-gguf split, llama.cpp's gguf-split layout)
// runs as the single file does. Truth: the single file it was split from.
// Opened from its first shard, the model gives bit-identical logits for a
// prompt and greedy steps, resident and with the routed experts streamed from
// the shards; its fingerprint is the single file's, so saved sessions move
// between the layouts. (That llama.cpp loads the same shards and agrees is
// test_reference_shards.)
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/expert_cache.h"
#include "backend/cpu/forward.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_split.h"
#include "model/deepseek4_fingerprint.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "support/error_of.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4::cpu {
namespace {

const test::SyntheticModel& synthetic() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 23);
  return m;
}

// The prompt's logits (every row), then those after each of `steps` greedy tokens.
std::vector<float> run(Forward& f, int steps) {
  const int64_t nv = synthetic().hparams().n_vocab;
  const std::vector<int32_t> prompt = test::random_tokens(nv, 21, 3);
  auto session = f.new_session(64);
  std::vector<float> out(prompt.size() * static_cast<size_t>(nv));
  std::vector<backend::Part> parts = {{session.get(), prompt, out.data()}};
  f.eval(parts);
  for (int i = 0; i < steps; ++i) {
    const std::span<const float> l = session->logits();
    const auto next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    std::vector<backend::Part> step = {{session.get(), std::span<const int32_t>(&next, 1)}};
    f.eval(step);
    out.insert(out.end(), session->logits().begin(), session->logits().end());
  }
  return out;
}

class ModelShards : public testing::Test {
 protected:
  // Splits the synthetic model's file; returns the first shard's path.
  std::string split(const gguf::SplitOptions& o, const std::string& prefix) {
    const gguf::File src = gguf::File::open(synthetic().path());
    return gguf::write_split(src, gguf::plan_split(src, o), dir_.file(prefix)).front();
  }
  test::TempDir dir_;
};

TEST_F(ModelShards, LogitsAndFingerprintEqualTheSingleFile) {
  Forward single(synthetic().model(), Numerics::Default, nullptr);
  const std::vector<float> want = run(single, 4);

  gguf::SplitOptions by_layers;
  by_layers.by = gguf::SplitOptions::By::Layers;
  by_layers.layer_starts = {2, 4};
  gguf::SplitOptions by_count;
  by_count.max_tensors = 7;
  for (const auto& [o, prefix] : {std::pair{by_layers, "layers"}, std::pair{by_count, "count"}}) {
    const std::string first = split(o, prefix);
    const model::Deepseek4Model m = model::Deepseek4Model::open(first);
    ASSERT_GT(m.file().shards().size(), 2u) << prefix;
    EXPECT_EQ(m.file_ranges().size(), m.file().shards().size());
    Forward sharded(m, Numerics::Default, nullptr);
    EXPECT_TRUE(run(sharded, 4) == want) << prefix << ": logits differ from the single file's";
    EXPECT_EQ(model::fingerprint(m), model::fingerprint(synthetic().model())) << prefix;
  }
}

TEST_F(ModelShards, ExpertsStreamFromEveryShard) {
  Forward single(synthetic().model(), Numerics::Default, nullptr);
  const std::vector<float> want = run(single, 3);

  gguf::SplitOptions o;
  o.by = gguf::SplitOptions::By::Layers;
  o.layer_starts = {1, 3, 5};
  model::LoadOptions load;
  load.stream_routed_experts = true;
  const model::Deepseek4Model m = model::Deepseek4Model::open(split(o, "stream"), load);
  ASSERT_EQ(m.file().shards().size(), 4u);
  // The resident part: every shard contributes, none of a routed expert's whole pages.
  uint64_t resident = 0;
  for (const auto& r : m.non_routed_ranges()) resident += r.bytes.size();
  EXPECT_LE(resident, m.file().file_size());
  EXPECT_GE(resident, m.file().file_size() - m.routed_expert_bytes());

  Forward streamed(m, Numerics::Default, nullptr);
  ExpertCacheOptions co;
  co.slots = 3;
  auto cache = std::make_unique<ExpertCache>(m, co);
  ExpertCache* c = cache.get();
  streamed.set_expert_source(std::move(cache));
  EXPECT_TRUE(run(streamed, 3) == want) << "streamed from shards: logits differ";
  EXPECT_GT(c->stats().misses, 0u);

  ExpertCacheOptions other;
  other.slots = 1;
  other.path = synthetic().path();
  const std::string msg = test::error_of([&] { ExpertCache(m, other); });
  EXPECT_NE(msg.find("applies to a single-file model, not to 4 shards"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ds4::cpu
