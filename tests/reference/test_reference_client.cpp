// The reference client itself: results survive the on-disk cache unchanged, damaged
// cache entries are recomputed rather than trusted, and runner failures arrive as
// ds4::Error carrying the runner's message.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "reference_client.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;

using test::read_bytes;
using test::write_bytes;

// A private, empty cache folder for one test.
class ReferenceClient : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
    tmp_ = std::make_unique<test::TempDir>("ds4-refcache-");
    dir_ = tmp_->path();
    if (const char* old = std::getenv("DS4_REFERENCE_CACHE")) old_ = old;
    setenv("DS4_REFERENCE_CACHE", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (old_) {
      setenv("DS4_REFERENCE_CACHE", old_->c_str(), 1);
    } else {
      unsetenv("DS4_REFERENCE_CACHE");
    }
    tmp_.reset();
  }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path());
    return out;
  }

  std::unique_ptr<test::TempDir> tmp_;
  fs::path dir_;
  std::optional<std::string> old_;
};

// One Q8_0 block, d = 0.5, q[i] = i - 16: ggml must give (i - 16) / 2 exactly.
std::vector<uint8_t> q8_0_block() {
  std::vector<uint8_t> b(34);
  const uint16_t d = f32_to_f16(0.5f);
  std::memcpy(b.data(), &d, 2);
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  return b;
}

void expect_q8_0_values(const std::vector<float>& y) {
  ASSERT_EQ(y.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], static_cast<float>(i - 16) * 0.5f) << "element " << i;
}

TEST_F(ReferenceClient, CachesResultsUnchanged) {
  const auto block = q8_0_block();
  const std::vector<float> first = reference::dequantize(GgmlType::Q8_0, block, 32);
  expect_q8_0_values(first);
  ASSERT_EQ(entries().size(), 1u) << "one call, one cache entry";
  const std::vector<float> second = reference::dequantize(GgmlType::Q8_0, block, 32);
  EXPECT_EQ(second, first);
  EXPECT_EQ(entries().size(), 1u);

  // Different input, different entry.
  auto other = block;
  other[2] = 5;
  EXPECT_EQ(reference::dequantize(GgmlType::Q8_0, other, 32)[0], 2.5f);
  EXPECT_EQ(entries().size(), 2u);
}

TEST_F(ReferenceClient, DamagedEntriesAreRecomputed) {
  const auto block = q8_0_block();
  expect_q8_0_values(reference::dequantize(GgmlType::Q8_0, block, 32));
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries().front();
  const std::vector<uint8_t> good = read_bytes(entry);

  // A flipped payload byte (the size still matches): the checksum must catch it.
  auto flipped = good;
  flipped[20] ^= 0x40;
  write_bytes(entry, flipped);
  expect_q8_0_values(reference::dequantize(GgmlType::Q8_0, block, 32));
  EXPECT_EQ(read_bytes(entry), good) << "the entry was not rewritten";

  // A truncated entry.
  write_bytes(entry, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(good.size() / 2)));
  expect_q8_0_values(reference::dequantize(GgmlType::Q8_0, block, 32));
  EXPECT_EQ(read_bytes(entry), good);

  // An empty one.
  write_bytes(entry, {});
  expect_q8_0_values(reference::dequantize(GgmlType::Q8_0, block, 32));
  EXPECT_EQ(read_bytes(entry), good);
}

TEST_F(ReferenceClient, RunnerFailuresCarryItsMessage) {
  std::vector<float> x(256, 1.0f);
  try {
    reference::quantize(GgmlType::IQ2_XXS, x, 256, nullptr);
    FAIL() << "ggml cannot quantize IQ2_XXS without an imatrix; the runner must refuse";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without --imatrix"), std::string::npos) << e.what();
  }

  const fs::path junk = dir_ / "not-a-model.gguf";
  write_bytes(junk, std::vector<uint8_t>(64, 0x42));
  try {
    reference::logits(junk.string(), {1, 2, 3});
    FAIL() << "llama.cpp loaded a file of junk";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not load model"), std::string::npos) << e.what();
  }
  // Failures are not cached.
  for (const auto& p : entries()) EXPECT_EQ(p, junk) << "unexpected cache entry " << p;
}

TEST_F(ReferenceClient, RejectsMismatchedSizesBeforeRunning) {
  std::vector<uint8_t> short_block(33);
  EXPECT_THROW(reference::dequantize(GgmlType::Q8_0, short_block, 32), Error);
  std::vector<float> x(300);
  EXPECT_THROW(reference::quantize(GgmlType::Q8_0, x, 300, nullptr), Error);
}

}  // namespace
}  // namespace ds4
