// Grouping token-slot pairs by expert (backend/expert_groups): a hand-worked
// batch, and a bad id refused by name.
#include <gtest/gtest.h>

#include <vector>

#include "backend/expert_groups.h"
#include "core/error.h"

namespace ds4::backend {
namespace {

TEST(ExpertGroups, CountingSortKeepsTokensInOrderWithinAnExpert) {
  // 3 tokens x 2 slots over 4 experts: pairs 0..5 choose 2 0 | 1 2 | 2 0.
  const std::vector<int32_t> ids = {2, 0, 1, 2, 2, 0};
  const ExpertGroups g = group_pairs_by_expert(ids, 4);
  EXPECT_EQ(g.start, (std::vector<int32_t>{0, 2, 3, 6, 6}));
  EXPECT_EQ(g.pair_of_row, (std::vector<int32_t>{1, 5, 2, 0, 3, 4}));
  EXPECT_EQ(g.row_of_pair, (std::vector<int32_t>{3, 0, 2, 4, 5, 1}));
  EXPECT_EQ(g.active, (std::vector<int32_t>{0, 1, 2}));
}

TEST(ExpertGroups, AnIdOutsideTheExpertsIsNamed) {
  try {
    group_pairs_by_expert(std::vector<int32_t>{0, 4}, 4);
    FAIL() << "no error";
  } catch (const ds4::Error& e) {
    EXPECT_STREQ(e.what(), "expert id 4 of pair 1 is outside 0..3");
  }
  EXPECT_TRUE(group_pairs_by_expert({}, 4).active.empty());
}

}  // namespace
}  // namespace ds4::backend
