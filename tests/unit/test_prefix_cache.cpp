// The RAM prefix cache (engine/prefix_cache.h, issue 23). Truth: a session
// that evaluated the whole prompt itself. A prompt resumed from a stored
// state must end with the same tokens and bit for bit the same logits, and
// the cache keeps what its rules say (longest prefix, byte budget by least
// recent use, nothing short, inconsistent or without logits).
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "engine/prefix_cache.h"
#include "model/deepseek4_hparams.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"

namespace ds4::engine {
namespace {

using test::random_tokens;

struct Fixture {
  test::SyntheticModel m{model::preset_tiny(), model::QuantMix::Ds4Q2, 57};
  cpu::Forward f{m.model(), backend::Numerics::Default, nullptr};
  Fixture() { f.set_prefill_chunk(8); }
  std::unique_ptr<backend::Session> evaluated(std::span<const int32_t> tokens) {
    auto s = f.new_session(128);
    f.eval(*s, tokens);
    return s;
  }
  std::vector<int32_t> tokens(int n, uint64_t seed) { return random_tokens(m.hparams().n_vocab, n, seed); }
};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCache, ResumedPromptEqualsTheWholeEvaluation) {
  Fixture fx;
  PrefixCache cache(fx.f, size_t{64} << 20, 4);
  const std::vector<int32_t> head = fx.tokens(21, 1);
  const std::vector<int32_t> prompt = concat(head, fx.tokens(13, 2));
  ASSERT_TRUE(cache.store(*fx.evaluated(head)));

  const std::optional<int64_t> hit = cache.find(prompt);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, 21);
  auto resumed = fx.f.new_session(128);
  fx.f.eval(*resumed, fx.tokens(5, 9));  // whatever it held goes
  cache.load(prompt, *hit, *resumed);
  ASSERT_EQ(resumed->size(), 21);
  fx.f.eval(*resumed, std::span<const int32_t>(prompt).subspan(21));

  const auto whole = fx.evaluated(prompt);
  ASSERT_TRUE(std::ranges::equal(resumed->tokens(), whole->tokens()));
  ASSERT_TRUE(std::ranges::equal(resumed->logits(), whole->logits())) << "logits after the resumed prompt";
  EXPECT_EQ(cache.stats().hits, 1u);
}

TEST(PrefixCache, LongestPrefixWinsAndAWholePromptIsAHit) {
  Fixture fx;
  PrefixCache cache(fx.f, size_t{64} << 20, 4);
  const std::vector<int32_t> a = fx.tokens(10, 3);
  const std::vector<int32_t> ab = concat(a, fx.tokens(10, 4));
  const std::vector<int32_t> abc = concat(ab, fx.tokens(6, 5));
  ASSERT_TRUE(cache.store(*fx.evaluated(a)));
  ASSERT_TRUE(cache.store(*fx.evaluated(ab)));
  EXPECT_FALSE(cache.store(*fx.evaluated(ab))) << "the same tokens again: no second entry";
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.find(abc), 20);
  EXPECT_EQ(cache.find(ab), 20) << "a state of the whole prompt holds its logits";
  // A prompt that parts from the longer entry inside it gets the shorter one.
  std::vector<int32_t> other = ab;
  other[15] = (other[15] + 1) % static_cast<int32_t>(fx.m.hparams().n_vocab);
  EXPECT_EQ(cache.find(other), 10);
  EXPECT_FALSE(cache.find(fx.tokens(30, 6)).has_value());
  EXPECT_EQ(cache.stats().misses, 1u);

  // Loading the whole prompt's state leaves its logits, as evaluating it.
  auto s = fx.f.new_session(128);
  cache.load(ab, 20, *s);
  const auto whole = fx.evaluated(ab);
  EXPECT_TRUE(std::ranges::equal(s->logits(), whole->logits()));
  EXPECT_THROW(cache.load(abc, 15, *s), Error) << "no entry of that length";
}

TEST(PrefixCache, BudgetDropsTheLeastRecentlyUsed) {
  Fixture fx;
  const std::vector<int32_t> a = fx.tokens(12, 7), b = fx.tokens(12, 8), c = fx.tokens(12, 9);
  // One state's size sets a budget of two.
  size_t one = 0;
  {
    PrefixCache probe(fx.f, size_t{64} << 20, 1);
    ASSERT_TRUE(probe.store(*fx.evaluated(a)));
    one = probe.stats().bytes;
  }
  PrefixCache cache(fx.f, 2 * one + one / 2, 1);
  ASSERT_TRUE(cache.store(*fx.evaluated(a)));
  ASSERT_TRUE(cache.store(*fx.evaluated(b)));
  auto s = fx.f.new_session(128);
  cache.load(a, *cache.find(a), *s);  // a is now the most recently used
  ASSERT_TRUE(cache.store(*fx.evaluated(c)));
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.stats().bytes, 2 * one + one / 2);
  EXPECT_TRUE(cache.find(a).has_value());
  EXPECT_FALSE(cache.find(b).has_value()) << "b was the least recently used";
  EXPECT_TRUE(cache.find(c).has_value());

  PrefixCache tiny(fx.f, one / 2, 1);
  EXPECT_FALSE(tiny.store(*fx.evaluated(a))) << "a state over the whole budget is not kept";
  EXPECT_EQ(tiny.stats().entries, 0u);
}

TEST(PrefixCache, KeepsOnlyUsableStates) {
  Fixture fx;
  PrefixCache cache(fx.f, size_t{64} << 20, 8);
  EXPECT_FALSE(cache.store(*fx.evaluated(fx.tokens(7, 10)))) << "shorter than min tokens";

  // A prompt piece evaluated without logits cannot be resumed at its end.
  auto s = fx.f.new_session(128);
  const std::vector<int32_t> t = fx.tokens(12, 11);
  backend::Part part{s.get(), t, nullptr, true};
  fx.f.eval(std::span<const backend::Part>(&part, 1));
  ASSERT_TRUE(s->logits().empty());
  EXPECT_FALSE(cache.store(*s));

  PrefixCache off(fx.f, 0, 1);
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.store(*fx.evaluated(t)));
  EXPECT_FALSE(off.find(t).has_value());

  // A state longer than the session's context is refused, session unchanged.
  ASSERT_TRUE(cache.store(*fx.evaluated(t)));
  auto small = fx.f.new_session(10);
  EXPECT_THROW(cache.load(t, 12, *small), Error);
  EXPECT_EQ(small->size(), 0);
  EXPECT_THROW(PrefixCache(fx.f, 1, 0), Error);
}

}  // namespace
}  // namespace ds4::engine
