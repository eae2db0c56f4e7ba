// The whole CPU forward pass: results that must not depend on how the work
// is cut (one batch, chunks of 7, token by token; 1 or 2 threads), teacher
// forcing (row i depends only on tokens 0..i), in-RAM snapshot / restore,
// greedy decoding against the logits it is derived from, input errors that
// leave the session untouched, and the distance between Default and
// --quality numerics (printed: the figure the closing note reports). Parity
// with llama.cpp is in tests/reference/test_reference_forward.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "support/random_tokens.h"
#include "support/sanitized.h"
#include "support/synthetic_model.h"

namespace ds4::cpu {
namespace {

using test::kSanitized;

using test::random_tokens;

// All-position logits of `tokens` evaluated in pieces of `piece` tokens
// (eval calls) with the given prefill chunk and pool.
std::vector<float> run(const model::Deepseek4Model &m, Numerics num, const std::vector<int32_t> &tokens, int chunk,
                       int piece, ThreadPool *pool) {
  Forward f(m, num, pool);
  f.set_prefill_chunk(chunk);
  auto s = f.make_session(static_cast<int64_t>(tokens.size()));
  const size_t nv = m.hparams().n_vocab;
  std::vector<float> out(tokens.size() * nv);
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(piece)) {
    const size_t n = std::min(tokens.size() - at, static_cast<size_t>(piece));
    f.eval(s, std::span<const int32_t>(tokens).subspan(at, n), out.data() + at * nv);
  }
  return out;
}

class ForwardTest : public testing::TestWithParam<model::QuantMix> {
 protected:
  // 150 tokens: windows of 8 wrap, ratio-4 layers pass the indexer's top-k
  // of 4 at token 20, the ratio-128 layers emit a row at 128.
  static constexpr int kTokens = kSanitized ? 40 : 150;
};

TEST_P(ForwardTest, ResultDoesNotDependOnChunkingOrThreads) {
  test::SyntheticModel m(model::preset_tiny(), GetParam(), 5);
  const auto tokens = random_tokens(m.hparams().n_vocab, kTokens, 9);
  ThreadPool two(2);
  for (Numerics num : {Numerics::Quality, Numerics::Default}) {
    const auto base = run(m.model(), num, tokens, kDefaultPrefillChunk, kTokens, nullptr);
    for (float v : base) ASSERT_TRUE(std::isfinite(v));
    // Layer-major chunks of 7, token-by-token eval calls, two threads: the
    // same float operations in the same order, so bit-identical.
    EXPECT_EQ(run(m.model(), num, tokens, 7, kTokens, nullptr), base);
    EXPECT_EQ(run(m.model(), num, tokens, kDefaultPrefillChunk, 1, nullptr), base);
    EXPECT_EQ(run(m.model(), num, tokens, 16, 33, &two), base);
  }
}

INSTANTIATE_TEST_SUITE_P(Mixes, ForwardTest,
                         testing::Values(model::QuantMix::F32, model::QuantMix::Ds4Q2, model::QuantMix::Q6_K),
                         [](const auto &info) {
                           std::string n(model::quant_mix_name(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

class ForwardSessionTest : public testing::Test {
 protected:
  ForwardSessionTest() : m_(model::preset_tiny(), model::QuantMix::F32, 3) {}
  test::SyntheticModel m_;
};

TEST_F(ForwardSessionTest, RowsDependOnlyOnTheirPrefix) {
  const auto tokens = random_tokens(m_.hparams().n_vocab, 40, 1);
  const auto all = run(m_.model(), Numerics::Default, tokens, 4096, 40, nullptr);
  const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + 25);
  const auto part = run(m_.model(), Numerics::Default, prefix, 4096, 25, nullptr);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin()));
  // And a different later token changes later rows only.
  auto other = tokens;
  other[30] = (other[30] + 1) % static_cast<int32_t>(m_.hparams().n_vocab);
  const auto changed = run(m_.model(), Numerics::Default, other, 4096, 40, nullptr);
  const size_t nv = m_.hparams().n_vocab;
  EXPECT_TRUE(std::equal(all.begin(), all.begin() + 30 * nv, changed.begin()));
  EXPECT_FALSE(std::equal(all.begin() + 30 * nv, all.begin() + 31 * nv, changed.begin() + 30 * nv));
}

TEST_F(ForwardSessionTest, SnapshotRestoreContinuesExactly) {
  Forward f(m_.model(), Numerics::Default, nullptr);
  const auto tokens = random_tokens(m_.hparams().n_vocab, 60, 2);
  auto s = f.make_session(100);
  f.eval(s, std::span<const int32_t>(tokens).first(30));
  const Session snapshot = s;
  f.eval(s, std::span<const int32_t>(tokens).subspan(30));
  const std::vector<float> straight(s.logits().begin(), s.logits().end());
  // Go somewhere else, then back to the snapshot and take the same path.
  f.eval(s, std::span<const int32_t>(tokens).first(5));
  s.restore(snapshot);
  EXPECT_EQ(s.size(), 30);
  f.eval(s, std::span<const int32_t>(tokens).subspan(30));
  EXPECT_EQ(std::vector<float>(s.logits().begin(), s.logits().end()), straight);
  EXPECT_EQ(s.size(), 60);

  // A snapshot of another numerics or context is refused.
  Forward q(m_.model(), Numerics::Quality, nullptr);
  auto other = q.make_session(100);
  EXPECT_THROW(s.restore(other), Error);
  auto small = f.make_session(50);
  EXPECT_THROW(s.restore(small), Error);
}

TEST_F(ForwardSessionTest, ProgressCountsTokenLayersAndCancelLeavesASessionToRestore) {
  Forward f(m_.model(), Numerics::Default, nullptr);
  f.set_prefill_chunk(8);
  const auto tokens = random_tokens(m_.hparams().n_vocab, 20, 4);
  const int64_t layers = static_cast<int64_t>(m_.hparams().n_layer);
  auto s = f.make_session(64);
  std::vector<int64_t> seen;
  f.set_progress([&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 20 * layers);
    seen.push_back(done);
    return true;
  });
  f.eval(s, tokens);
  // Chunks of 8, 8, 4 tokens, one call per layer of each chunk.
  ASSERT_EQ(seen.size(), static_cast<size_t>(3 * layers));
  EXPECT_EQ(seen.front(), 8);
  EXPECT_EQ(seen[static_cast<size_t>(layers)], 8 * layers + 8);
  EXPECT_EQ(seen.back(), 20 * layers);
  const std::vector<float> straight(s.logits().begin(), s.logits().end());

  // Cancel in the middle of the second chunk: Cancelled, the session is
  // refused until restored, and from the snapshot the same path gives the
  // same logits.
  s.reset();
  const Session empty = s;
  int calls = 0;
  f.set_progress([&](int64_t, int64_t) { return ++calls < static_cast<int>(layers) + 2; });
  EXPECT_THROW(f.eval(s, tokens), Cancelled);
  EXPECT_FALSE(s.consistent());
  f.set_progress(nullptr);
  EXPECT_THROW(f.eval(s, tokens), Error);
  s.restore(empty);
  EXPECT_TRUE(s.consistent());
  f.eval(s, tokens);
  EXPECT_EQ(std::vector<float>(s.logits().begin(), s.logits().end()), straight);
}

TEST_F(ForwardSessionTest, GreedyFollowsTheArgmaxOfItsOwnLogits) {
  Forward f(m_.model(), Numerics::Quality, nullptr);
  const auto prompt = random_tokens(m_.hparams().n_vocab, 20, 4);
  auto s = f.make_session(40);
  f.eval(s, prompt);
  const auto ids = f.generate_greedy(s, 10);
  ASSERT_EQ(ids.size(), 10u);
  EXPECT_EQ(s.size(), 29);  // the last id is not fed back
  // Teacher-forcing prompt + ids[0..8] must give each next id as argmax.
  auto seq = prompt;
  seq.insert(seq.end(), ids.begin(), ids.end() - 1);
  const auto rows = run(m_.model(), Numerics::Quality, seq, 4096, static_cast<int>(seq.size()), nullptr);
  const size_t nv = m_.hparams().n_vocab;
  for (size_t k = 0; k < ids.size(); ++k) {
    const float *r = rows.data() + (prompt.size() - 1 + k) * nv;
    EXPECT_EQ(std::max_element(r, r + nv) - r, ids[k]) << "step " << k;
  }
}

TEST_F(ForwardSessionTest, BadInputLeavesTheSessionUnchanged) {
  Forward f(m_.model(), Numerics::Default, nullptr);
  auto s = f.make_session(10);
  const std::vector<int32_t> ok{1, 2, 3};
  f.eval(s, ok);
  const std::vector<float> before(s.logits().begin(), s.logits().end());
  const int32_t nv = static_cast<int32_t>(m_.hparams().n_vocab);
  const std::vector<int32_t> bad_id{4, nv, 5};
  const std::vector<int32_t> negative{-1};
  const std::vector<int32_t> too_many(8, 1);
  for (const auto *bad : {&bad_id, &negative, &too_many}) {
    EXPECT_THROW(f.eval(s, *bad), Error);
    EXPECT_EQ(s.size(), 3);
    EXPECT_EQ(std::vector<float>(s.logits().begin(), s.logits().end()), before);
  }
  try {
    f.eval(s, bad_id);
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("token 1 has id 512"), std::string::npos) << e.what();
  }
  try {
    f.eval(s, too_many);
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("do not fit the context of 10"), std::string::npos) << e.what();
  }
  // Seven more fit exactly; greedy that would need an 11th slot is refused.
  f.eval(s, std::vector<int32_t>(7, 2));
  EXPECT_THROW(f.generate_greedy(s, 2), Error);
  EXPECT_EQ(f.generate_greedy(s, 1).size(), 1u);
  // A session of another model is refused.
  test::SyntheticModel other(model::preset_tiny(), model::QuantMix::F32, 4);
  Forward g(other.model(), Numerics::Default, nullptr);
  auto s2 = g.make_session(10);
  EXPECT_THROW(f.eval(s2, ok), Error);
}

// Default numerics (ds4: FP8 KV, FP4 indexer, f16 cache rows, ds4's
// roundings) against --quality, on the tiny configs: printed for the closing
// note; the bound only catches a broken Default path (a random-weight model
// has flat logits, so QAT noise moves top-1 often).
TEST(ForwardNumerics, DefaultStaysCloseToQuality) {
  for (auto mix : {model::QuantMix::F32, model::QuantMix::Ds4Q2, model::QuantMix::Ds4Q4}) {
    test::SyntheticModel m(model::preset_tiny(), mix, 21);
    const int n = kSanitized ? 48 : 200;
    const auto tokens = random_tokens(m.hparams().n_vocab, n, 8);
    const auto q = run(m.model(), Numerics::Quality, tokens, 4096, n, nullptr);
    const auto d = run(m.model(), Numerics::Default, tokens, 4096, n, nullptr);
    const size_t nv = m.hparams().n_vocab;
    int agree = 0;
    double kl = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const float *a = q.data() + t * nv, *b = d.data() + t * nv;
      agree += (std::max_element(a, a + nv) - a) == (std::max_element(b, b + nv) - b);
      const double ma = *std::max_element(a, a + nv), mb = *std::max_element(b, b + nv);
      double sa = 0, sb = 0;
      for (size_t i = 0; i < nv; ++i) sa += std::exp(a[i] - ma), sb += std::exp(b[i] - mb);
      for (size_t i = 0; i < nv; ++i) {
        const double pa = std::exp(a[i] - ma) / sa, pb = std::exp(b[i] - mb) / sb;
        kl += pa * (std::log(pa) - std::log(pb));
      }
    }
    kl /= static_cast<double>(tokens.size());
    std::printf("[default-vs-quality] tiny %s: top-1 %d/%zu, mean KL(quality || default) %.3g\n",
                std::string(model::quant_mix_name(mix)).c_str(), agree, tokens.size(), kl);
    EXPECT_GE(agree, static_cast<int>(tokens.size()) / 2);
    EXPECT_LT(kl, 0.1);
    EXPECT_NE(q, d);  // the two numerics really differ
  }
}

}  // namespace
}  // namespace ds4::cpu
