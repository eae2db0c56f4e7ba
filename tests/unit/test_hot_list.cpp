// Hot list files (backend/hot_list.h): what ds4-bench --record-expert-usage
// writes is what --ssd-streaming-hotlist reads back, most selected first, and
// anything else in the file is an error naming its line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "backend/hot_list.h"
#include "core/error.h"
#include "support/temp_dir.h"

namespace ds4::backend {
namespace {

TEST(HotList, RankedUsageRoundTrips) {
  const std::vector<std::vector<uint64_t>> usage = {{0, 5, 9, 1}, {9, 0, 0, 30}};
  const std::vector<ExpertUse> ranked = rank_expert_usage(usage);
  ASSERT_EQ(ranked.size(), 5u) << "experts never selected are left out";
  EXPECT_EQ(ranked[0].layer, 1u);
  EXPECT_EQ(ranked[0].expert, 3u);
  EXPECT_EQ(ranked[0].count, 30u);
  // Ties keep layer then expert order.
  EXPECT_EQ(ranked[1].layer, 0u);
  EXPECT_EQ(ranked[1].expert, 2u);
  EXPECT_EQ(ranked[2].layer, 1u);
  EXPECT_EQ(ranked[2].expert, 0u);
  EXPECT_EQ(ranked.back().count, 1u);

  test::TempDir dir;
  const std::string path = (dir.path() / "hot.txt").string();
  write_hot_list(path, ranked);
  const std::vector<ExpertUse> back = read_hot_list(path);
  ASSERT_EQ(back.size(), ranked.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].layer, ranked[i].layer);
    EXPECT_EQ(back[i].expert, ranked[i].expert);
    EXPECT_EQ(back[i].count, ranked[i].count);
  }
}

TEST(HotList, BadLinesNameTheirLine) {
  test::TempDir dir;
  const std::string path = (dir.path() / "bad.txt").string();
  for (const char* bad : {"3 4\n", "3 4 5 6\n", "a b c\n", "-1 2 3\n", "1 2 x\n"}) {
    std::ofstream(path) << "# comment\n\n0 1 2\n" << bad;
    try {
      read_hot_list(path);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path + ":4:"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_hot_list((dir.path() / "absent.txt").string()), Error);
  EXPECT_THROW(write_hot_list((dir.path() / "no" / "such" / "dir.txt").string(), {}), Error);
}

}  // namespace
}  // namespace ds4::backend
