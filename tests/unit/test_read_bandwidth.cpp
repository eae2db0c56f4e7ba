// ReadBandwidth: every byte of the buffer is read on every pass, by every
// reader this CPU runs (the checksum against its closed form: slice t of
// each thread holds the byte t + 1, so each of its 64-bit words is
// (t + 1) * 0x0101010101010101), and bad sizes or readers are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/read_bandwidth.h"

namespace ds4 {
namespace {

// Threads x words per slice, all slices equal (chunks divide evenly).
uint64_t expected_checksum(int threads, uint64_t words_per_slice, int passes) {
  uint64_t check = 0;
  for (int t = 0; t < threads; ++t) {
    check ^= static_cast<uint64_t>(passes) * words_per_slice * static_cast<uint64_t>(t + 1) * 0x0101010101010101ull;
  }
  return check;
}

TEST(ReadBandwidth, EveryReaderReadsEveryByteOnEveryPass) {
  const CpuFeatures& f = cpu_features();
  for (const std::string isa : {"scalar", "avx2", "avx512", "best"}) {
    if ((isa == "avx2" && !f.avx2) || (isa == "avx512" && !f.avx512f)) continue;
    for (int threads : {1, 3}) {
      // 40 chunks of 256 bytes per thread, plus 100 bytes that are not a whole chunk.
      ReadBandwidth probe(static_cast<size_t>(threads) * 40 * 256 + 100, threads, isa);
      EXPECT_EQ(probe.bytes(), static_cast<size_t>(threads) * 40 * 256);
      EXPECT_EQ(probe.threads(), threads);
      EXPECT_EQ(probe.checksum(), 0u) << "nothing read yet";
      for (int pass = 1; pass <= 3; ++pass) {
        const double gbps = probe.pass();
        EXPECT_TRUE(std::isfinite(gbps) && gbps > 0) << gbps;
        EXPECT_EQ(probe.checksum(), expected_checksum(threads, 40 * 256 / 8, pass)) << isa << " " << threads;
      }
      if (isa != "best") {
        EXPECT_EQ(std::string(probe.isa()), isa);
      }
    }
  }
}

TEST(ReadBandwidth, RefusesBadSizesAndReaders) {
  EXPECT_THROW(ReadBandwidth(255, 1), Error);
  EXPECT_THROW(ReadBandwidth(2 * 256, 3), Error);
  EXPECT_THROW(ReadBandwidth(1 << 20, 0), Error);
  EXPECT_THROW(ReadBandwidth(1 << 20, 1, "sse9"), Error);
  if (!cpu_features().avx512f) {
    EXPECT_THROW(ReadBandwidth(1 << 20, 1, "avx512"), Error);
  }
}

}  // namespace
}  // namespace ds4
