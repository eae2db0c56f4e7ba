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

// Tensor parallel (backend::TensorShare): the experts of n_expert that rank
// of size owns (e % size == rank), and each pair's expert as the share
// numbers its own: e / size, or share_expert_count(...) (one past them: the
// group of the pairs whose experts are another rank's) for the others.
// ds4::Error naming the pair and the id when an id is outside [0, n_expert).
int share_expert_count(int n_expert, int rank, int size);
std::vector<int32_t> share_local_ids(std::span<const int32_t> ids, int n_expert, int rank, int size);

}  // namespace ds4::backend
