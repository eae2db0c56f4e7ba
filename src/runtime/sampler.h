// Next-token choice from a logits vector (PROTOCOL.md §4): temperature,
// min_p, top_p and top_k over an xorshift64* stream, plus the greedy override
// for DSML syntax positions (§3.6), the log-probabilities --dump-logprobs
// prints, and stop-string matching over the generated text.
//
// A sample is a pure function of (logits, params, rng state): the same seed
// and the same logits sequence give the same tokens. Greedy choices (T <= 0 or
// force_greedy) do not advance the RNG; every other sample advances it by
// exactly one draw.
//
// Logits that are NaN or -inf never get picked. If any logit is +inf, the
// distribution's limit is a point mass on the +inf entries: the first one is
// returned (argmax) without a draw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::runtime {

// xorshift64* (shifts 12/25/27, multiplier 0x2545F4914F6CDD1D). A zero seed,
// which would stay zero forever, is replaced by the golden-ratio constant.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  // Top 24 bits of next() (bits 40..63) / 2^24: a float in [0, 1) that is
  // exact, so the draw is the same on every platform.
  float uniform();
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

inline constexpr int kMaxTopK = 1024;

struct SamplingParams {
  float temperature = 1.0f;  // <= 0 -> argmax
  float top_p = 1.0f;        // outside (0,1] -> 1
  float min_p = 0.05f;       // relative to the top token, on temperature-scaled weights; in [0,1]
  int top_k = 0;             // 0 = off, capped at kMaxTopK

  // Thinking mode (HIGH/MAX) ignores the client's knobs: T=1, top_p=1,
  // min_p=0.05, top_k=0.
  static SamplingParams thinking_defaults();
  static SamplingParams greedy();  // T=0
};

// Throws ds4::Error naming the field for NaN/inf values, min_p outside [0,1]
// and negative top_k. Out-of-range top_p and top_k above the cap are not
// errors: the spec maps them to 1 and kMaxTopK.
void validate(const SamplingParams& p);

// First index of the largest logit (NaN entries ignored; 0 if all are NaN).
// Throws ds4::Error on an empty vector.
int32_t argmax(std::span<const float> logits);
// The same over every index but `excluded` (-1 or out of range: none): the
// first index of the largest non-NaN logit, else the first index left; -1
// when no index is left.
int32_t argmax_except(std::span<const float> logits, int32_t excluded);

class Sampler {
 public:
  Sampler(SamplingParams params, uint64_t seed);  // validates params

  int32_t sample(std::span<const float> logits);
  // force_greedy: a DSML syntax position (T=0 regardless of params).
  int32_t sample(std::span<const float> logits, bool force_greedy);

  const SamplingParams& params() const { return params_; }
  Rng& rng() { return rng_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float weight;
  };
  int32_t sample_min_p_only(std::span<const float> logits, float max_logit);
  int32_t sample_top_p(std::span<const float> logits, float max_logit);
  int32_t sample_top_k(std::span<const float> logits, int k, float max_logit);
  // Sorted-descending candidates already cut by min_p and top_p (cumulative
  // mass measured against total_weight): draws one of them.
  int32_t draw_sorted(std::span<const Candidate> sorted, double total_weight);

  SamplingParams params_;
  Rng rng_;
  std::vector<Candidate> scratch_;  // reused between calls: no allocation per token
};

// --dump-logprobs: log-softmax of the raw logits (T=1, no filtering). The k
// best (highest logprob, lower id first on ties; NaN entries excluded),
// k clamped to the vocabulary.
struct TokenLogprob {
  int32_t id;
  float logprob;
};
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k);
// Throws ds4::Error for an id outside the vector.
float logprob_of(std::span<const float> logits, int32_t id);

// Stop strings over the generated text, fed in arbitrary chunks (token
// pieces). Keeps only the last (longest stop - 1) bytes, not the whole text.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);  // empty strings -> ds4::Error

  // Offsets count bytes of the whole text fed so far. match_at: start of the
  // earliest complete match of any stop string. hold_back: trailing bytes the
  // caller must not stream yet: with a match, everything from match_at on;
  // without, the longest suffix that is a proper prefix of some stop string.
  struct Result {
    std::optional<size_t> match_at;
    size_t hold_back;
  };
  // Appends bytes. Once a match was found, later calls report the same match.
  Result feed(std::string_view bytes);

  size_t text_size() const { return total_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string tail_;   // last max_len_-1 bytes of the text (fewer at the start)
  size_t total_ = 0;   // bytes fed so far
  std::optional<size_t> match_;
};

}  // namespace ds4::runtime
