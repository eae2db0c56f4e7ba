// Engine::submit (issue 23): jobs queued to the engine's scheduler and run
// together, one batched evaluation per step. Truth: each job's prompt and
// greedy path on an independent CPU forward pass over the same file, alone;
// submitted jobs must give the same tokens and leave their sessions with the
// same logits bit for bit, whatever ran beside them, and a cancelled or
// failed job must leave its session as it was and the others untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/deepseek4_hparams.h"
#include "runtime/sampler.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"

namespace ds4::engine {
namespace {

const test::SyntheticModel& synthetic() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 43);
  return m;
}

EngineOptions options(int max_jobs) {
  EngineOptions o;
  o.model_path = synthetic().path();
  o.threads = 2;
  o.prefill_chunk = 16;
  o.max_jobs = max_jobs;
  return o;
}

runtime::Sampler greedy() {
  runtime::SamplingParams p;
  p.temperature = 0;
  return runtime::Sampler(p, 1);
}

runtime::GenerateLimits limits(int n) {
  runtime::GenerateLimits l;
  l.max_tokens = n;
  l.ignore_eos = true;  // every job runs its full length
  return l;
}

struct Truth {
  std::vector<int32_t> tokens;  // the greedy ids
  std::vector<float> logits;    // the session's logits at the end
};

// `n` greedy ids after `prompt`, each but the last evaluated (as a
// generation that stops at max tokens leaves it).
Truth greedy_truth(const std::vector<int32_t>& prompt, int n) {
  cpu::Forward f(synthetic().model(), backend::Numerics::Default, nullptr);
  f.set_prefill_chunk(16);
  auto s = f.make_session(256);
  f.eval(s, prompt);
  Truth t;
  t.tokens = f.generate_greedy(s, n);
  t.logits.assign(s.logits().begin(), s.logits().end());
  return t;
}

std::vector<int32_t> prompt_of(int n, uint64_t seed) {
  return test::random_tokens(synthetic().hparams().n_vocab, n, seed);
}

TEST(EngineSubmit, JobsRunTogetherAsEachAlone) {
  Engine e(options(4));
  // Prompts of different lengths (one over several prefill chunks), and more
  // jobs than run at once: the fifth waits for a place.
  const std::vector<int> lengths = {9, 40, 3, 23, 17};
  const std::vector<int> replies = {10, 6, 14, 8, 5};
  std::vector<std::unique_ptr<backend::Session>> sessions;
  std::vector<runtime::Sampler> samplers;
  std::vector<std::shared_ptr<JobHandle>> jobs;
  std::vector<std::vector<int32_t>> streamed(lengths.size());
  std::vector<int> done_calls(lengths.size(), 0);
  std::vector<runtime::GenerateLimits> lims;
  for (size_t i = 0; i < lengths.size(); ++i) {
    sessions.push_back(e.new_session(256));
    samplers.push_back(greedy());
    lims.push_back(limits(replies[i]));
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    JobCallbacks cb;
    cb.on_token = [&streamed, i](int32_t id, std::string_view) {
      streamed[i].push_back(id);
      return runtime::StopReason::None;
    };
    cb.done = [&done_calls, i](const runtime::GenerateResult&) { ++done_calls[i]; };
    jobs.push_back(e.submit(*sessions[i], prompt_of(lengths[i], 100 + i), samplers[i], lims[i], std::move(cb)));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const runtime::GenerateResult r = jobs[i]->wait();
    const Truth want = greedy_truth(prompt_of(lengths[i], 100 + i), replies[i]);
    EXPECT_EQ(r.reason, runtime::StopReason::MaxTokens) << "job " << i;
    EXPECT_EQ(r.tokens, want.tokens) << "job " << i;
    EXPECT_EQ(streamed[i], want.tokens) << "job " << i;
    EXPECT_EQ(done_calls[i], 1);
    EXPECT_TRUE(std::ranges::equal(sessions[i]->logits(), want.logits)) << "job " << i << ": final logits";
    EXPECT_TRUE(jobs[i]->done());
  }
}

TEST(EngineSubmit, ACancelledPrefillPutsItsSessionBackAndSparesTheOthers) {
  Engine e(options(4));
  auto busy = e.new_session(256);
  auto victim = e.new_session(256);
  const std::vector<int32_t> head = prompt_of(6, 7);
  e.prefill(*victim, head);
  const std::vector<float> before(victim->logits().begin(), victim->logits().end());

  runtime::Sampler s1 = greedy(), s2 = greedy();
  const runtime::GenerateLimits l1 = limits(12), l2 = limits(4);
  auto other = e.submit(*busy, prompt_of(11, 8), s1, l1);
  JobCallbacks cb;
  int progress_calls = 0;
  cb.progress = [&](int64_t, int64_t) { return ++progress_calls < 2; };  // stops after its second piece
  bool done_cancelled = false;
  cb.done = [&](const runtime::GenerateResult& r) { done_cancelled = r.reason == runtime::StopReason::Cancelled; };
  auto job = e.submit(*victim, prompt_of(120, 9), s2, l2, std::move(cb));
  const runtime::GenerateResult r = job->wait();
  EXPECT_EQ(r.reason, runtime::StopReason::Cancelled);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_TRUE(done_cancelled);
  EXPECT_GE(progress_calls, 2);
  EXPECT_TRUE(victim->consistent());
  EXPECT_EQ(victim->size(), 6);
  EXPECT_TRUE(std::ranges::equal(victim->logits(), before));

  EXPECT_EQ(other->wait().tokens, greedy_truth(prompt_of(11, 8), 12).tokens);
}

TEST(EngineSubmit, BadJobsFailAloneAndCancelStopsAGeneration) {
  Engine e(options(2));
  auto a = e.new_session(256);
  auto b = e.new_session(256);
  auto c = e.new_session(32);
  runtime::Sampler sa = greedy(), sb = greedy(), sc = greedy(), sd = greedy();
  const runtime::GenerateLimits la = limits(200), lb = limits(5), lc = limits(5), ld = limits(200);

  std::vector<int32_t> bad = prompt_of(5, 10);
  bad[2] = static_cast<int32_t>(synthetic().hparams().n_vocab);  // outside the vocabulary
  auto bad_job = e.submit(*b, bad, sb, lb);
  try {
    bad_job->wait();
    ADD_FAILURE() << "a token outside the vocabulary ran";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("prefill failed"), std::string::npos) << err.what();
  }
  EXPECT_EQ(b->size(), 0) << "a failed prefill leaves its session as it was";
  EXPECT_TRUE(b->consistent());

  auto overflow = e.submit(*c, prompt_of(40, 11), sc, lc);
  try {
    overflow->wait();
    ADD_FAILURE() << "a prompt over the session's context ran";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("context"), std::string::npos) << err.what();
  }

  // Cancel from the submitting thread once three tokens are out.
  std::atomic<int> seen{0};
  JobCallbacks cb;
  cb.on_token = [&](int32_t, std::string_view) {
    ++seen;
    return runtime::StopReason::None;
  };
  auto job = e.submit(*a, prompt_of(8, 12), sa, la, std::move(cb));
  while (seen.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  job->cancel();
  const runtime::GenerateResult r = job->wait();
  EXPECT_EQ(r.reason, runtime::StopReason::Cancelled);
  EXPECT_GE(r.tokens.size(), 3u);
  EXPECT_LT(r.tokens.size(), 200u);

  // The callbacks' own cancel: polled before every token.
  auto d = e.new_session(256);
  int tokens = 0;
  JobCallbacks cd;
  cd.on_token = [&](int32_t, std::string_view) {
    ++tokens;
    return runtime::StopReason::None;
  };
  cd.cancelled = [&] { return tokens >= 4; };
  const runtime::GenerateResult rd = e.submit(*d, prompt_of(8, 13), sd, ld, std::move(cd))->wait();
  EXPECT_EQ(rd.reason, runtime::StopReason::Cancelled);
  EXPECT_EQ(rd.tokens.size(), 4u);
}

}  // namespace
}  // namespace ds4::engine
