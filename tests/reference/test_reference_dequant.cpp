// Our dequantize_row against ggml's own to_float (via ds4-ref-runner), bit for bit,
// on random blocks (random bytes everywhere, so scales take every f16 class:
// NaN, inf, subnormal, negative) and on blocks with hand-picked extreme scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "quant/quant.h"
#include "reference_client.h"

namespace ds4 {
namespace {

struct Case {
  GgmlType type;
  int random_blocks;                 // blocks of random bytes
  std::vector<size_t> f16_scales;    // byte offsets of f16 scale fields in a block
  std::vector<size_t> e8m0_scales;   // byte offsets of E8M0 exponents in a block
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(ggml_type_name(info.param.type));
}
// Readable parameter in test listings (ctest shows it after the name).
void PrintTo(const Case& c, std::ostream* os) { *os << ggml_type_name(c.type); }

// f16 scales at the edges: ±0, smallest/largest subnormal, smallest normal, one,
// largest finite, ±inf, quiet and signalling NaN.
const std::vector<uint16_t> kExtremeF16 = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00,
                                           0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01};
// E8M0 exponents: ggml's special case 0, the smallest normal, 2^0, the largest two.
const std::vector<uint8_t> kExtremeE8M0 = {0, 1, 2, 126, 127, 128, 253, 254, 255};

std::vector<uint8_t> make_blocks(const Case& c, size_t block_bytes) {
  std::mt19937_64 rng(0x5eed0000u + static_cast<uint32_t>(c.type));
  std::vector<uint8_t> out(static_cast<size_t>(c.random_blocks) * block_bytes);
  for (auto& b : out) b = static_cast<uint8_t>(rng());

  auto random_block = [&] {
    std::vector<uint8_t> b(block_bytes);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
  };
  auto append = [&](const std::vector<uint8_t>& b) { out.insert(out.end(), b.begin(), b.end()); };

  // Every combination of extreme values over the scale fields (1 or 2 fields), each
  // with random codes, a few times over.
  for (int rep = 0; rep < 4; ++rep) {
    if (c.f16_scales.size() == 1) {
      for (uint16_t v : kExtremeF16) {
        auto b = random_block();
        std::memcpy(&b[c.f16_scales[0]], &v, 2);
        append(b);
      }
    } else if (c.f16_scales.size() == 2) {
      for (uint16_t v0 : kExtremeF16)
        for (uint16_t v1 : kExtremeF16) {
          auto b = random_block();
          std::memcpy(&b[c.f16_scales[0]], &v0, 2);
          std::memcpy(&b[c.f16_scales[1]], &v1, 2);
          append(b);
        }
    }
    for (size_t off : c.e8m0_scales)
      for (uint8_t e : kExtremeE8M0) {
        auto b = random_block();
        b[off] = e;
        append(b);
      }
  }
  // All-zero and all-ones blocks.
  append(std::vector<uint8_t>(block_bytes, 0x00));
  append(std::vector<uint8_t>(block_bytes, 0xff));
  return out;
}

class ReferenceDequant : public testing::TestWithParam<Case> {};

TEST_P(ReferenceDequant, BitExactWithGgmlToFloat) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  const Case& c = GetParam();
  const GgmlTypeTraits& t = ggml_type_traits(c.type);
  std::vector<uint8_t> blocks;
  if (t.block_elems == 1) {
    // Plain 16-bit types: every bit pattern.
    for (uint32_t v = 0; v < 65536; ++v) {
      blocks.push_back(static_cast<uint8_t>(v));
      blocks.push_back(static_cast<uint8_t>(v >> 8));
    }
  } else {
    blocks = make_blocks(c, t.block_bytes);
  }
  const size_t n_blocks = blocks.size() / t.block_bytes;
  const int64_t n = static_cast<int64_t>(n_blocks) * t.block_elems;

  const std::vector<float> theirs = reference::dequantize(c.type, blocks, n);
  std::vector<float> ours(static_cast<size_t>(n));
  quant::dequantize_row(c.type, blocks.data(), ours.data(), n);

  size_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(ours[static_cast<size_t>(i)]);
    const uint32_t b = std::bit_cast<uint32_t>(theirs[static_cast<size_t>(i)]);
    if (a == b) continue;
    if (++mismatches <= 5) {
      const size_t blk = static_cast<size_t>(i) / t.block_elems;
      std::string hex;
      for (size_t k = 0; k < std::min<size_t>(t.block_bytes, 24); ++k) {
        char buf[4];
        std::snprintf(buf, sizeof buf, "%02x", blocks[blk * t.block_bytes + k]);
        hex += buf;
      }
      ADD_FAILURE() << ggml_type_name(c.type) << " block " << blk << " element " << i % t.block_elems
                    << ": ours 0x" << std::hex << a << " (" << ours[static_cast<size_t>(i)] << "), ggml 0x" << b
                    << " (" << theirs[static_cast<size_t>(i)] << "); block starts " << hex;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << n << " elements in " << n_blocks << " blocks";
  std::printf("%-8s %zu blocks, %lld elements compared bit for bit, %zu mismatches\n",
              std::string(ggml_type_name(c.type)).c_str(), n_blocks, static_cast<long long>(n), mismatches);
}

INSTANTIATE_TEST_SUITE_P(
    Types, ReferenceDequant,
    testing::Values(Case{GgmlType::F16, 0, {}, {}}, Case{GgmlType::BF16, 0, {}, {}},
                    Case{GgmlType::Q8_0, 8192, {0}, {}},         // d at 0
                    Case{GgmlType::Q2_K, 4096, {80, 82}, {}},    // d at 80, dmin at 82
                    Case{GgmlType::Q4_K, 4096, {0, 2}, {}},      // d at 0, dmin at 2
                    Case{GgmlType::Q6_K, 4096, {208}, {}},       // d at 208
                    Case{GgmlType::IQ2_XXS, 4096, {0}, {}},      // d at 0
                    Case{GgmlType::IQ2_XS, 4096, {0}, {}},       // d at 0
                    Case{GgmlType::IQ2_S, 4096, {0}, {}},        // d at 0
                    Case{GgmlType::IQ1_M, 4096, {}, {}},         // d spread over scale nibbles
                    Case{GgmlType::IQ1_S, 4096, {0}, {}},        // d at 0
                    Case{GgmlType::MXFP4, 8192, {}, {0}},        // e at 0
                    Case{GgmlType::IQ3_XXS, 4096, {0}, {}},      // d at 0
                    Case{GgmlType::IQ3_S, 4096, {0}, {}},        // d at 0
                    Case{GgmlType::Q3_K, 4096, {108}, {}},       // d at 108
                    Case{GgmlType::Q5_K, 4096, {0, 2}, {}},      // d at 0, dmin at 2
                    Case{GgmlType::IQ4_NL, 8192, {0}, {}},       // d at 0
                    Case{GgmlType::IQ4_XS, 4096, {0}, {}},       // d at 0
                    Case{GgmlType::Q4_0, 8192, {0}, {}},         // d at 0
                    Case{GgmlType::Q4_1, 8192, {0, 2}, {}},      // d at 0, m at 2
                    Case{GgmlType::Q5_0, 8192, {0}, {}},         // d at 0
                    Case{GgmlType::Q5_1, 8192, {0, 2}, {}}),     // d at 0, m at 2
    case_name);

// ggml (v0.4.0) has no to_float for Q8_K, an activation-only format, so it cannot
// serve as a reference there; if a later ggml adds one, this says so and the type
// joins the list above.
TEST(ReferenceDequantQ8K, GgmlHasNoToFloat) {
  ASSERT_TRUE(reference::available());
  std::vector<uint8_t> block(ggml_type_traits(GgmlType::Q8_K).block_bytes, 0);
  try {
    reference::dequantize(GgmlType::Q8_K, block, 256);
    FAIL() << "ggml now dequantizes q8_K: add it to the bit-exact comparison";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no to_float"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds4
