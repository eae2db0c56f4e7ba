// How a continuous-batching step is composed (issue 23): every generating
// session's next token, plus a piece of one prompt still prefilling. The
// piece is sized from measured step times so that a step beside generating
// sessions takes at most max_decode_stall times a decode-only step of as
// many sessions; prompts take turns, one piece each, in admission order.
// Pure bookkeeping: the caller times its steps and reports them.
#pragma once

#include <cstddef>
#include <cstdint>
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

  // Whether a prompt piece may join a step of `decoders` generating
  // sessions: always without decoders; otherwise once a decode-only step of
  // that many is known from the last kDecodeTimeMaxAge steps (else this step
  // runs without a piece and measures it).
  bool may_prefill(size_t decoders) const;
  // Prompt tokens the piece may hold beside `decoders` sessions: the whole
  // chunk without decoders; kFirstPrefillSlice before any piece beside
  // decoding was timed; else the most tokens whose estimated cost fits in
  // (max_decode_stall - 1) decode-only steps, at least 1, at most the chunk.
  int64_t prefill_budget(size_t decoders) const;
  // Which of `waiting` (>= 1) prefilling prompts, in admission order, gets
  // this step's piece.
  size_t next_turn(size_t waiting);
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
  size_t turn_ = 0;
};

}  // namespace ds4::engine
