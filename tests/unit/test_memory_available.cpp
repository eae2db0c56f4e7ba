// How much memory the process may still take (core/memory_available.h): the
// parsers against the kernel's documented formats (proc(5) meminfo, cgroup v2
// memory.max, v1 memory.limit_in_bytes), and the reading on this machine
// against /proc/meminfo read here.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/memory_available.h"

namespace ds4 {
namespace {

TEST(MemoryAvailable, MeminfoAvailableLine) {
  EXPECT_EQ(meminfo_available("MemTotal:       24567808 kB\nMemFree:         1234 kB\nMemAvailable:   20123456 kB\n"),
            uint64_t{20123456} * 1024);
  EXPECT_FALSE(meminfo_available("MemTotal: 1 kB\nMemFree: 1 kB\n").has_value());
  EXPECT_FALSE(meminfo_available("MemAvailable: lots kB\n").has_value());
}

TEST(MemoryAvailable, CgroupLimitValues) {
  EXPECT_EQ(cgroup_limit_value("183500800\n"), uint64_t{183500800});
  EXPECT_FALSE(cgroup_limit_value("max\n").has_value()) << "v2: no limit";
  EXPECT_FALSE(cgroup_limit_value("9223372036854771712\n").has_value()) << "v1: no limit (2^63 in pages)";
  EXPECT_FALSE(cgroup_limit_value("").has_value());
}

TEST(MemoryAvailable, TheLimitLessUsageBindsWhenTighter) {
  MemoryAvailable m;
  m.mem_available = 1000;
  EXPECT_EQ(m.bytes(), 1000u);
  m.cgroup_limit = 600;
  m.cgroup_usage = 250;
  EXPECT_EQ(m.bytes(), 350u);
  m.cgroup_usage = 700;  // over the limit (reclaim pending): nothing left
  EXPECT_EQ(m.bytes(), 0u);
  m.cgroup_limit = 5000;
  m.cgroup_usage = 100;
  EXPECT_EQ(m.bytes(), 1000u);
}

TEST(MemoryAvailable, ThisMachine) {
  std::ifstream in("/proc/meminfo");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto want = meminfo_available(ss.str());
  ASSERT_TRUE(want.has_value());
  const MemoryAvailable m = memory_available();
  // MemAvailable moves between the two reads; within 10 % of each other.
  EXPECT_NEAR(static_cast<double>(m.mem_available), static_cast<double>(*want), static_cast<double>(*want) * 0.1);
  EXPECT_LE(m.bytes(), m.mem_available);
  if (m.cgroup_limit) {
    EXPECT_FALSE(m.cgroup.empty());
  }
}

}  // namespace
}  // namespace ds4
