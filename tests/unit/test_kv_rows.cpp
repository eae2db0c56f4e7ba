// KV-cache row tables: f16 storage in Default (rows rounded once, read back
// exactly), f32 in Quality (rows verbatim), bytes, and refusals on restore.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/kv_rows.h"
#include "core/error.h"
#include "core/fp16.h"
#include "support/error_of.h"

namespace ds4::cpu {
namespace {

std::vector<float> read(const KvRows& t, int64_t r) {
  std::vector<float> scratch(static_cast<size_t>(t.width()));
  const float* p = t.row(r, scratch.data());
  return {p, p + t.width()};
}

TEST(KvRows, DefaultStoresF16RoundedRowsQualityVerbatim) {
  const std::vector<float> row = {0.1f, -3.14159f, 1e-6f, 65504.0f, -0.0f};
  KvRows d(5, Numerics::Default), q(5, Numerics::Quality);
  EXPECT_TRUE(d.is_f16());
  EXPECT_FALSE(q.is_f16());
  d.append(row);
  q.append(row);
  ASSERT_EQ(d.rows(), 1);
  for (size_t i = 0; i < row.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(read(d, 0)[i]), std::bit_cast<uint32_t>(f16_round(row[i]))) << i;
    EXPECT_EQ(d.f16_row(0)[i], f32_to_f16(row[i])) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(read(q, 0)[i]), std::bit_cast<uint32_t>(row[i])) << i;
  }
  // An f32 table hands out its own row; an f16 one converts into the scratch.
  std::vector<float> scratch(5);
  EXPECT_NE(q.row(0, scratch.data()), scratch.data());
  EXPECT_EQ(d.row(0, scratch.data()), scratch.data());
  EXPECT_EQ(d.bytes(), 5u * 2);
  EXPECT_EQ(q.bytes(), 5u * 4);
  EXPECT_EQ(kv_elem_bytes(Numerics::Default), 2u);
  EXPECT_EQ(kv_elem_bytes(Numerics::Quality), 4u);
}

TEST(KvRows, RingSetOverwritesInPlace) {
  KvRows t(2, Numerics::Default);
  t.resize(3);
  EXPECT_EQ(t.rows(), 3);
  EXPECT_EQ(read(t, 2), (std::vector<float>{0.0f, 0.0f}));
  t.set(1, std::vector<float>{1.0f, 2.0f});
  EXPECT_EQ(read(t, 1), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_FALSE(test::error_of([&] { t.set(3, std::vector<float>{1.0f, 2.0f}); }).empty());
  EXPECT_FALSE(test::error_of([&] { t.set(0, std::vector<float>{1.0f}); }).empty());
  t.clear();
  EXPECT_EQ(t.rows(), 0);
  EXPECT_EQ(t.bytes(), 0u);
}

TEST(KvRows, AssignKeepsF16ValuesAndRefusesOthers) {
  KvRows t(3, Numerics::Default);
  const std::vector<float> good = {f16_round(0.3f), 1.0f, -2.5f, 0.0f, f16_round(-7.77f), 1024.0f};
  t.assign(good);
  ASSERT_EQ(t.rows(), 2);
  EXPECT_EQ(read(t, 1), (std::vector<float>{0.0f, f16_round(-7.77f), 1024.0f}));
  std::vector<float> bad = good;
  bad[4] = std::nextafter(bad[4], 0.0f);
  const std::string err = test::error_of([&] { t.assign(bad); });
  EXPECT_NE(err.find("row 1 value 1"), std::string::npos) << err;
  EXPECT_EQ(t.rows(), 2);  // unchanged
  EXPECT_EQ(read(t, 1), (std::vector<float>{0.0f, f16_round(-7.77f), 1024.0f}));
  EXPECT_FALSE(test::error_of([&] { t.assign(std::vector<float>(4, 0.0f)); }).empty());  // not whole rows
  // Quality keeps any f32 value.
  KvRows q(3, Numerics::Quality);
  q.assign(bad);
  EXPECT_EQ(read(q, 1)[1], bad[4]);
  // A 0-wide table holds nothing and takes nothing.
  KvRows none(0, Numerics::Default);
  none.assign({});
  EXPECT_EQ(none.rows(), 0);
  EXPECT_FALSE(test::error_of([&] { none.assign(std::vector<float>(1, 0.0f)); }).empty());
}

}  // namespace
}  // namespace ds4::cpu
