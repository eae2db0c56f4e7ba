// How a continuous-batching step is composed (issue 23): every generating
// session's next token, plus pieces of the prompts still prefilling. The
// pieces are sized from measured step times so that a step beside
// generating sessions takes at most max_decode_stall times a decode-only
// step of as many sessions; the prompt tokens a step may carry go to the
// prompts in admission order (first come, first served: the oldest prompt
// finishes first, and what it leaves of the budget goes to the next ones, so
// short prompts arriving together share one step). Pure bookkeeping: the
// caller times its steps and reports them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ds4::engine {

class StepPlanner {
 public:
  // Prompt tokens per step beside decoding before any such step was timed.
  static constexpr int64_t kFirstPrefillSlice = 16;
  // A decode-only step time older than this many steps is measured again (one
  // step without a prompt piece) before it sizes a piece: the batch changes.
  static constexpr uint64_t kDecodeTimeMaxAge = 64;
  // Weight of the newest step in the step-time averages.
  static constexpr double kStepTimeWeight = 0.25;

  // max_decode_stall >= 1; prefill_chunk >= 1 caps every piece.
  StepPlanner(double max_decode_stall, int64_t prefill_chunk);

  // The decode-only step time that sizes prompt pieces beside `decoders`
  // sessions: that many measured in the last kDecodeTimeMaxAge steps, else
  // the largest smaller count measured as recently (fewer sessions do not
  // step slower, so the pieces err small); 0 when there is none.
  double decode_estimate(size_t decoders) const;
  // Whether prompt pieces may join a step of `decoders` generating
  // sessions: always without decoders, otherwise when decode_estimate() is
  // known (else this step runs without them and measures it).
  bool may_prefill(size_t decoders) const;
  // Prompt tokens a step beside `decoders` sessions may carry: the whole
  // chunk without decoders; kFirstPrefillSlice before any piece beside
  // decoding was timed; else the most tokens whose estimated cost fits in
  // (max_decode_stall - 1) decode-only steps, at least 1, at most the chunk.
  int64_t prefill_budget(size_t decoders) const;
  // The budget shared by the prefilling prompts, `remaining` tokens each
  // (to its next stop), in admission order: each takes what it needs of
  // what is left. Zeros for prompts the budget does not reach.
  std::vector<int64_t> share_prefill(size_t decoders, std::span<const int64_t> remaining) const;
  // A step took `seconds` with `decoders` sessions generating and
  // `prefilled` prompt tokens beside them.
  void learn(double seconds, size_t decoders, int64_t prefilled);

  // The estimates (0 while unknown).
  double decode_step_seconds(size_t decoders) const;
  double prefill_token_seconds() const { return prefill_token_seconds_; }
  uint64_t steps() const { return steps_; }

 private:
  double max_decode_stall_;
  int64_t prefill_chunk_;
  std::vector<double> decode_step_seconds_;       // by number of decoders
  std::vector<uint64_t> decode_step_measured_at_;  // step count when last measured
  double prefill_token_seconds_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace ds4::engine
