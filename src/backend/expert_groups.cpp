#include "backend/expert_groups.h"

#include <string>

#include "core/error.h"

namespace ds4::backend {

ExpertGroups group_pairs_by_expert(std::span<const int32_t> ids, int n_expert) {
  ExpertGroups g;
  g.start.assign(static_cast<size_t>(n_expert) + 1, 0);
  for (size_t p = 0; p < ids.size(); ++p) {
    if (ids[p] < 0 || ids[p] >= n_expert)
      throw Error("expert id " + std::to_string(ids[p]) + " of pair " + std::to_string(p) + " is outside 0.." +
                  std::to_string(n_expert - 1));
    ++g.start[static_cast<size_t>(ids[p]) + 1];
  }
  for (int e = 0; e < n_expert; ++e) {
    if (g.start[static_cast<size_t>(e) + 1] > 0) g.active.push_back(e);
    g.start[static_cast<size_t>(e) + 1] += g.start[static_cast<size_t>(e)];
  }
  std::vector<int32_t> next(g.start.begin(), g.start.end() - 1);
  g.pair_of_row.resize(ids.size());
  g.row_of_pair.resize(ids.size());
  for (size_t p = 0; p < ids.size(); ++p) {
    const int32_t row = next[static_cast<size_t>(ids[p])]++;
    g.pair_of_row[static_cast<size_t>(row)] = static_cast<int32_t>(p);
    g.row_of_pair[p] = row;
  }
  return g;
}

int share_expert_count(int n_expert, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error("expert share " + std::to_string(rank) + " of " + std::to_string(size));
  return n_expert > rank ? (n_expert - rank + size - 1) / size : 0;
}

std::vector<int32_t> share_local_ids(std::span<const int32_t> ids, int n_expert, int rank, int size) {
  const int others = share_expert_count(n_expert, rank, size);
  std::vector<int32_t> local(ids.size());
  for (size_t p = 0; p < ids.size(); ++p) {
    if (ids[p] < 0 || ids[p] >= n_expert)
      throw Error("expert id " + std::to_string(ids[p]) + " of pair " + std::to_string(p) + " is outside 0.." +
                  std::to_string(n_expert - 1));
    local[p] = ids[p] % size == rank ? ids[p] / size : others;
  }
  return local;
}

}  // namespace ds4::backend
