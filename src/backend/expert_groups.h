// A batch's (token, slot) pairs grouped by routed expert: the counting sort
// the MoE sublayer's prefill runs before it evaluates each expert once over
// its tokens (tokens in order within an expert). Pair p is token p / k,
// slot p % k.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4::backend {

struct ExpertGroups {
  std::vector<int32_t> start;        // n_expert + 1: expert e's rows are [start[e], start[e + 1])
  std::vector<int32_t> pair_of_row;  // sorted row -> pair
  std::vector<int32_t> row_of_pair;  // pair -> sorted row
  // Experts with at least one pair, in expert order.
  std::vector<int32_t> active;
};

// ds4::Error naming the pair and the id when an id is outside [0, n_expert).
ExpertGroups group_pairs_by_expert(std::span<const int32_t> ids, int n_expert);

}  // namespace ds4::backend
