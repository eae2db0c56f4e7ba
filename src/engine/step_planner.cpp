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

double StepPlanner::decode_estimate(size_t decoders) const {
  if (decode_step_seconds_.empty()) return 0.0;
  for (size_t d = std::min(decoders, decode_step_seconds_.size() - 1); d >= 1; --d)
    if (decode_step_seconds_[d] > 0 && steps_ - decode_step_measured_at_[d] <= kDecodeTimeMaxAge)
      return decode_step_seconds_[d];
  return 0.0;
}

bool StepPlanner::may_prefill(size_t decoders) const { return decoders == 0 || decode_estimate(decoders) > 0; }

int64_t StepPlanner::prefill_budget(size_t decoders) const {
  if (decoders == 0) return prefill_chunk_;
  if (prefill_token_seconds_ <= 0) return std::min(prefill_chunk_, kFirstPrefillSlice);
  // A decode-only step plus n prompt tokens at their estimated cost stays
  // within max_decode_stall decode-only steps.
  const double room = (max_decode_stall_ - 1.0) * decode_estimate(decoders);
  const double n = room / prefill_token_seconds_;
  if (!(n >= 1.0)) return 1;
  return n >= static_cast<double>(prefill_chunk_) ? prefill_chunk_ : static_cast<int64_t>(n);
}

std::vector<int64_t> StepPlanner::share_prefill(size_t decoders, std::span<const int64_t> remaining) const {
  std::vector<int64_t> pieces(remaining.size(), 0);
  if (!may_prefill(decoders)) return pieces;
  int64_t left = prefill_budget(decoders);
  for (size_t i = 0; i < remaining.size() && left > 0; ++i) {
    pieces[i] = std::clamp<int64_t>(remaining[i], 0, left);
    left -= pieces[i];
  }
  return pieces;
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
    const double base = decoders > 0 ? decode_estimate(decoders) : 0.0;
    const double per_token = std::max(seconds - base, 0.0) / static_cast<double>(prefilled);
    prefill_token_seconds_ = moving_average(prefill_token_seconds_, per_token);
  }
}

}  // namespace ds4::engine
