// Batched evaluation of several sessions (Forward::eval_batch, issue 23): each
// session must end exactly as evaluating it alone leaves it, bit for bit,
// whatever else shares its batch — other sessions' decode steps, another
// prompt's chunk, the chunk size, the thread count — in both numerics and on
// quantised weights. The truth is the single-session path (eval one session
// at a time; a decode step there runs the matvec path, the batch the matmul
// path), which test_forward.cpp and the reference tests hold to llama.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
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
using Logits = std::vector<float>;

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Prompts of different lengths: one token, across the 8-token window, past
// the indexer's top-k of 4 rows (token 20 on ratio-4 layers) and, outside the
// sanitizer build, up to the ratio-128 layers' first compressed row, which
// the decode steps then cross.
std::vector<std::vector<int32_t>> prompts(int64_t n_vocab) {
  const std::vector<size_t> lengths = kSanitized ? std::vector<size_t>{1, 9, 23} : std::vector<size_t>{1, 9, 23, 122};
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < lengths.size(); ++i) out.push_back(random_tokens(n_vocab, lengths[i], 40 + i));
  return out;
}

// The logits after every greedy decode step of one session evaluated alone.
std::vector<Logits> decode_alone(Forward &f, const std::vector<int32_t> &prompt, int steps) {
  auto s = f.make_session(256);
  f.eval(s, prompt);
  std::vector<Logits> out{Logits(s.logits().begin(), s.logits().end())};
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax(s.logits());
    f.eval(s, std::span<const int32_t>(&next, 1));
    out.emplace_back(s.logits().begin(), s.logits().end());
  }
  return out;
}

// The same, all sessions decoded together: prompts in one batched call, then
// one eval_batch per step with every session's own greedy token.
std::vector<std::vector<Logits>> decode_batched(Forward &f, const std::vector<std::vector<int32_t>> &ps, int steps) {
  std::vector<Session> sessions;
  for (size_t i = 0; i < ps.size(); ++i) sessions.push_back(f.make_session(256));
  std::vector<Forward::SessionTokens> parts;
  for (size_t i = 0; i < ps.size(); ++i) parts.push_back({&sessions[i], ps[i], nullptr});
  f.eval_batch(parts);
  std::vector<std::vector<Logits>> out(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) out[i].emplace_back(sessions[i].logits().begin(), sessions[i].logits().end());
  std::vector<int32_t> next(ps.size());
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < ps.size(); ++i) {
      next[i] = argmax(sessions[i].logits());
      parts[i].tokens = std::span<const int32_t>(&next[i], 1);
    }
    f.eval_batch(parts);
    for (size_t i = 0; i < ps.size(); ++i) out[i].emplace_back(sessions[i].logits().begin(), sessions[i].logits().end());
  }
  return out;
}

class ForwardBatchTest : public testing::TestWithParam<model::QuantMix> {};

TEST_P(ForwardBatchTest, BatchedDecodeEqualsEachSessionAlone) {
  test::SyntheticModel m(model::preset_tiny(), GetParam(), 11);
  const auto ps = prompts(m.hparams().n_vocab);
  const int steps = kSanitized ? 4 : 10;
  ThreadPool two(2);
  for (Numerics num : {Numerics::Default, Numerics::Quality}) {
    Forward alone(m.model(), num, nullptr);
    std::vector<std::vector<Logits>> want;
    for (const auto &p : ps) want.push_back(decode_alone(alone, p, steps));
    for (ThreadPool *pool : {static_cast<ThreadPool *>(nullptr), &two}) {
      Forward f(m.model(), num, pool);
      const auto got = decode_batched(f, ps, steps);
      for (size_t i = 0; i < ps.size(); ++i)
        for (int step = 0; step <= steps; ++step)
          ASSERT_EQ(got[i][static_cast<size_t>(step)], want[i][static_cast<size_t>(step)])
              << "session " << i << " (prompt " << ps[i].size() << "), step " << step << ", numerics "
              << (num == Numerics::Quality ? "quality" : "default") << (pool ? ", 2 threads" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mixes, ForwardBatchTest, testing::Values(model::QuantMix::F32, model::QuantMix::Ds4Q2),
                         [](const auto &info) {
                           std::string n(model::quant_mix_name(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A prompt's prefill sharing chunks with other sessions' decode steps (the
// continuous-batching step), in chunks smaller than the prompt, one part
// keeping every row's logits: all rows and states as when run alone.
TEST(ForwardBatch, PromptChunksBesideDecodeSteps) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, 12);
  const int64_t nv = m.hparams().n_vocab;
  const auto a = random_tokens(nv, 30, 1), b = random_tokens(nv, 12, 2), prompt = random_tokens(nv, 37, 3);
  Forward alone(m.model(), Numerics::Default, nullptr);
  Forward f(m.model(), Numerics::Default, nullptr);
  f.set_prefill_chunk(16);

  auto sa = f.make_session(128), sb = f.make_session(128), sp = f.make_session(128);
  f.eval(sa, a);
  f.eval(sb, b);
  const int32_t next_a = argmax(sa.logits()), next_b = argmax(sb.logits());
  std::vector<float> prompt_rows(prompt.size() * static_cast<size_t>(nv));
  const Forward::SessionTokens parts[] = {{&sa, std::span<const int32_t>(&next_a, 1), nullptr},
                                          {&sp, prompt, prompt_rows.data()},
                                          {&sb, std::span<const int32_t>(&next_b, 1), nullptr}};
  f.eval_batch(parts);

  auto ra = alone.make_session(128), rb = alone.make_session(128), rp = alone.make_session(128);
  alone.eval(ra, a);
  alone.eval(ra, std::span<const int32_t>(&next_a, 1));
  alone.eval(rb, b);
  alone.eval(rb, std::span<const int32_t>(&next_b, 1));
  std::vector<float> want_rows(prompt_rows.size());
  alone.eval(rp, prompt, want_rows.data());

  EXPECT_EQ(prompt_rows, want_rows);
  for (auto [got, want] : {std::pair{&sa, &ra}, std::pair{&sb, &rb}, std::pair{&sp, &rp}}) {
    EXPECT_TRUE(std::ranges::equal(got->tokens(), want->tokens()));
    EXPECT_TRUE(std::ranges::equal(got->logits(), want->logits()));
  }
  // The KV states match too: the next step of each, alone, is the same.
  const int32_t t = 7;
  for (auto [got, want] : {std::pair{&sa, &ra}, std::pair{&sp, &rp}}) {
    alone.eval(*got, std::span<const int32_t>(&t, 1));
    alone.eval(*want, std::span<const int32_t>(&t, 1));
    EXPECT_TRUE(std::ranges::equal(got->logits(), want->logits()));
  }
}

TEST(ForwardBatch, APromptInPiecesWithoutLogitsEndsAsInOnePiece) {
  // A server prefills a prompt in pieces beside decode steps and skips the
  // vocab head for every piece but the last: the session then has no logits
  // in between, and in the end the same state and logits as the prompt in
  // one evaluation; the decoding session beside it still gets its logits.
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, 14);
  const int64_t nv = m.hparams().n_vocab;
  const auto prompt = random_tokens(nv, 29, 6), a = random_tokens(nv, 5, 7);
  Forward f(m.model(), Numerics::Default, nullptr);
  auto whole = f.make_session(64), pieces = f.make_session(64), sa = f.make_session(64), ra = f.make_session(64);
  f.eval(whole, prompt);
  f.eval(sa, a);
  f.eval(ra, a);
  for (size_t at = 0; at < prompt.size(); at += 10) {
    const size_t n = std::min<size_t>(10, prompt.size() - at);
    const bool last = at + n == prompt.size();
    const int32_t next = argmax(sa.logits());
    const Forward::SessionTokens parts[] = {
        {&sa, std::span<const int32_t>(&next, 1), nullptr},
        {&pieces, std::span<const int32_t>(prompt).subspan(at, n), nullptr, !last}};
    f.eval_batch(parts);
    f.eval(ra, std::span<const int32_t>(&next, 1));
    EXPECT_EQ(pieces.logits().empty(), !last);
    EXPECT_TRUE(std::ranges::equal(sa.logits(), ra.logits()));
  }
  EXPECT_TRUE(std::ranges::equal(pieces.tokens(), whole.tokens()));
  EXPECT_TRUE(std::ranges::equal(pieces.logits(), whole.logits()));
  const int32_t t = 5;
  f.eval(pieces, std::span<const int32_t>(&t, 1));
  f.eval(whole, std::span<const int32_t>(&t, 1));
  EXPECT_TRUE(std::ranges::equal(pieces.logits(), whole.logits()));
}

TEST(ForwardBatch, BadPartLeavesEverySessionUnchanged) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, 13);
  const int64_t nv = m.hparams().n_vocab;
  Forward f(m.model(), Numerics::Default, nullptr);
  auto s1 = f.make_session(16), s2 = f.make_session(16);
  const auto p = random_tokens(nv, 5, 4);
  f.eval(s1, p);
  const Logits before(s1.logits().begin(), s1.logits().end());
  const int32_t good = 3, bad = static_cast<int32_t>(nv);
  const auto unchanged = [&] {
    EXPECT_EQ(s1.size(), 5);
    EXPECT_TRUE(std::ranges::equal(s1.logits(), before));
    EXPECT_EQ(s2.size(), 0);
  };
  {
    const Forward::SessionTokens parts[] = {{&s1, std::span<const int32_t>(&good, 1), nullptr},
                                            {&s2, std::span<const int32_t>(&bad, 1), nullptr}};
    EXPECT_THROW(f.eval_batch(parts), Error);
    unchanged();
  }
  {
    const Forward::SessionTokens parts[] = {{&s1, std::span<const int32_t>(&good, 1), nullptr},
                                            {&s1, std::span<const int32_t>(&good, 1), nullptr}};
    EXPECT_THROW(f.eval_batch(parts), Error);
    unchanged();
  }
  {
    const auto long_prompt = random_tokens(nv, 17, 5);  // over s2's context of 16
    const Forward::SessionTokens parts[] = {{&s1, std::span<const int32_t>(&good, 1), nullptr},
                                            {&s2, long_prompt, nullptr}};
    EXPECT_THROW(f.eval_batch(parts), Error);
    unchanged();
  }
}

}  // namespace
}  // namespace ds4::cpu
