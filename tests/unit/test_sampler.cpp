// The sampler (PROTOCOL.md §4) against hand-derived answers: the xorshift64*
// stream for seeds 0 and 1 (computed independently with Python integers and
// recorded here), kept sets of min_p / top_k / top_p worked out by hand on tiny
// logits vectors, a chi-square check of the empirical frequencies against the
// filtered and renormalised softmax computed here in double, and the stop-string
// matcher against a plain find over the whole text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/stop_reason.h"

namespace ds4::runtime {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- Rng -------------------------------------------------------------------

// Python: x ^= x>>12; x ^= (x<<25) & M; x ^= x>>27; out = (x*0x2545F4914F6CDD1D) & M,
// starting from 0x9E3779B97F4A7C15 for seed 0.
TEST(Rng, SeedZeroUsesGoldenRatioConstant) {
  Rng rng(0);
  EXPECT_EQ(rng.state(), 0x9E3779B97F4A7C15ull);
  EXPECT_EQ(rng.next(), 0x0d83b3e29a21487aull);
  EXPECT_EQ(rng.next(), 0x54c44c79f1fe9d67ull);
  EXPECT_EQ(rng.next(), 0xa845f342007a0e78ull);
  EXPECT_EQ(rng.next(), 0x7d6e0b878a794779ull);
  EXPECT_EQ(rng.state(), 0xb334115d4185b10dull);
}

TEST(Rng, SeedOneSequence) {
  Rng rng(1);
  EXPECT_EQ(rng.state(), 1u);
  EXPECT_EQ(rng.next(), 0x47e4ce4b896cdd1dull);
  EXPECT_EQ(rng.next(), 0xabcfa6a8e079651dull);
  EXPECT_EQ(rng.next(), 0xb9d10d8feb731f57ull);
  EXPECT_EQ(rng.next(), 0x4db418a0bb1b019dull);
  EXPECT_EQ(rng.state(), 0x200340a005480e81ull);
}

TEST(Rng, UniformIsTop24BitsOverTwoTo24) {
  // (output >> 40) / 2^24 for the outputs above; exact in float.
  Rng a(0);
  EXPECT_EQ(a.uniform(), 0.052790820598602295f);
  EXPECT_EQ(a.uniform(), 0.33112025260925293f);
  Rng b(1);
  EXPECT_EQ(b.uniform(), 0.28083503246307373f);
  EXPECT_EQ(b.uniform(), 0.6711372137069702f);
  EXPECT_EQ(b.uniform(), 0.7258461117744446f);
  EXPECT_EQ(b.uniform(), 0.3035292625427246f);
  Rng c(12345);
  for (int i = 0; i < 10000; ++i) {
    const float u = c.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

// ---- parameters ------------------------------------------------------------

TEST(SamplingParams, PresetsMatchSpec) {
  const SamplingParams d;
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_EQ(d.top_p, 1.0f);
  EXPECT_EQ(d.min_p, 0.05f);
  EXPECT_EQ(d.top_k, 0);
  const SamplingParams t = SamplingParams::thinking_defaults();
  EXPECT_EQ(t.temperature, 1.0f);
  EXPECT_EQ(t.top_p, 1.0f);
  EXPECT_EQ(t.min_p, 0.05f);
  EXPECT_EQ(t.top_k, 0);
  EXPECT_LE(SamplingParams::greedy().temperature, 0.0f);
}

void expect_invalid(SamplingParams p, const std::string& field) {
  try {
    validate(p);
    ADD_FAILURE() << "no error for " << field;
  } catch (const ds4::Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sampler(p, 1), ds4::Error);
}

TEST(SamplingParams, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = kNaN;
  expect_invalid(p, "temperature");
  p = {};
  p.temperature = kInf;
  expect_invalid(p, "temperature");
  p = {};
  p.top_p = kNaN;
  expect_invalid(p, "top_p");
  p = {};
  p.top_p = -kInf;
  expect_invalid(p, "top_p");
  p = {};
  p.min_p = kNaN;
  expect_invalid(p, "min_p");
  p = {};
  p.min_p = -0.1f;
  expect_invalid(p, "min_p");
  p = {};
  p.min_p = 1.5f;
  expect_invalid(p, "min_p");
  p = {};
  p.top_k = -1;
  expect_invalid(p, "top_k");
}

TEST(SamplingParams, SpecMappedValuesAreNotErrors) {
  for (float top_p : {0.0f, -1.0f, 1.5f}) {
    SamplingParams p;
    p.top_p = top_p;
    EXPECT_NO_THROW(validate(p));
  }
  SamplingParams p;
  p.temperature = -1.0f;
  p.top_k = 100000;
  p.min_p = 0.0f;
  EXPECT_NO_THROW(validate(p));
  p.min_p = 1.0f;
  EXPECT_NO_THROW(validate(p));
}

// ---- argmax and greedy -------------------------------------------------------

TEST(Argmax, FirstIndexOnTies) {
  const std::vector<float> l{1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(l), 1);
  const std::vector<float> same(7, -2.5f);
  EXPECT_EQ(argmax(same), 0);
  const std::vector<float> last{-1.0f, -1.0f, 0.0f};
  EXPECT_EQ(argmax(last), 2);
}

TEST(Argmax, IgnoresNaNAndHandlesInfinities) {
  EXPECT_EQ(argmax(std::vector<float>{kNaN, 0.5f, kNaN, 0.25f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{kNaN, kNaN}), 0);
  EXPECT_EQ(argmax(std::vector<float>{-kInf, -kInf, -1e30f}), 2);
  EXPECT_EQ(argmax(std::vector<float>{1.0f, kInf, kInf}), 1);
  EXPECT_THROW(argmax(std::vector<float>{}), ds4::Error);
}

// Against the definition, one index at a time: random vectors with ties,
// NaN and infinities, lengths around the 8-lane blocks, every exclusion.
TEST(Argmax, MatchesTheSequentialDefinition) {
  auto reference = [](const std::vector<float>& l, int32_t excluded) {
    int32_t best = -1, first = -1;
    for (size_t i = 0; i < l.size(); ++i) {
      const auto id = static_cast<int32_t>(i);
      if (id == excluded) continue;
      if (first < 0) first = id;
      if (std::isnan(l[i])) continue;
      if (best < 0 || l[i] > l[static_cast<size_t>(best)]) best = id;
    }
    return best >= 0 ? best : first;
  };
  std::mt19937 rng(11);
  const float kValues[] = {-kInf, -3.0f, -1.0f, 0.0f, 0.5f, 2.0f, kInf, kNaN};
  int checked = 0;
  for (size_t n = 1; n <= 40; ++n) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> l(n);
      // Few distinct values: ties across lanes and blocks are common.
      for (float& v : l) v = kValues[std::uniform_int_distribution<int>(0, rep % 2 == 0 ? 7 : 5)(rng)];
      for (int32_t excluded = -1; excluded <= static_cast<int32_t>(n); ++excluded) {
        ASSERT_EQ(argmax_except(l, excluded), reference(l, excluded)) << "n=" << n << " excluded=" << excluded;
        ++checked;
      }
      ASSERT_EQ(argmax(l), std::max(0, reference(l, -1)));
    }
  }
  EXPECT_EQ(argmax_except(std::vector<float>{1.0f}, 0), -1);
  EXPECT_GT(checked, 16000);
}

TEST(Sampler, NonPositiveTemperatureIsArgmaxWithoutDraws) {
  const std::vector<float> l{0.1f, 2.0f, 2.0f, 1.9f};
  for (float t : {0.0f, -0.5f}) {
    SamplingParams p;
    p.temperature = t;
    Sampler s(p, 42);
    const uint64_t before = s.rng().state();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l), 1);
    EXPECT_EQ(s.rng().state(), before);
  }
}

TEST(Sampler, ForceGreedyOverridesTemperatureAndKeepsTheStream) {
  const std::vector<float> flat(16, 0.0f);
  std::vector<float> peaked = flat;
  peaked[9] = 0.3f;  // weight 1 vs e^-0.3 = 0.74 for the others: a draw would rarely pick 9
  SamplingParams p;
  p.min_p = 0.0f;
  Sampler a(p, 7);
  Sampler b(p, 7);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.sample(peaked, true), 9);
  EXPECT_EQ(a.rng().state(), Rng(7).state());
  // The greedy calls consumed nothing: the sampled stream continues as if
  // they never happened.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(flat), b.sample(flat));
}

TEST(Sampler, RejectsEmptyLogits) {
  Sampler s({}, 1);
  EXPECT_THROW(s.sample(std::vector<float>{}), ds4::Error);
}

TEST(Sampler, PlusInfinityIsAPointMass) {
  Sampler s({}, 3);
  const std::vector<float> l{0.0f, kInf, 5.0f, kInf};
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(s.rng().state(), Rng(3).state());
}

TEST(Sampler, NothingUsableFallsBackToArgmax) {
  Sampler s({}, 3);
  EXPECT_EQ(s.sample(std::vector<float>{kNaN, -kInf, kNaN}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{kNaN, kNaN}), 0);
}

// ---- known answers for the filters -------------------------------------------
//
// Each case lists its kept tokens in scan order with their weights; the i-th
// sample must be the token whose cumulative interval holds u_i * Σw, where
// u_i is the i-th uniform of an Rng with the same seed (checked above). Draws
// within 1e-4 of a boundary are skipped (float rounding of the weights).

struct Kept {
  int32_t id;
  double weight;
};

int32_t expected_token(const std::vector<Kept>& kept, float u, bool* near_boundary) {
  double total = 0;
  for (const Kept& k : kept) total += k.weight;
  const double r = static_cast<double>(u) * total;
  double cum = 0;
  *near_boundary = false;
  for (const Kept& k : kept) {
    cum += k.weight;
    if (std::abs(r - cum) < 1e-4 * total) *near_boundary = true;
    if (r < cum) return k.id;
  }
  return kept.back().id;
}

void expect_draws(const SamplingParams& p, const std::vector<float>& logits, const std::vector<Kept>& kept,
                  int draws = 2000) {
  const uint64_t seed = 0xC0FFEE;
  Sampler s(p, seed);
  Rng mirror(seed);
  int checked = 0;
  std::vector<int> seen(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    bool near = false;
    const int32_t want = expected_token(kept, mirror.uniform(), &near);
    const int32_t got = s.sample(logits);
    ASSERT_GE(got, 0);
    ASSERT_LT(got, static_cast<int32_t>(logits.size()));
    seen[static_cast<size_t>(got)]++;
    if (near) continue;
    ASSERT_EQ(got, want) << "draw " << i;
    ++checked;
  }
  EXPECT_GT(checked, draws * 9 / 10);
  for (size_t id = 0; id < logits.size(); ++id) {
    const bool is_kept = std::any_of(kept.begin(), kept.end(), [&](const Kept& k) { return k.id == int32_t(id); });
    if (is_kept) {
      EXPECT_GT(seen[id], 0) << "token " << id << " is kept";
    } else {
      EXPECT_EQ(seen[id], 0) << "token " << id << " is filtered out";
    }
  }
}

float ln(double w) { return static_cast<float>(std::log(w)); }

TEST(SamplerKnownAnswer, MinPKeepsWeightsAtLeastMinPInIdOrder) {
  // Weights 1, 0.5, 0.04, 0.06 (and two unusable entries); min_p 0.05 drops 0.04.
  const std::vector<float> l{0.0f, ln(0.5), ln(0.04), ln(0.06), -kInf, kNaN};
  SamplingParams p;  // defaults: T=1, min_p=0.05
  expect_draws(p, l, {{0, 1.0}, {1, 0.5}, {3, 0.06}});
}

TEST(SamplerKnownAnswer, MinPIsAppliedAfterTemperature) {
  // T=2 on doubled logits: the same weights as above.
  const std::vector<float> doubled{0.0f, 2 * ln(0.5), 2 * ln(0.04), 2 * ln(0.06)};
  SamplingParams p;
  p.temperature = 2.0f;
  expect_draws(p, doubled, {{0, 1.0}, {1, 0.5}, {3, 0.06}});
  // T=0.5 squares the weights: 1, 0.25, 0.0016, 0.0036: only two survive 0.05.
  const std::vector<float> plain{0.0f, ln(0.5), ln(0.04), ln(0.06)};
  p.temperature = 0.5f;
  expect_draws(p, plain, {{0, 1.0}, {1, 0.25}});
}

TEST(SamplerKnownAnswer, MinPZeroKeepsEverythingUsable) {
  const std::vector<float> l{0.0f, ln(0.5), ln(0.04), ln(0.06), -kInf};
  SamplingParams p;
  p.min_p = 0.0f;
  expect_draws(p, l, {{0, 1.0}, {1, 0.5}, {2, 0.04}, {3, 0.06}});
}

TEST(SamplerKnownAnswer, TopKTakesTheKBestLowerIdOnTies) {
  // Best two of {3,1,2,0,2}: id 0, then the tie at 2 goes to id 2 (not 4).
  const std::vector<float> l{3.0f, 1.0f, 2.0f, 0.0f, 2.0f};
  SamplingParams p;
  p.top_k = 2;
  p.min_p = 0.0f;
  expect_draws(p, l, {{0, 1.0}, {2, std::exp(-1.0)}});
}

TEST(SamplerKnownAnswer, TopKThenMinPAndScanInRankOrder) {
  // Top 3 by weight: id 4 (1), id 1 (0.5), id 3 (0.3); min_p 0.35 drops 0.3.
  const std::vector<float> l{ln(0.1), ln(0.5), ln(0.04), ln(0.3), 0.0f};
  SamplingParams p;
  p.top_k = 3;
  p.min_p = 0.35f;
  expect_draws(p, l, {{4, 1.0}, {1, 0.5}});
  p.min_p = 0.0f;
  expect_draws(p, l, {{4, 1.0}, {1, 0.5}, {3, 0.3}});
}

TEST(SamplerKnownAnswer, TopKNucleusIsMeasuredOnTheTopKMass) {
  // Top 3: weights 1, 0.5, 0.3 (mass 1.8). top_p 0.8: 1/1.8 = 0.56, 1.5/1.8 = 0.83 -> stop.
  // Over the whole vocabulary (1.94) the cut would still be at 1.5/1.94 = 0.77 < 0.8 -> 3 kept.
  const std::vector<float> l{ln(0.1), ln(0.5), ln(0.04), ln(0.3), 0.0f};
  SamplingParams p;
  p.top_k = 3;
  p.min_p = 0.0f;
  p.top_p = 0.8f;
  expect_draws(p, l, {{4, 1.0}, {1, 0.5}});
}

TEST(SamplerKnownAnswer, TopKIsCappedAt1024) {
  // All equal: the 1024 lowest ids are the top 1024, the rest never appear.
  const std::vector<float> l(1100, 0.5f);
  SamplingParams p;
  p.top_k = 100000;
  Sampler s(p, 99);
  int max_id = -1;
  for (int i = 0; i < 600; ++i) max_id = std::max(max_id, s.sample(l));
  EXPECT_LT(max_id, kMaxTopK);
  EXPECT_GE(max_id, kMaxTopK - 40);  // 600 uniform draws over 1024 miss the top 40 with p = e^-24
}

TEST(SamplerKnownAnswer, TopPSortsDescendingAndStopsInclusively) {
  // Weights by id: 0.1, 1, 0.5, 0.3, 0.02 (total 1.92). Sorted: id1, id2, id3, id0, id4.
  const std::vector<float> l{ln(0.1), 0.0f, ln(0.5), ln(0.3), ln(0.02)};
  SamplingParams p;  // min_p 0.05 drops id4 (0.02) but its weight still counts in the total
  p.top_p = 0.7f;    // 1/1.92 = 0.52, 1.5/1.92 = 0.78 >= 0.7: stop after id2
  expect_draws(p, l, {{1, 1.0}, {2, 0.5}});
  p.top_p = 0.9f;  // 1.8/1.92 = 0.9375
  expect_draws(p, l, {{1, 1.0}, {2, 0.5}, {3, 0.3}});
  p.top_p = 0.97f;  // 1.9/1.92 = 0.9896
  expect_draws(p, l, {{1, 1.0}, {2, 0.5}, {3, 0.3}, {0, 0.1}});
  p.top_p = 0.995f;  // would need id4, which min_p removed
  expect_draws(p, l, {{1, 1.0}, {2, 0.5}, {3, 0.3}, {0, 0.1}});
  p.top_p = 0.4f;  // the first token alone already covers 0.52
  expect_draws(p, l, {{1, 1.0}});
}

TEST(SamplerKnownAnswer, TopPCountsTheMassMinPRemoved) {
  // Weights 1, 0.5 and ten of 0.04 (below min_p, mass 0.4): total 1.9.
  // top_p 0.6: 1/1.9 = 0.53 < 0.6, so id1 is needed too (against the survivors'
  // mass alone, 1/1.5 = 0.67 would have stopped at id0).
  std::vector<float> l(12, ln(0.04));
  l[0] = 0.0f;
  l[1] = ln(0.5);
  SamplingParams p;
  p.top_p = 0.6f;
  expect_draws(p, l, {{0, 1.0}, {1, 0.5}});
}

TEST(SamplerKnownAnswer, TopPOutsideUnitIntervalMeansOne) {
  const std::vector<float> l{ln(0.1), 0.0f, ln(0.5), ln(0.3), ln(0.02)};
  for (float top_p : {0.0f, -0.3f, 1.0f, 7.0f}) {
    SamplingParams p;
    p.top_p = top_p;
    expect_draws(p, l, {{0, 0.1}, {1, 1.0}, {2, 0.5}, {3, 0.3}});  // min_p only, id order
  }
}

TEST(SamplerKnownAnswer, ExtremeTemperatures) {
  const std::vector<float> l{0.0f, -5.0f, 3.0f, -kInf, kNaN};
  SamplingParams p;
  p.temperature = 1e30f;  // every usable weight rounds to 1: uniform over them
  expect_draws(p, l, {{0, 1.0}, {1, 1.0}, {2, 1.0}});
  p.temperature = 1e-30f;  // every weight but the top one underflows to 0
  expect_draws(p, l, {{2, 1.0}});
}

TEST(SamplerKnownAnswer, FullVocabularyMatchesTheFormulaTokenForToken) {
  // 129280 logits; the kept set straight from the spec formula (w = expf((l -
  // max) / T) >= min_p, id order), the draw from the mirrored uniform stream.
  std::mt19937 gen(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> l(129280);
  for (float& v : l) v = normal(gen);
  for (float t : {0.7f, 1.0f, 1.6f}) {
    SamplingParams p;
    p.temperature = t;
    const float mx = *std::max_element(l.begin(), l.end());
    std::vector<Kept> kept;
    for (size_t i = 0; i < l.size(); ++i) {
      const float w = std::exp((l[i] - mx) / t);
      if (w >= p.min_p) kept.push_back({int32_t(i), w});
    }
    ASSERT_GT(kept.size(), 100u);
    Sampler s(p, 77);
    Rng mirror(77);
    for (int i = 0; i < 30; ++i) {
      bool near = false;
      const int32_t want = expected_token(kept, mirror.uniform(), &near);
      const int32_t got = s.sample(l);
      if (!near) {
        EXPECT_EQ(got, want) << "T " << t << " draw " << i;
      }
    }
  }
}

// ---- statistics ---------------------------------------------------------------

// Expected distribution written from the spec text, in double.
std::vector<double> reference_distribution(const std::vector<float>& l, const SamplingParams& p) {
  const size_t n = l.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  const size_t k = p.top_k > 0 ? std::min<size_t>(size_t(p.top_k), n) : n;
  const double mx = l[order[0]];
  std::vector<double> w(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    w[order[i]] = std::exp((l[order[i]] - mx) / p.temperature);
    total += w[order[i]];
  }
  const double top_p = (p.top_p > 0 && p.top_p <= 1) ? p.top_p : 1.0;
  std::vector<double> prob(n, 0.0);
  double mass = 0;
  for (size_t i = 0; i < k; ++i) {
    const size_t id = order[i];
    if (i > 0 && w[id] < p.min_p) break;
    prob[id] = w[id];
    mass += w[id];
    if (top_p < 1.0 && mass / total >= top_p) break;
  }
  for (double& q : prob) q /= mass;
  return prob;
}

void expect_frequencies_match(const SamplingParams& p, uint64_t logits_seed) {
  std::mt19937 gen(static_cast<uint32_t>(logits_seed));
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> l(40);
  for (float& v : l) v = normal(gen);
  const std::vector<double> prob = reference_distribution(l, p);

  constexpr int kDraws = 30000;
  Sampler s(p, 2024);
  std::vector<int> count(l.size(), 0);
  for (int i = 0; i < kDraws; ++i) count[static_cast<size_t>(s.sample(l))]++;

  double chi2 = 0;
  int bins = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (prob[i] == 0.0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " is filtered out";
      continue;
    }
    const double e = prob[i] * kDraws;
    chi2 += (count[i] - e) * (count[i] - e) / e;
    ++bins;
  }
  const int df = bins - 1;
  ASSERT_GE(df, 2) << "test vector keeps too few tokens to be informative";
  // Mean df, sd sqrt(2 df): a loose bound that a wrong filter or weight breaks
  // by orders of magnitude (and a fixed seed keeps it from flaking).
  EXPECT_LT(chi2, df + 8 * std::sqrt(2.0 * df) + 10) << "df " << df;
}

TEST(SamplerStatistics, DefaultsMatchFilteredSoftmax) { expect_frequencies_match({}, 1); }

TEST(SamplerStatistics, TemperatureAndTopKMatch) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 6;
  p.min_p = 0.02f;
  expect_frequencies_match(p, 2);
}

TEST(SamplerStatistics, TopPMatch) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.8f;
  p.min_p = 0.01f;
  expect_frequencies_match(p, 3);
}

TEST(SamplerStatistics, TopKAndTopPTogetherMatch) {
  SamplingParams p;
  p.top_k = 12;
  p.top_p = 0.9f;
  p.min_p = 0.0f;
  expect_frequencies_match(p, 4);
}

// ---- reproducibility --------------------------------------------------------

std::vector<std::vector<float>> logits_sequence(int steps, size_t vocab) {
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> seq(static_cast<size_t>(steps), std::vector<float>(vocab));
  for (auto& l : seq)
    for (float& v : l) v = normal(gen);
  return seq;
}

std::vector<int32_t> run(const SamplingParams& p, uint64_t seed, const std::vector<std::vector<float>>& seq) {
  Sampler s(p, seed);
  std::vector<int32_t> out;
  for (const auto& l : seq) out.push_back(s.sample(l));
  return out;
}

TEST(SamplerReproducibility, SameSeedSameTokensDifferentSeedsDiffer) {
  const auto seq = logits_sequence(100, 500);
  for (SamplingParams p : {SamplingParams{}, SamplingParams{0.8f, 0.9f, 0.01f, 0}, SamplingParams{1.2f, 1.0f, 0.0f, 50}}) {
    const auto a = run(p, 5, seq);
    EXPECT_EQ(a, run(p, 5, seq));
    EXPECT_NE(a, run(p, 6, seq));
    EXPECT_NE(a, run(p, 0, seq));
  }
}

TEST(SamplerReproducibility, FullVocabularyKeepsOnlyMinPSurvivors) {
  // The real vocabulary size: every sampled token must pass w >= min_p.
  const auto seq = logits_sequence(6, 129280);
  Sampler s({}, 11);
  for (const auto& l : seq) {
    const int32_t id = s.sample(l);
    const float mx = *std::max_element(l.begin(), l.end());
    EXPECT_GE(std::exp(l[static_cast<size_t>(id)] - mx), 0.05f);
  }
}

// ---- log-probabilities --------------------------------------------------------

TEST(Logprobs, TopKMatchesDirectLogSoftmax) {
  const std::vector<float> l{1.0f, 2.0f, 3.0f, 3.0f, -kInf, kNaN, -0.5f};
  double z = 0;
  for (float v : l)
    if (std::isfinite(v)) z += std::exp(double(v));
  const double lz = std::log(z);

  const auto top = top_logprobs(l, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 2);  // tie with id 3: lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 1);
  EXPECT_NEAR(top[0].logprob, 3.0 - lz, 1e-6);
  EXPECT_NEAR(top[1].logprob, 3.0 - lz, 1e-6);
  EXPECT_NEAR(top[2].logprob, 2.0 - lz, 1e-6);
  EXPECT_NEAR(logprob_of(l, 6), -0.5 - lz, 1e-6);
  EXPECT_EQ(logprob_of(l, 4), -kInf);
  EXPECT_THROW(logprob_of(l, 7), ds4::Error);
  EXPECT_THROW(logprob_of(l, -1), ds4::Error);

  // k past the usable entries: the -inf one comes last, NaN never.
  const auto all = top_logprobs(l, 100);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[4].id, 6);
  EXPECT_EQ(all[5].id, 4);
  EXPECT_EQ(all[5].logprob, -kInf);
  EXPECT_TRUE(top_logprobs(l, 0).empty());
}

TEST(Logprobs, LargeVocabularyRanksAndNormalises) {
  const auto seq = logits_sequence(1, 129280);
  const auto& l = seq[0];
  const auto top = top_logprobs(l, 20);
  ASSERT_EQ(top.size(), 20u);
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(l[static_cast<size_t>(top[i].id)], sorted[i]);
    EXPECT_NEAR(top[i].logprob, logprob_of(l, top[i].id), 1e-6);
  }
  // The best token's logprob is -log Σ exp(l - max), summed here in double.
  double z = 0;
  const double mx = sorted[0];
  for (float v : l) z += std::exp(double(v) - mx);
  EXPECT_NEAR(top[0].logprob, -std::log(z), 1e-5);
}

// ---- stop strings --------------------------------------------------------------

TEST(StopStrings, MatchAcrossChunksAndHoldBack) {
  StopStringMatcher m({"</stop>"});
  auto r = m.feed("hello <");
  EXPECT_FALSE(r.match_at);
  EXPECT_EQ(r.hold_back, 1u);
  r = m.feed("/st");
  EXPECT_FALSE(r.match_at);
  EXPECT_EQ(r.hold_back, 4u);
  r = m.feed("op> tail");
  ASSERT_TRUE(r.match_at);
  EXPECT_EQ(*r.match_at, 6u);
  EXPECT_EQ(r.hold_back, 18u - 6u);
  // Sticky once matched.
  r = m.feed("more");
  ASSERT_TRUE(r.match_at);
  EXPECT_EQ(*r.match_at, 6u);
  EXPECT_EQ(r.hold_back, 22u - 6u);
}

TEST(StopStrings, FalseStartReleasesHeldBytes) {
  StopStringMatcher m({"</stop>"});
  EXPECT_EQ(m.feed("a</s").hold_back, 3u);
  const auto r = m.feed("x");
  EXPECT_FALSE(r.match_at);
  EXPECT_EQ(r.hold_back, 0u);
}

TEST(StopStrings, SelfOverlappingStopByteByByte) {
  StopStringMatcher m({"abcabd"});
  const std::string text = "xxabcabcabd";
  // Longest suffix that is a proper prefix of "abcabd", after each byte.
  const size_t holds[] = {0, 0, 1, 2, 3, 4, 5, 3, 4, 5};
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const auto r = m.feed(text.substr(i, 1));
    ASSERT_FALSE(r.match_at) << i;
    EXPECT_EQ(r.hold_back, holds[i]) << "after " << text.substr(0, i + 1);
  }
  const auto r = m.feed(text.substr(text.size() - 1));
  ASSERT_TRUE(r.match_at);
  EXPECT_EQ(*r.match_at, 5u);
  EXPECT_EQ(r.hold_back, 6u);
}

TEST(StopStrings, EarliestMatchWinsAmongStops) {
  StopStringMatcher m({"world", "lo w", "zzz"});
  const auto r = m.feed("hello world");
  ASSERT_TRUE(r.match_at);
  EXPECT_EQ(*r.match_at, 3u);
  // A later-listed stop that starts earlier wins as well.
  StopStringMatcher m2({"bcd", "ab"});
  const auto r2 = m2.feed("xabcd");
  ASSERT_TRUE(r2.match_at);
  EXPECT_EQ(*r2.match_at, 1u);
  // Hold-back is the longest over all stops.
  StopStringMatcher m3({"abc", "bcdef"});
  EXPECT_EQ(m3.feed("xxbcd").hold_back, 3u);
}

TEST(StopStrings, OffsetsCountTheWholeText) {
  StopStringMatcher m({"STOP"});
  const std::string noise(1000, 'x');
  EXPECT_EQ(m.feed(noise).hold_back, 0u);
  EXPECT_EQ(m.feed("S").hold_back, 1u);
  EXPECT_EQ(m.feed("T").hold_back, 2u);
  const auto r = m.feed("OP!");
  ASSERT_TRUE(r.match_at);
  EXPECT_EQ(*r.match_at, 1000u);
  EXPECT_EQ(m.text_size(), 1005u);
}

TEST(StopStrings, EmptyStopsAreRejectedAndNoStopsNeverMatch) {
  EXPECT_THROW(StopStringMatcher({"ok", ""}), ds4::Error);
  StopStringMatcher none({});
  const auto r = none.feed("anything at all");
  EXPECT_FALSE(r.match_at);
  EXPECT_EQ(r.hold_back, 0u);
}

TEST(StopStrings, RandomChunkingAgreesWithPlainFind) {
  std::mt19937 gen(8);
  const std::vector<std::string> stops{"aba", "bb", "abab", "cab"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int len = 1 + int(gen() % 30);
    for (int i = 0; i < len; ++i) text += "abc"[gen() % 3];
    size_t want = std::string::npos;
    for (const auto& s : stops) want = std::min(want, text.find(s));

    StopStringMatcher m(stops);
    std::string seen;
    std::optional<size_t> got;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::min<size_t>(1 + gen() % 4, text.size() - pos);
      seen += text.substr(pos, n);
      pos += n;
      const auto r = m.feed(std::string_view(text).substr(pos - n, n));
      // Plain truth for the text seen so far.
      size_t first = std::string::npos;
      for (const auto& s : stops) first = std::min(first, seen.find(s));
      if (first != std::string::npos) {
        ASSERT_TRUE(r.match_at) << seen;
        EXPECT_EQ(*r.match_at, first) << seen;
        EXPECT_EQ(r.hold_back, seen.size() - first);
        got = r.match_at;
        break;
      }
      ASSERT_FALSE(r.match_at) << seen;
      size_t hold = 0;
      for (const auto& s : stops)
        for (size_t k = 1; k < s.size() && k <= seen.size(); ++k)
          if (seen.compare(seen.size() - k, k, s, 0, k) == 0) hold = std::max(hold, k);
      EXPECT_EQ(r.hold_back, hold) << seen;
    }
    EXPECT_EQ(got.value_or(std::string::npos), want) << text;
  }
}

// ---- stop reasons --------------------------------------------------------------

TEST(StopReasonNames, OpenAiAndAnthropicMappings) {
  EXPECT_EQ(to_string(StopReason::Eos), "stop");
  EXPECT_EQ(to_string(StopReason::StopString), "stop");
  EXPECT_EQ(to_string(StopReason::MaxTokens), "length");
  EXPECT_EQ(to_string(StopReason::ContextFull), "length");
  EXPECT_EQ(to_string(StopReason::ToolCalls), "tool_calls");
  EXPECT_EQ(to_string(StopReason::Error), "error");
  EXPECT_EQ(to_string(StopReason::Cancelled), "error");
  EXPECT_EQ(to_string(StopReason::None), "");
  EXPECT_EQ(to_anthropic_string(StopReason::ToolCalls), "tool_use");
  EXPECT_EQ(to_anthropic_string(StopReason::MaxTokens), "max_tokens");
  EXPECT_EQ(to_anthropic_string(StopReason::ContextFull), "max_tokens");
  EXPECT_EQ(to_anthropic_string(StopReason::Eos), "end_turn");
  EXPECT_EQ(to_anthropic_string(StopReason::StopString), "end_turn");
}

}  // namespace
}  // namespace ds4::runtime
