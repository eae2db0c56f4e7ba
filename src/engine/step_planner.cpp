#include "engine/step_planner.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ds4::engine {

namespace {

double moving_average(double average, double sample) {
  return average <= 0 ? sample : average + StepPlanner::kStepTimeWeight * (sample - average);
}

}  // namespace

StepPlanner::StepPlanner(double max_decode_stall, int64_t prefill_chunk)
    : max_decode_stall_(max_decode_stall), prefill_chunk_(prefill_chunk) {
  if (!(max_decode_stall >= 1.0))
    throw Error("the decode stall bound " + std::to_string(max_decode_stall) + " must be at least 1");
  if (prefill_chunk < 1) throw Error("prefill chunk " + std::to_string(prefill_chunk) + " must be at least 1");
}

double StepPlanner::decode_step_seconds(size_t decoders) const {
  return decoders < decode_step_seconds_.size() ? decode_step_seconds_[decoders] : 0.0;
}

bool StepPlanner::may_prefill(size_t decoders) const {
  if (decoders == 0) return true;
  return decode_step_seconds(decoders) > 0 && steps_ - decode_step_measured_at_[decoders] <= kDecodeTimeMaxAge;
}

int64_t StepPlanner::prefill_budget(size_t decoders) const {
  if (decoders == 0) return prefill_chunk_;
  if (prefill_token_seconds_ <= 0) return std::min(prefill_chunk_, kFirstPrefillSlice);
  // A decode-only step plus n prompt tokens at their estimated cost stays
  // within max_decode_stall decode-only steps.
  const double room = (max_decode_stall_ - 1.0) * decode_step_seconds(decoders);
  const double n = room / prefill_token_seconds_;
  if (!(n >= 1.0)) return 1;
  return n >= static_cast<double>(prefill_chunk_) ? prefill_chunk_ : static_cast<int64_t>(n);
}

size_t StepPlanner::next_turn(size_t waiting) {
  if (waiting == 0) throw Error("step planner: no prompt waits for a turn");
  return turn_++ % waiting;
}

void StepPlanner::learn(double seconds, size_t decoders, int64_t prefilled) {
  ++steps_;
  if (decode_step_seconds_.size() <= decoders) {
    decode_step_seconds_.resize(decoders + 1, 0.0);
    decode_step_measured_at_.resize(decoders + 1, 0);
  }
  if (prefilled == 0) {
    decode_step_seconds_[decoders] = moving_average(decode_step_seconds_[decoders], seconds);
    decode_step_measured_at_[decoders] = steps_;
  } else {
    // Beside decoding, what the step took beyond a decode-only step of as
    // many sessions (the next piece is sized for exactly that).
    const double base = decode_step_seconds(decoders);
    const double per_token = std::max(seconds - base, 0.0) / static_cast<double>(prefilled);
    prefill_token_seconds_ = moving_average(prefill_token_seconds_, per_token);
  }
}

}  // namespace ds4::engine
