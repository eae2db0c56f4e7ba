// A model split into shards (ds4-gguf split, llama.cpp's gguf-split layout)
// runs as the single file does. Truth: the single file it was split from.
// Opened from its first shard, the model gives bit-identical logits for a
// prompt and greedy steps, resident and with the routed experts streamed from
// the shards; its fingerprint is the single file's, so saved sessions move
// between the layouts. (That llama.cpp loads the same shards and agrees is
// test_reference_shards.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
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

// A pipeline stage's host keeps the first shard (metadata only, with the
// set's recorded fingerprint) and its own: the model opens with the other
// shards absent, binds what is there, is the same model (fingerprint), and
// names the absent shard when asked for what only it holds.
TEST_F(ModelShards, AStageHostKeepsOnlyItsShards) {
  gguf::SplitOptions o;
  o.by = gguf::SplitOptions::By::Layers;
  o.layer_starts = {2};
  o.no_tensor_first_split = true;
  const gguf::File src = gguf::File::open(synthetic().path());
  const std::vector<std::string> paths =
      gguf::write_split(src, gguf::plan_split(src, o), dir_.file("stage"), /*record_fingerprint=*/true);
  ASSERT_EQ(paths.size(), 3u);
  const std::string a = dir_.file("a"), b = dir_.file("b");
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  auto keep = [](const std::string& from, const std::string& dir) {
    std::filesystem::copy_file(from, dir + "/" + std::filesystem::path(from).filename().string());
  };
  keep(paths[0], a), keep(paths[1], a);  // metadata, token_embd and layers 0-1
  keep(paths[0], b), keep(paths[2], b);  // metadata, layers 2-3 and the head
  const std::string first_a = a + "/" + std::filesystem::path(paths[0]).filename().string();
  const std::string first_b = b + "/" + std::filesystem::path(paths[0]).filename().string();

  // Opened as a whole set it is refused, naming the absent shard.
  const std::string whole = test::error_of([&] { model::Deepseek4Model::open(first_a); });
  EXPECT_NE(whole.find("shard 3 of 3"), std::string::npos) << whole;

  model::LoadOptions load;
  load.partial_shards = true;
  const model::Deepseek4Model ma = model::Deepseek4Model::open(first_a, load);
  const model::Deepseek4Model mb = model::Deepseek4Model::open(first_b, load);
  EXPECT_EQ(ma.file().missing_shards(), std::vector<std::string>{a + "/" + std::filesystem::path(paths[2]).filename().string()});
  EXPECT_TRUE(ma.weights().layers[1].attn_q_a.present());
  EXPECT_FALSE(ma.weights().layers[2].attn_q_a.present());
  EXPECT_FALSE(mb.weights().token_embd.present());
  EXPECT_TRUE(mb.weights().output.present());
  EXPECT_EQ(model::fingerprint(ma), model::fingerprint(synthetic().model()));
  EXPECT_EQ(model::fingerprint(mb), model::fingerprint(synthetic().model()));

  model::require_present(ma.weights(), ma.file(), 0, 2, true, false, "stage a");
  model::require_present(mb.weights(), mb.file(), 2, 4, false, true, "stage b");
  const std::string need = test::error_of(
      [&] { model::require_present(ma.weights(), ma.file(), 1, 3, false, false, "--layers 1:3"); });
  EXPECT_NE(need.find("--layers 1:3 needs tensor 'blk.2."), std::string::npos) << need;
  EXPECT_NE(need.find("stage-00003-of-00003.gguf"), std::string::npos) << need;
  const std::string head = test::error_of(
      [&] { model::require_present(ma.weights(), ma.file(), 0, 2, true, true, "the head"); });
  EXPECT_NE(head.find("the head needs tensor 'output"), std::string::npos) << head;

  // A layer that is not here is named when evaluated, not a crash.
  Forward fa(ma, Numerics::Default, nullptr);
  const std::string eval = test::error_of([&] { run(fa, 0); });
  EXPECT_NE(eval.find("not present in this process"), std::string::npos) << eval;

  // Without the recorded identity (gguf-split's own sets) a partial set cannot say which model it is.
  const std::vector<std::string> plain = gguf::write_split(src, gguf::plan_split(src, o), dir_.file("plain"));
  std::filesystem::remove(plain[2]);
  const std::string fp = test::error_of([&] { model::fingerprint(model::Deepseek4Model::open(plain[0], load)); });
  EXPECT_NE(fp.find("records no model fingerprint"), std::string::npos) << fp;
}

}  // namespace
}  // namespace ds4::cpu
