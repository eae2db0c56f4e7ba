// ScratchVector: a std::vector whose growth does not zero-fill, and whose
// buffers of 2 MiB or more start at a 2 MiB boundary and ask for huge pages.
// Vector semantics hold across the two allocation paths (growing from a small
// buffer into a big one keeps the elements).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <span>

#include "core/file_map.h"
#include "core/scratch_vector.h"

namespace ds4 {
namespace {

constexpr size_t kTwoMiB = size_t{2} << 20;

TEST(ScratchVector, BigBuffersStartAtA2MiBBoundary) {
  ScratchVector<float> small(1000);
  ScratchVector<float> big(kTwoMiB / sizeof(float) + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kTwoMiB, 0u);
  big.back() = 1.0f;  // the whole size is usable
  EXPECT_EQ(big.back(), 1.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % alignof(float), 0u);
}

TEST(ScratchVector, GrowingAcrossTheHugePageSizeKeepsTheElements) {
  ScratchVector<int32_t> v(1000);
  std::iota(v.begin(), v.end(), 7);
  v.resize(3 * kTwoMiB / sizeof(int32_t));  // now a huge-page buffer
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], static_cast<int32_t>(i + 7)) << i;
  std::iota(v.begin(), v.end(), 0);
  v.resize(5 * kTwoMiB / sizeof(int32_t));  // huge to huge
  for (size_t i = 0; i < 3 * kTwoMiB / sizeof(int32_t); i += 4099) ASSERT_EQ(v[i], static_cast<int32_t>(i)) << i;
  v.resize(10);
  v.shrink_to_fit();  // back to a small buffer
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(v[i], static_cast<int32_t>(i));
  ScratchVector<int32_t> copy = v;
  EXPECT_EQ(copy, v);
}

TEST(ScratchVector, BigBuffersAreMappedInHugePagesWhereTheKernelCan) {
  ScratchVector<uint8_t> v(8 * kTwoMiB);
  for (size_t i = 0; i < v.size(); i += 4096) v[i] = 1;  // first touch
  const uint64_t huge = huge_page_bytes(std::span<const uint8_t>(v.data(), v.size()));
  if (huge == 0) GTEST_SKIP() << "no transparent huge pages for anonymous memory here";
  EXPECT_GE(huge, 4 * kTwoMiB);  // most of it (the mapping may be shared with other heap blocks)
}

}  // namespace
}  // namespace ds4
