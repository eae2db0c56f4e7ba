// cpu_features() against the kernel's view in /proc/cpuinfo (Linux).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/cpu_features.h"

namespace ds4 {
namespace {

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::set<std::string> flags;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeatures, MatchesProcCpuinfo) {
  const auto flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  const CpuFeatures& f = cpu_features();
  auto has = [&](const char* name) { return flags.count(name) != 0; };
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.f16c, has("f16c"));
  EXPECT_EQ(f.bmi2, has("bmi2"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512vl, has("avx512vl"));
  EXPECT_EQ(f.avx512dq, has("avx512dq"));
  EXPECT_EQ(f.avx512vnni, has("avx512_vnni"));
  EXPECT_EQ(f.avx512vbmi, has("avx512vbmi"));
  EXPECT_EQ(f.avx512bitalg, has("avx512_bitalg"));
  EXPECT_EQ(f.avx512bf16, has("avx512_bf16"));
  EXPECT_EQ(f.avx_vnni, has("avx_vnni"));
}

std::string proc_cpuinfo_vendor() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("vendor_id", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string vendor;
    words >> vendor;
    return vendor;
  }
  return {};
}

TEST(CpuFeatures, VendorMatchesProcCpuinfo) {
  const std::string vendor = proc_cpuinfo_vendor();
  if (vendor.empty()) GTEST_SKIP() << "no /proc/cpuinfo vendor_id";
  EXPECT_EQ(cpu_features().amd, vendor == "AuthenticAMD") << vendor;
}

TEST(CpuFeatures, Consistent) {
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(&f, &cpu_features());  // computed once
  if (f.avx512vnni || f.avx512vbmi || f.avx512bitalg || f.avx512bw || f.avx512vl || f.avx512dq || f.avx512bf16) {
    EXPECT_TRUE(f.avx512f);
  }
}

}  // namespace
}  // namespace ds4
