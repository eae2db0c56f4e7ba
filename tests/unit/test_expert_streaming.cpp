// SSD expert streaming (backend/cpu/expert_cache.h, issue 24). Truth: the
// resident run over the same file. With the routed experts read from the file
// into a cache of any size (1 slot: every expert read for each use; a few
// slots: evictions in every layer; all of them: every expert read once) the
// logits of every prompt row and every decode step must be bit-identical, in
// both numerics. A file that is not the model's or that loses its end gives
// one error naming it (and the tensor, for a read that comes up short).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/expert_cache.h"
#include "backend/cpu/forward.h"
#include "backend/cpu/moe_layer.h"
#include "core/error.h"
#include "model/deepseek4_hparams.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4::cpu {
namespace {

using test::random_tokens;

const test::SyntheticModel& synthetic() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 71);
  return m;
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Every prompt row's logits, then the logits after each of `steps` greedy
// tokens, for two conversations evaluated together (batched, so a layer's
// experts serve tokens of both).
std::vector<float> run(Forward& f, int steps) {
  const int64_t nv = synthetic().hparams().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(nv, 29, 1), random_tokens(nv, 11, 2)};
  std::vector<std::unique_ptr<backend::Session>> sessions;
  std::vector<std::vector<float>> rows;
  std::vector<backend::Part> parts;
  for (const auto& p : prompts) {
    sessions.push_back(f.new_session(128));
    rows.emplace_back(p.size() * static_cast<size_t>(nv));
  }
  for (size_t c = 0; c < prompts.size(); ++c) parts.push_back({sessions[c].get(), prompts[c], rows[c].data()});
  f.eval(parts);
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  for (int i = 0; i < steps; ++i) {
    std::vector<int32_t> next;
    for (const auto& s : sessions) next.push_back(argmax(s->logits()));
    std::vector<backend::Part> step;
    for (size_t c = 0; c < sessions.size(); ++c) step.push_back({sessions[c].get(), std::span<const int32_t>(&next[c], 1)});
    f.eval(step);
    for (const auto& s : sessions) out.insert(out.end(), s->logits().begin(), s->logits().end());
  }
  return out;
}

class ExpertStreaming : public testing::TestWithParam<Numerics> {};

TEST_P(ExpertStreaming, LogitsEqualTheResidentRunAtEveryCacheSize) {
  const test::SyntheticModel& m = synthetic();
  constexpr int kSteps = 6;
  Forward resident(m.model(), GetParam(), nullptr);
  resident.set_prefill_chunk(8);
  const std::vector<float> want = run(resident, kSteps);

  const int64_t all = static_cast<int64_t>(m.hparams().n_layer) * m.hparams().n_expert;
  for (const int64_t slots : {int64_t{1}, int64_t{3}, int64_t{9}, all}) {
    Forward streamed(m.model(), GetParam(), nullptr);
    streamed.set_prefill_chunk(8);
    ExpertCacheOptions o;
    o.slots = slots;
    auto cache = std::make_unique<ExpertCache>(m.model(), o);
    ExpertCache* c = cache.get();
    streamed.set_expert_source(std::move(cache));
    const std::vector<float> got = run(streamed, kSteps);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << slots << " slots: logits differ from the resident run";
    const ExpertCacheStats st = c->stats();
    EXPECT_EQ(st.slots, slots);
    EXPECT_GT(st.misses, 0u);
    EXPECT_GE(st.bytes_read, st.misses * (st.slot_bytes / 2)) << "every miss reads its three matrices";
    if (slots == all) {
      EXPECT_LE(st.misses + st.prefetched, static_cast<uint64_t>(all)) << "a cache of every expert reads each at most once";
      EXPECT_GT(st.hits, 0u);
    }
    if (slots == 1) {
      // Consecutive acquires never ask for the same (layer, expert) again,
      // and one slot leaves no room for prefetch.
      EXPECT_EQ(st.hits, 0u);
      EXPECT_EQ(st.prefetched, 0u);
    } else {
      // The hash layers' experts (from the token ids) and the next layer's
      // (from its router) were read ahead, and some of them were then used.
      EXPECT_GT(st.prefetch_hits, 0u);
      EXPECT_LE(st.prefetch_hits, st.prefetched);
    }
  }
}

// The fallback read paths give the same bytes: buffered reads (a file
// system refusing O_DIRECT), pread (no io_uring), both; a small queue depth
// (reads wait for room in the ring).
TEST(ExpertStreamingFiles, EveryReadPathGivesTheSameLogits) {
  const test::SyntheticModel& m = synthetic();
  Forward resident(m.model(), Numerics::Default, nullptr);
  resident.set_prefill_chunk(8);
  const std::vector<float> want = run(resident, 3);
  struct Path {
    bool direct, ring;
    unsigned depth;
  };
  for (const Path p : {Path{false, true, 64}, Path{true, false, 64}, Path{false, false, 64}, Path{true, true, 2}}) {
    Forward streamed(m.model(), Numerics::Default, nullptr);
    streamed.set_prefill_chunk(8);
    ExpertCacheOptions o;
    o.slots = 7;
    o.direct_io = p.direct;
    o.io_uring = p.ring;
    o.queue_depth = p.depth;
    auto cache = std::make_unique<ExpertCache>(m.model(), o);
    ExpertCache* c = cache.get();
    streamed.set_expert_source(std::move(cache));
    EXPECT_TRUE(run(streamed, 3) == want) << "direct " << p.direct << ", io_uring " << p.ring << ", depth " << p.depth;
    EXPECT_EQ(c->stats().io_uring, p.ring);
    if (!p.direct) {
      EXPECT_FALSE(c->stats().direct_io);
    }
  }
}

// A hot list fills the cache before the first token: that pass finds its
// experts there, and the logits stay the resident run's.
TEST(ExpertStreamingFiles, AHotListPreloadsTheCache) {
  const test::SyntheticModel& m = synthetic();
  Forward resident(m.model(), Numerics::Default, nullptr);
  resident.set_prefill_chunk(8);
  const std::vector<float> want = run(resident, 2);
  const std::vector<backend::ExpertUse> hot = backend::rank_expert_usage(resident.expert_usage());
  ASSERT_FALSE(hot.empty());

  Forward streamed(m.model(), Numerics::Default, nullptr);
  streamed.set_prefill_chunk(8);
  ExpertCacheOptions o;
  o.slots = static_cast<int64_t>(hot.size());
  auto cache = std::make_unique<ExpertCache>(m.model(), o);
  EXPECT_EQ(cache->preload(hot), hot.size());
  const uint64_t preread = cache->stats().bytes_read;
  EXPECT_GT(preread, 0u);
  ExpertCache* c = cache.get();
  streamed.set_expert_source(std::move(cache));
  EXPECT_TRUE(run(streamed, 2) == want);
  EXPECT_EQ(c->stats().misses, 0u) << "every expert the run selects was preloaded";
  EXPECT_EQ(c->stats().bytes_read, preread);

  ExpertCacheOptions small;
  small.slots = 3;
  ExpertCache three(m.model(), small);
  EXPECT_EQ(three.preload(hot), 3u) << "a list longer than the cache fills it and stops";
  const std::vector<backend::ExpertUse> outside = {{static_cast<uint32_t>(m.hparams().n_layer), 0, 1}};
  EXPECT_THROW(ExpertCache(m.model(), small).preload(outside), Error);
}

// Whether an expert's three views hold expert e of `layer` as the file has it.
bool holds_expert(const ExpertMatrices& got, const model::LayerWeights& layer, int e) {
  const std::pair<const model::TensorView*, const model::TensorView*> pairs[] = {
      {&got.gate, &layer.ffn_gate_exps}, {&got.up, &layer.ffn_up_exps}, {&got.down, &layer.ffn_down_exps}};
  for (const auto& [view, file] : pairs) {
    const uint8_t* bytes = view->matrix(static_cast<uint64_t>(got.index));
    if (std::memcmp(bytes, file->matrix(static_cast<uint64_t>(e)), file->matrix_bytes()) != 0) return false;
  }
  return true;
}

// The cache's own bookkeeping, against the file's bytes: an acquire's experts
// become readable front to back (wait() never goes backwards), the room of
// experts handed back early takes prefetches, at most half of the slots hold
// prefetched experts, the next acquire finds them, and a prefetch nobody
// acquired counts as unused once the next tokens begin.
TEST(ExpertCacheBookkeeping, PrefetchUsesTheRoomOfFinishedExperts) {
  const test::SyntheticModel& m = synthetic();
  const model::LayerWeights& layer = m.model().weights().layers[m.hparams().n_hash_layers];  // top-k routed
  ExpertCacheOptions o;
  o.slots = 4;
  ExpertCache c(m.model(), o);
  EXPECT_TRUE(c.wants_prefetch());
  std::vector<int> first = {0, 1, 2, 3};
  std::vector<ExpertMatrices> out(4);
  size_t ready = 99;
  ASSERT_EQ(c.acquire(layer, first, out, &ready), 4u);
  ASSERT_LE(ready, 4u);
  for (size_t k = ready; k < 4;) {
    const size_t more = c.wait(k);
    ASSERT_GT(more, k);
    k = more;
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(holds_expert(out[i], layer, first[i])) << "expert " << first[i];
  EXPECT_FALSE(c.wants_prefetch()) << "every slot is held";

  c.done_with(0, 2);  // experts first[0], first[1] computed
  EXPECT_TRUE(c.wants_prefetch());
  const std::vector<int> predicted = {4, 5, 6};
  c.prefetch(layer, predicted);
  EXPECT_EQ(c.stats().prefetched, 2u) << "two slots were handed back; half of four may hold prefetches";
  EXPECT_FALSE(c.wants_prefetch());
  c.release();

  std::vector<int> second = {first[0], 4};  // first[0]'s slot went to a prefetch
  ASSERT_EQ(c.acquire(layer, second, out, nullptr), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(holds_expert(out[i], layer, second[i])) << "expert " << second[i];
  c.release();
  ExpertCacheStats st = c.stats();
  EXPECT_EQ(st.prefetch_hits, 1u);
  EXPECT_EQ(st.misses, 5u) << "four cold experts, then one whose slot a prefetch took";
  EXPECT_EQ(st.prefetch_unused, 0u);
  c.begin_tokens(1);
  EXPECT_EQ(c.stats().prefetch_unused, 1u) << "expert 5 was prefetched and never acquired";
  EXPECT_TRUE(c.wants_prefetch()) << "the protection ends with the tokens it was for";
}

// The prediction a prefetch is made from, against the pass itself: given a
// layer's own input, likely_experts names exactly the experts its tokens
// select (the router on a hash layer is the token table), most selected first.
TEST(ExpertPrediction, GivenTheLayersOwnInputItNamesTheExpertsThePassSelects) {
  const test::SyntheticModel& m = synthetic();
  const auto& hp = m.hparams();
  const size_t d = hp.n_embd;
  constexpr int64_t kTokens = 7;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> X(kTokens * d);
  for (float& v : X) v = normal(rng);
  const std::vector<int32_t> tokens = random_tokens(hp.n_vocab, kTokens, 9);
  for (const uint32_t il : {0u, hp.n_hash_layers, hp.n_layer - 1}) {
    MoeLayer moe(m.model().weights().layers[il], hp, Numerics::Default);
    std::vector<int> count(hp.n_expert, 0);
    std::vector<float> out(d);
    for (int64_t t = 0; t < kTokens; ++t) {
      moe.forward(std::span<const float>(X.data() + t * d, d), tokens[static_cast<size_t>(t)], out, nullptr);
      for (int32_t e : moe.selected_ids()) ++count[static_cast<size_t>(e)];
    }
    std::vector<int> got;
    moe.likely_experts(X.data(), tokens.data(), kTokens, got, nullptr);
    std::set<int> want;
    for (uint32_t e = 0; e < hp.n_expert; ++e)
      if (count[e] > 0) want.insert(static_cast<int>(e));
    EXPECT_EQ(std::set<int>(got.begin(), got.end()), want) << "layer " << il;
    EXPECT_EQ(got.size(), want.size()) << "layer " << il << ": each expert once";
    for (size_t i = 1; i < got.size(); ++i)
      EXPECT_GE(count[static_cast<size_t>(got[i - 1])], count[static_cast<size_t>(got[i])]) << "layer " << il;
  }
}

// What ds4-bench measures the disk with: random experts read through the
// cache's own path; they are then cached like any other (the logits stay the
// resident run's) and are not counted as misses.
TEST(ExpertStreamingFiles, TheReadRateIsMeasuredWithTheCachesReads) {
  const test::SyntheticModel& m = synthetic();
  Forward resident(m.model(), Numerics::Default, nullptr);
  resident.set_prefill_chunk(8);
  const std::vector<float> want = run(resident, 2);
  Forward streamed(m.model(), Numerics::Default, nullptr);
  streamed.set_prefill_chunk(8);
  ExpertCacheOptions o;
  o.slots = 12;
  auto cache = std::make_unique<ExpertCache>(m.model(), o);
  ExpertCache* c = cache.get();
  EXPECT_GT(c->measure_read_rate(8, 1), 0.0);
  const ExpertCacheStats st = c->stats();
  EXPECT_EQ(st.misses, 0u);
  EXPECT_GE(st.bytes_read, 8 * (st.slot_bytes / 2)) << "eight experts' three matrices";
  streamed.set_expert_source(std::move(cache));
  EXPECT_TRUE(run(streamed, 2) == want);
}

INSTANTIATE_TEST_SUITE_P(BothNumerics, ExpertStreaming,
                         testing::Values(Numerics::Default, Numerics::Quality),
                         [](const auto& info) { return info.param == Numerics::Default ? "Default" : "Quality"; });

TEST(ExpertStreamingFiles, AFileThatIsNotTheModelsIsRefused) {
  const test::SyntheticModel& m = synthetic();
  test::TempDir dir;
  const std::string copy = (dir.path() / "short.gguf").string();
  std::filesystem::copy_file(m.path(), copy);
  std::filesystem::resize_file(copy, std::filesystem::file_size(copy) - 4096);
  ExpertCacheOptions o;
  o.slots = 4;
  o.path = copy;
  try {
    ExpertCache c(m.model(), o);
    FAIL() << "a shorter file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(copy), std::string::npos) << e.what();
  }
  o.path = (dir.path() / "absent.gguf").string();
  EXPECT_THROW(ExpertCache(m.model(), o), Error);

  ExpertCacheOptions tiny_budget;
  tiny_budget.budget_bytes = 1024;
  try {
    ExpertCache c(m.model(), tiny_budget);
    FAIL() << "a budget below one expert was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no expert"), std::string::npos) << e.what();
  }
}

TEST(ExpertStreamingFiles, AReadThatComesUpShortNamesTheTensor) {
  const test::SyntheticModel& m = synthetic();
  test::TempDir dir;
  const std::string copy = (dir.path() / "copy.gguf").string();
  std::filesystem::copy_file(m.path(), copy);
  // 2 slots: one may be prefetched; 16: the first hash layers' experts are
  // all prefetched (and fail) before the first acquire.
  for (const int64_t slots : {2, 16}) {
    std::filesystem::copy_file(m.path(), copy, std::filesystem::copy_options::overwrite_existing);
    ExpertCacheOptions o;
    o.slots = slots;
    o.path = copy;
    Forward f(m.model(), Numerics::Default, nullptr);
    f.set_expert_source(std::make_unique<ExpertCache>(m.model(), o));
    // The file loses everything after the first layer's experts once the cache has it open.
    const auto& l0 = m.model().weights().layers[0];
    const auto cut = static_cast<uintmax_t>(l0.ffn_gate_exps.data - m.model().file().bytes().data()) + 100;
    std::filesystem::resize_file(copy, cut);
    auto s = f.new_session(64);
    const std::vector<int32_t> prompt = random_tokens(m.hparams().n_vocab, 5, 3);
    for (int attempt = 0; attempt < 2; ++attempt) {  // the cache stays usable after the error
      try {
        f.eval(*s, prompt);
        FAIL() << "a truncated file was read";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("blk.0.ffn_"), std::string::npos) << what;
        EXPECT_NE(what.find("_exps"), std::string::npos) << what;
        EXPECT_NE(what.find("truncated"), std::string::npos) << what;
      }
      s->reset();
    }
  }
}

}  // namespace
}  // namespace ds4::cpu
