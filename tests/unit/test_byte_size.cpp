// Byte counts: parse_size reads what a command line gives (digits and an
// optional binary suffix) and refuses everything else; format_size and
// format_bytes print them back.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "core/byte_size.h"

namespace ds4 {
namespace {

TEST(ParseSize, DigitsWithAnOptionalBinarySuffix) {
  EXPECT_EQ(parse_size("0"), uint64_t{0});
  EXPECT_EQ(parse_size("512"), uint64_t{512});
  EXPECT_EQ(parse_size("64k"), uint64_t{65536});
  EXPECT_EQ(parse_size("64K"), uint64_t{65536});
  EXPECT_EQ(parse_size("3m"), uint64_t{3145728});
  EXPECT_EQ(parse_size("2g"), uint64_t{2147483648});
  EXPECT_EQ(parse_size("2G"), uint64_t{2147483648});
  EXPECT_EQ(parse_size("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_size("17179869183g"), uint64_t{17179869183} << 30);  // the largest count of GiB that fits
}

TEST(ParseSize, RefusesAnythingElse) {
  for (const char* bad : {"", "k", "g2", "-1", "+5", " 5", "5 ", "1.5g", "2t", "2kb", "0x10", "5kk",
                          "18446744073709551616", "17179869184g", "99999999999999999999999"}) {
    EXPECT_EQ(parse_size(bad), std::nullopt) << '"' << bad << '"';
  }
}

TEST(FormatSize, PrintsTheLargestWholeUnit) {
  EXPECT_EQ(format_size(512), "512 bytes");
  EXPECT_EQ(format_size(1536), "1.50 KiB");
  EXPECT_EQ(format_size(uint64_t{2} << 30), "2.00 GiB");
  EXPECT_EQ(format_bytes(1536), "1536 bytes (1.50 KiB)");
}

}  // namespace
}  // namespace ds4
