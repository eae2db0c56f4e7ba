#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"

namespace ds4::runtime {

namespace {

constexpr uint64_t kGoldenRatio = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kXorshiftMultiplier = 0x2545F4914F6CDD1Dull;

// expf of anything below this is exactly 0 (the smallest subnormal is
// e^-103.3), so such tokens can be skipped without changing any sum.
constexpr float kZeroWeightExponent = -110.0f;

bool usable(float logit) { return !std::isnan(logit) && logit != -std::numeric_limits<float>::infinity(); }

// Largest non-NaN logit (-inf when there is none). Eight independent lanes
// so the compiler can keep them in vector registers.
float max_logit(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  const size_t n = logits.size();
  const float* p = logits.data();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] = p[i + j] > lane[j] ? p[i + j] : lane[j];  // NaN never wins
  }
  for (; i < n; ++i) lane[0] = p[i] > lane[0] ? p[i] : lane[0];
  float m = lane[0];
  for (size_t j = 1; j < kLanes; ++j) m = lane[j] > m ? lane[j] : m;
  return m;
}

// A logit below the returned value has (l - max) / t < x_min, whatever the
// float rounding of that expression: the bound is taken 1e-3 lower in x (far
// more than the rounding of l - max, the division, expf or logf can move it)
// and rounded down to a float. Lets a pass test one comparison per token and
// leave the exact test to the few that pass.
float screen_threshold(float max, float t, float x_min) {
  const double bound = static_cast<double>(max) + static_cast<double>(t) * (static_cast<double>(x_min) - 1e-3);
  if (bound < -static_cast<double>(std::numeric_limits<float>::max())) return -std::numeric_limits<float>::infinity();
  float f = static_cast<float>(bound);
  if (static_cast<double>(f) > bound) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// "a ranks before b": higher logit, then lower id. A total order, so every
// selection and sort below is deterministic.
template <typename T>
bool ranks_before(const T& a, const T& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The k best usable entries (logit descending, id ascending on ties), written
// to out. A bounded heap whose front is the worst kept entry: one pass, and
// for random-order logits only O(k log(n/k)) replacements.
template <typename T>
void select_top(std::span<const float> logits, size_t k, std::vector<T>& out) {
  out.clear();
  if (k == 0) return;
  out.reserve(k);
  auto cmp = [](const T& a, const T& b) { return ranks_before(a, b); };
  size_t i = 0;
  for (; i < logits.size() && out.size() < k; ++i) {
    if (!usable(logits[i])) continue;
    T c{};
    c.id = static_cast<int32_t>(i);
    c.logit = logits[i];
    out.push_back(c);
    std::push_heap(out.begin(), out.end(), cmp);
  }
  // Full heap: a later entry gets in only with a logit above the worst kept
  // one (equal loses: its id is higher). The comparison also drops NaN, and
  // -inf can never beat a usable entry.
  float worst = out.empty() ? 0.0f : out.front().logit;
  for (; i < logits.size(); ++i) {
    const float v = logits[i];
    if (!(v > worst)) continue;
    std::pop_heap(out.begin(), out.end(), cmp);
    out.back().id = static_cast<int32_t>(i);
    out.back().logit = v;
    std::push_heap(out.begin(), out.end(), cmp);
    worst = out.front().logit;
  }
  std::sort_heap(out.begin(), out.end(), cmp);  // best first
}

std::string field_error(const char* field, const std::string& what) {
  return std::string("sampling parameter ") + field + " " + what;
}

// log Σ exp(l_i) over the non-NaN logits, in double. Requires a finite max.
double log_sum_exp(std::span<const float> logits, float max) {
  double sum = 0.0;
  for (float v : logits) {
    if (!usable(v)) continue;
    sum += std::exp(static_cast<double>(v) - static_cast<double>(max));
  }
  return static_cast<double>(max) + std::log(sum);
}

float logprob_given(float logit, float max, double lse) {
  if (std::isnan(logit)) return std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(max)) {
    // Degenerate softmax: with +inf entries all mass sits on them (counted by
    // the caller through lse = log(count)); with none usable nothing has mass.
    if (max > 0 && logit == max) return static_cast<float>(-lse);
    return -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(static_cast<double>(logit) - lse);
}

// lse for logprob_given: the usual one, or log(count of +inf) when max is +inf.
double normaliser(std::span<const float> logits, float max) {
  if (std::isinf(max)) {
    if (max < 0) return 0.0;
    double n = 0;
    for (float v : logits) n += (v == max) ? 1 : 0;
    return std::log(n);
  }
  return log_sum_exp(logits, max);
}

}  // namespace

// ---- Rng ------------------------------------------------------------------

Rng::Rng(uint64_t seed) : state_(seed == 0 ? kGoldenRatio : seed) {}

uint64_t Rng::next() {
  uint64_t x = state_;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  state_ = x;
  return x * kXorshiftMultiplier;
}

float Rng::uniform() { return static_cast<float>(next() >> 40) / 16777216.0f; }

// ---- parameters ------------------------------------------------------------

SamplingParams SamplingParams::thinking_defaults() { return SamplingParams{1.0f, 1.0f, 0.05f, 0}; }

SamplingParams SamplingParams::greedy() { return SamplingParams{0.0f, 1.0f, 0.05f, 0}; }

void validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature)) throw Error(field_error("temperature", "is not finite"));
  if (!std::isfinite(p.top_p)) throw Error(field_error("top_p", "is not finite"));
  if (!std::isfinite(p.min_p)) throw Error(field_error("min_p", "is not finite"));
  if (p.min_p < 0.0f || p.min_p > 1.0f) {
    throw Error(field_error("min_p", "must be in [0, 1], got " + std::to_string(p.min_p)));
  }
  if (p.top_k < 0) throw Error(field_error("top_k", "must be >= 0, got " + std::to_string(p.top_k)));
}

namespace {

struct Best {
  float value = -std::numeric_limits<float>::infinity();
  int64_t index = -1;  // -1: no non-NaN entry seen
  // Keeps the larger value, the lower index on ties.
  void take(float v, int64_t i) {
    if (index < 0 || v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
};

// The largest non-NaN entry of x[begin, end), lowest index on ties. Eight
// lanes, each the first maximum of its own entries, so the compares do not
// form one chain through the whole vocabulary (a decode step's greedy pick).
Best best_in(const float* x, int64_t begin, int64_t end) {
  constexpr int kLanes = 8;
  Best lane[kLanes];
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float v = x[i + l];
      if (v > lane[l].value || (lane[l].index < 0 && !std::isnan(v))) {
        lane[l].value = v;
        lane[l].index = i + l;
      }
    }
  }
  Best best;
  for (const Best& b : lane)
    if (b.index >= 0) best.take(b.value, b.index);
  for (; i < end; ++i)
    if (!std::isnan(x[i])) best.take(x[i], i);
  return best;
}

}  // namespace

int32_t argmax_except(std::span<const float> logits, int32_t excluded) {
  const auto n = static_cast<int64_t>(logits.size());
  const bool skip = excluded >= 0 && excluded < n;
  Best best = best_in(logits.data(), 0, skip ? excluded : n);
  if (skip) {
    const Best after = best_in(logits.data(), excluded + 1, n);
    if (after.index >= 0) best.take(after.value, after.index);
  }
  if (best.index >= 0) return static_cast<int32_t>(best.index);
  if (!skip || excluded > 0) return n > 0 ? 0 : -1;
  return n > 1 ? 1 : -1;
}

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw Error("argmax of an empty logits vector");
  return argmax_except(logits, -1);
}

// ---- Sampler ---------------------------------------------------------------

Sampler::Sampler(SamplingParams params, uint64_t seed) : params_(params), rng_(seed) { validate(params_); }

int32_t Sampler::sample(std::span<const float> logits) { return sample(logits, false); }

int32_t Sampler::sample(std::span<const float> logits, bool force_greedy) {
  if (logits.empty()) throw Error("sample from an empty logits vector");
  if (force_greedy || params_.temperature <= 0.0f) return argmax(logits);
  const float max = max_logit(logits);
  // +inf: the softmax limit is a point mass; nothing usable: no distribution.
  if (!std::isfinite(max)) return argmax(logits);

  const size_t k = std::min<size_t>(static_cast<size_t>(std::min(params_.top_k, kMaxTopK)), logits.size());
  if (k > 0) return sample_top_k(logits, static_cast<int>(k), max);
  const bool top_p_off = !(params_.top_p > 0.0f && params_.top_p < 1.0f);
  if (top_p_off) return sample_min_p_only(logits, max);
  return sample_top_p(logits, max);
}

// top_k=0, top_p=1: one pass keeps the tokens with w >= min_p (in id order)
// and one draw scans them. A comparison against a conservative logit bound
// screens the vocabulary, so only the few tokens near the top pay for a
// division and an expf; the exact test is still w >= min_p.
int32_t Sampler::sample_min_p_only(std::span<const float> logits, float max) {
  const float t = params_.temperature;
  const float min_p = params_.min_p;
  const float x_min = min_p > 0.0f ? std::max(std::log(min_p), kZeroWeightExponent) : kZeroWeightExponent;
  const float bound = screen_threshold(max, t, x_min);
  scratch_.clear();
  double sum = 0.0;
  const float* p = logits.data();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!(p[i] >= bound)) continue;  // also drops NaN
    const float w = std::exp((p[i] - max) / t);
    if (w < min_p || w <= 0.0f) continue;  // w == 0 for -inf
    scratch_.push_back({static_cast<int32_t>(i), p[i], w});
    sum += w;
  }
  // The top token always survives (w = 1 >= min_p), so sum > 0.
  double r = static_cast<double>(rng_.uniform()) * sum;
  for (const Candidate& c : scratch_) {
    if (r < c.weight) return c.id;
    r -= c.weight;
  }
  return scratch_.back().id;  // rounding left r at the very end of the range
}

// top_p < 1, top_k = 0: the nucleus is measured against the mass of the whole
// vocabulary, but only min_p survivors can be in it, so only they are sorted.
int32_t Sampler::sample_top_p(std::span<const float> logits, float max) {
  const float t = params_.temperature;
  const float min_p = params_.min_p;
  scratch_.clear();
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = (logits[i] - max) / t;
    if (!(x >= kZeroWeightExponent)) continue;
    const float w = std::exp(x);
    total += w;
    if (w >= min_p && w > 0.0f) scratch_.push_back({static_cast<int32_t>(i), logits[i], w});
  }
  std::sort(scratch_.begin(), scratch_.end(), [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); });
  return draw_sorted(scratch_, total);
}

// top_k > 0: the same filters over the k best tokens only; their weights are
// relative to the best of them and the nucleus to their own mass.
int32_t Sampler::sample_top_k(std::span<const float> logits, int k, float max) {
  const float t = params_.temperature;
  const bool top_p_on = params_.top_p > 0.0f && params_.top_p < 1.0f;
  if (top_p_on) {
    select_top(logits, static_cast<size_t>(k), scratch_);
  } else {
    // Without a nucleus the mass of the k best does not matter, only which of
    // them pass min_p; those are the best of the min_p survivors, so screen
    // first and rank the few that pass.
    const float min_p = params_.min_p;
    const float x_min = min_p > 0.0f ? std::max(std::log(min_p), kZeroWeightExponent) : kZeroWeightExponent;
    const float bound = screen_threshold(max, t, x_min);
    scratch_.clear();
    const float* p = logits.data();
    for (size_t i = 0; i < logits.size(); ++i) {
      if (p[i] >= bound) scratch_.push_back({static_cast<int32_t>(i), p[i], 0.0f});  // NaN fails
    }
    auto better = [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); };
    const size_t keep = std::min(scratch_.size(), static_cast<size_t>(k));
    std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(keep), scratch_.end(), better);
    scratch_.resize(keep);
  }
  double total = 0.0;
  for (Candidate& c : scratch_) {
    c.weight = std::exp((c.logit - max) / t);
    total += c.weight;
  }
  // min_p relative to the top token (weight 1): drop the tail below it.
  size_t kept = 1;
  while (kept < scratch_.size() && scratch_[kept].weight >= params_.min_p && scratch_[kept].weight > 0.0f) ++kept;
  return draw_sorted(std::span<const Candidate>(scratch_.data(), kept), total);
}

int32_t Sampler::draw_sorted(std::span<const Candidate> sorted, double total_weight) {
  const bool top_p_on = params_.top_p > 0.0f && params_.top_p < 1.0f;
  size_t kept = 0;
  double mass = 0.0;
  for (const Candidate& c : sorted) {
    mass += c.weight;
    ++kept;
    if (top_p_on && mass / total_weight >= static_cast<double>(params_.top_p)) break;  // inclusive
  }
  double r = static_cast<double>(rng_.uniform()) * mass;
  for (size_t i = 0; i < kept; ++i) {
    if (r < sorted[i].weight) return sorted[i].id;
    r -= sorted[i].weight;
  }
  return sorted[kept - 1].id;
}

// ---- log-probabilities -----------------------------------------------------

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k) {
  std::vector<TokenLogprob> out;
  if (k <= 0 || logits.empty()) return out;
  struct Ranked {
    int32_t id;
    float logit;
  };
  // Ranking keeps +inf entries (usable() only drops NaN and -inf); -inf ones
  // come after every other entry, so add them back if k asks for that many.
  std::vector<Ranked> best;
  select_top(logits, std::min(static_cast<size_t>(k), logits.size()), best);
  for (size_t i = 0; i < logits.size() && best.size() < static_cast<size_t>(k); ++i) {
    if (logits[i] == -std::numeric_limits<float>::infinity()) best.push_back({static_cast<int32_t>(i), logits[i]});
  }
  const float max = max_logit(logits);
  const double lse = normaliser(logits, max);
  out.reserve(best.size());
  for (const Ranked& r : best) out.push_back({r.id, logprob_given(r.logit, max, lse)});
  return out;
}

float logprob_of(std::span<const float> logits, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= logits.size()) {
    throw Error("logprob_of: token id " + std::to_string(id) + " outside a vocabulary of " +
                std::to_string(logits.size()));
  }
  const float max = max_logit(logits);
  return logprob_given(logits[static_cast<size_t>(id)], max, normaliser(logits, max));
}

// ---- stop strings ----------------------------------------------------------

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) throw Error("stop string " + std::to_string(i) + " is empty");
    max_len_ = std::max(max_len_, stops_[i].size());
  }
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view bytes) {
  if (match_) {
    total_ += bytes.size();
    return {match_, total_ - *match_};
  }
  // The kept tail is too short to hold a whole stop string, so any match in
  // tail + bytes is new; matches reaching back across the chunk boundary are
  // found because the tail is long enough for all but one byte of any stop.
  std::string region = tail_;
  region.append(bytes);
  const size_t region_start = total_ - tail_.size();
  total_ += bytes.size();

  size_t earliest = std::string::npos;
  for (const std::string& s : stops_) earliest = std::min(earliest, region.find(s));
  if (earliest != std::string::npos) {
    match_ = region_start + earliest;
    tail_.clear();
    return {match_, total_ - *match_};
  }

  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, region.size()); len > hold; --len) {
      if (region.compare(region.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  const size_t keep = max_len_ == 0 ? 0 : std::min(region.size(), max_len_ - 1);
  tail_.assign(region, region.size() - keep, keep);
  return {std::nullopt, hold};
}

}  // namespace ds4::runtime
