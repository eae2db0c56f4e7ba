// Seeded random token ids for forward-pass tests: the same (n_vocab, n, seed)
// always gives the same ids (the reference cache keys on them).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ds4::test {

inline std::vector<int32_t> random_tokens(uint32_t n_vocab, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(n_vocab) - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto &x : t) x = d(rng);
  return t;
}

}  // namespace ds4::test
