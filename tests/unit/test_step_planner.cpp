// The continuous-batching step planner (engine/step_planner.h, issue 23):
// the prompt tokens beside generating sessions are bounded so that a step
// stays within max_decode_stall decode-only steps, from measured step
// times; a batch size not measured lately borrows the nearest smaller one's
// time, and with none the step measures; prompts share the budget first
// come, first served. The truths are the stall bound's arithmetic on chosen
// step times and the admission order.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/step_planner.h"

namespace ds4::engine {
namespace {

TEST(StepPlanner, WithoutDecodersAPromptGetsWholeChunks) {
  StepPlanner p(2.0, 512);
  EXPECT_TRUE(p.may_prefill(0));
  EXPECT_EQ(p.prefill_budget(0), 512);
  p.learn(3.0, 0, 512);  // timing a solo chunk changes nothing about that
  EXPECT_EQ(p.prefill_budget(0), 512);
}

TEST(StepPlanner, BesideDecodersTheFirstStepMeasuresThenASmallSliceIsTimed) {
  StepPlanner p(2.0, 512);
  EXPECT_FALSE(p.may_prefill(3));  // no decode-only step of 3 timed yet
  p.learn(0.100, 3, 0);
  EXPECT_TRUE(p.may_prefill(3));
  EXPECT_FALSE(p.may_prefill(2));  // each batch size is measured on its own
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(3), 0.100);
  EXPECT_EQ(p.prefill_budget(3), StepPlanner::kFirstPrefillSlice);
}

TEST(StepPlanner, ThePieceFitsTheStallBound) {
  // Decode-only steps of 4 sessions take 2^-4 s; a step with 16 prompt
  // tokens beside them took 2^-4 + 16 x 2^-9 s: one token costs 2^-9 s
  // (binary fractions: the arithmetic is exact).
  StepPlanner p(2.0, 4096);
  p.learn(0.0625, 4, 0);
  p.learn(0.0625 + 16 * 0.001953125, 4, 16);
  EXPECT_DOUBLE_EQ(p.prefill_token_seconds(), 0.001953125);
  // (2 - 1) x 2^-4 s of room / 2^-9 s = 32 tokens.
  EXPECT_EQ(p.prefill_budget(4), 32);
  const double step = p.decode_step_seconds(4) + 32 * p.prefill_token_seconds();
  EXPECT_LE(step, 2.0 * p.decode_step_seconds(4) + 1e-12);

  StepPlanner loose(4.0, 4096);
  loose.learn(0.0625, 4, 0);
  loose.learn(0.0625 + 16 * 0.001953125, 4, 16);
  EXPECT_EQ(loose.prefill_budget(4), 96);  // 3 x 2^-4 / 2^-9

  StepPlanner capped(1000.0, 64);
  capped.learn(0.0625, 4, 0);
  capped.learn(0.0625 + 16 * 0.001953125, 4, 16);
  EXPECT_EQ(capped.prefill_budget(4), 64);  // never more than a chunk

  StepPlanner strict(1.0, 4096);
  strict.learn(0.0625, 4, 0);
  strict.learn(0.0625 + 16 * 0.001953125, 4, 16);
  EXPECT_EQ(strict.prefill_budget(4), 1);  // no room: still one token a step
}

TEST(StepPlanner, TimesAreMovingAverages) {
  StepPlanner p(2.0, 4096);
  p.learn(0.100, 1, 0);
  p.learn(0.200, 1, 0);
  EXPECT_DOUBLE_EQ(p.decode_step_seconds(1), 0.100 + StepPlanner::kStepTimeWeight * 0.100);
}

TEST(StepPlanner, AStaleDecodeTimeIsMeasuredAgain) {
  StepPlanner p(2.0, 4096);
  p.learn(0.050, 2, 0);
  // Known for kDecodeTimeMaxAge steps after the one that measured it.
  for (uint64_t i = 0; i <= StepPlanner::kDecodeTimeMaxAge; ++i) {
    EXPECT_TRUE(p.may_prefill(2)) << i;
    p.learn(0.060, 2, 8);
  }
  EXPECT_FALSE(p.may_prefill(2));
  p.learn(0.050, 2, 0);
  EXPECT_TRUE(p.may_prefill(2));
}

TEST(StepPlanner, AnUnmeasuredBatchSizeBorrowsTheNearestSmallerOne) {
  StepPlanner p(2.0, 4096);
  p.learn(0.0625, 2, 0);
  p.learn(0.125, 5, 0);
  EXPECT_DOUBLE_EQ(p.decode_estimate(2), 0.0625);
  EXPECT_DOUBLE_EQ(p.decode_estimate(4), 0.0625);  // 3 and 4 unmeasured: 2's time
  EXPECT_DOUBLE_EQ(p.decode_estimate(9), 0.125);   // beyond the largest: 5's time
  EXPECT_DOUBLE_EQ(p.decode_estimate(1), 0.0);     // nothing smaller: measure
  EXPECT_FALSE(p.may_prefill(1));
  EXPECT_TRUE(p.may_prefill(4));
  // The piece beside 4 sessions is sized from 2's (shorter) step: it errs small.
  p.learn(0.0625 + 16 * 0.001953125, 2, 16);
  EXPECT_EQ(p.prefill_budget(4), 32);
}

TEST(StepPlanner, PromptsShareTheBudgetFirstComeFirstServed) {
  StepPlanner p(2.0, 100);
  // No decoders: a whole chunk of prompt tokens, oldest prompt first.
  const std::vector<int64_t> remaining = {30, 50, 40, 10};
  EXPECT_EQ(p.share_prefill(0, remaining), (std::vector<int64_t>{30, 50, 20, 0}));
  EXPECT_EQ(p.share_prefill(0, std::vector<int64_t>{250, 5}), (std::vector<int64_t>{100, 0}));
  // Beside decoders: nothing until their step time is known, then the budget.
  EXPECT_EQ(p.share_prefill(3, remaining), (std::vector<int64_t>{0, 0, 0, 0}));
  p.learn(0.0625, 3, 0);
  EXPECT_EQ(p.share_prefill(3, remaining), (std::vector<int64_t>{StepPlanner::kFirstPrefillSlice, 0, 0, 0}));
  p.learn(0.0625 + 16 * 0.001953125, 3, 16);  // budget 32
  EXPECT_EQ(p.share_prefill(3, remaining), (std::vector<int64_t>{30, 2, 0, 0}));
  EXPECT_TRUE(p.share_prefill(3, {}).empty());
}

TEST(StepPlanner, BadSettingsAreRefused) {
  EXPECT_THROW(StepPlanner(0.5, 16), Error);
  EXPECT_THROW(StepPlanner(std::nan(""), 16), Error);
  EXPECT_THROW(StepPlanner(2.0, 0), Error);
}

}  // namespace
}  // namespace ds4::engine
