// Grouping token-slot pairs by expert (backend/expert_groups): a hand-worked
// batch, and a bad id refused by name; tensor parallel's expert shares.
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

TEST(ExpertShare, EachRankNumbersItsOwnExpertsAndGroupsTheOthersLast) {
  // 5 experts over 2 ranks: rank 0 owns 0, 2, 4 (local 0, 1, 2), rank 1 owns
  // 1, 3 (local 0, 1); another rank's expert goes to the group past them.
  EXPECT_EQ(share_expert_count(5, 0, 2), 3);
  EXPECT_EQ(share_expert_count(5, 1, 2), 2);
  EXPECT_EQ(share_expert_count(256, 1, 2), 128);
  EXPECT_EQ(share_expert_count(7, 0, 1), 7);
  const std::vector<int32_t> ids = {4, 1, 0, 3, 2, 4};
  EXPECT_EQ(share_local_ids(ids, 5, 0, 2), (std::vector<int32_t>{2, 3, 0, 3, 1, 2}));
  EXPECT_EQ(share_local_ids(ids, 5, 1, 2), (std::vector<int32_t>{2, 0, 2, 1, 2, 2}));
  EXPECT_EQ(share_local_ids(ids, 5, 0, 1), ids);
  // Grouped with one group more, the others' pairs are the last group.
  const ExpertGroups g = group_pairs_by_expert(share_local_ids(ids, 5, 1, 2), 3);
  EXPECT_EQ(g.active, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(g.start, (std::vector<int32_t>{0, 1, 2, 6}));
  EXPECT_THROW(share_local_ids(std::vector<int32_t>{5}, 5, 0, 2), ds4::Error);
  EXPECT_THROW(share_expert_count(5, 2, 2), ds4::Error);
}

}  // namespace
}  // namespace ds4::backend
