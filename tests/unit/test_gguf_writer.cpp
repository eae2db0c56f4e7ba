// GGUF writer: a golden file whose bytes are spelled out from the format spec
// (SYSTEMS.md 1.1, ggml's gguf_write_out layout), round trips through the
// reader, layout rules, validation and I/O errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using ds4::GgmlType;
using ds4::gguf::File;
using ds4::gguf::MetaValue;
using ds4::gguf::Value;
using ds4::gguf::ValueType;
using ds4::gguf::Writer;

using ds4::test::error_of;
using ds4::test::program_temp_dir;
using ds4::test::read_bytes;

TEST(GgufWriter, GoldenBytesMatchTheSpec) {
  Writer w;
  w.set_string("general.architecture", "ds4");
  w.set_u32("x.n", 7);
  const float data[2] = {1.0f, -2.0f};
  std::vector<uint8_t> bytes(8);
  std::memcpy(bytes.data(), data, 8);
  w.add_tensor("t", GgmlType::F32, {2}, bytes);
  const fs::path path = program_temp_dir() / "golden.gguf";
  w.write(path);

  // clang-format off
  const std::vector<uint8_t> expected = {
      // header: magic "GGUF", version 3, tensor count 1, metadata count 2
      'G', 'G', 'U', 'F',  3, 0, 0, 0,
      1, 0, 0, 0, 0, 0, 0, 0,
      2, 0, 0, 0, 0, 0, 0, 0,
      // key "general.architecture" (u64 length 20), type 8 = string, value "ds4" (u64 length 3)
      20, 0, 0, 0, 0, 0, 0, 0,
      'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'a', 'r', 'c', 'h', 'i', 't', 'e', 'c', 't', 'u', 'r', 'e',
      8, 0, 0, 0,
      3, 0, 0, 0, 0, 0, 0, 0,  'd', 's', '4',
      // key "x.n", type 4 = u32, value 7
      3, 0, 0, 0, 0, 0, 0, 0,  'x', '.', 'n',
      4, 0, 0, 0,
      7, 0, 0, 0,
      // tensor info: name "t", n_dims 1, ne[0] = 2, type 0 = f32, offset 0
      1, 0, 0, 0, 0, 0, 0, 0,  't',
      1, 0, 0, 0,
      2, 0, 0, 0, 0, 0, 0, 0,
      0, 0, 0, 0,
      0, 0, 0, 0, 0, 0, 0, 0,
      // 119 bytes so far: zero padding to 128, the data section start
      0, 0, 0, 0, 0, 0, 0, 0, 0,
      // tensor data: 1.0f = 0x3f800000, -2.0f = 0xc0000000, then zero padding to 32 bytes
      0x00, 0x00, 0x80, 0x3f,  0x00, 0x00, 0x00, 0xc0,
      0, 0, 0, 0, 0, 0, 0, 0,  0, 0, 0, 0, 0, 0, 0, 0,  0, 0, 0, 0, 0, 0, 0, 0,
  };
  // clang-format on
  EXPECT_EQ(read_bytes(path), expected);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST(GgufWriter, GoldenBytesWithCustomAlignment) {
  // A non-default alignment is written as general.alignment (u32) first, and
  // both the data section and every tensor are padded to it.
  Writer w(64);
  w.add_tensor("a", GgmlType::I8, {3}, std::vector<uint8_t>{1, 2, 3});
  const fs::path path = program_temp_dir() / "golden64.gguf";
  w.write(path);
  // clang-format off
  std::vector<uint8_t> expected = {
      'G', 'G', 'U', 'F',  3, 0, 0, 0,
      1, 0, 0, 0, 0, 0, 0, 0,
      1, 0, 0, 0, 0, 0, 0, 0,
      17, 0, 0, 0, 0, 0, 0, 0,
      'g', 'e', 'n', 'e', 'r', 'a', 'l', '.', 'a', 'l', 'i', 'g', 'n', 'm', 'e', 'n', 't',
      4, 0, 0, 0,
      64, 0, 0, 0,
      // tensor info "a": n_dims 1, ne[0] = 3, type 24 = i8, offset 0
      1, 0, 0, 0, 0, 0, 0, 0,  'a',
      1, 0, 0, 0,
      3, 0, 0, 0, 0, 0, 0, 0,
      24, 0, 0, 0,
      0, 0, 0, 0, 0, 0, 0, 0,
  };
  // clang-format on
  ASSERT_EQ(expected.size(), 90u);
  expected.resize(128, 0);  // pad to 2 x 64
  expected.insert(expected.end(), {1, 2, 3});
  expected.resize(192, 0);  // pad the tensor to 64
  EXPECT_EQ(read_bytes(path), expected);
}

TEST(GgufWriter, EmptyFileIsHeaderPaddedToAlignment) {
  Writer w;
  const fs::path path = program_temp_dir() / "empty.gguf";
  w.write(path);
  std::vector<uint8_t> expected = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  expected.resize(32, 0);
  EXPECT_EQ(read_bytes(path), expected);
  const File f = File::open(path);
  EXPECT_EQ(f.tensors().size(), 0u);
  EXPECT_EQ(f.metadata().size(), 0u);
  EXPECT_EQ(f.data_offset(), 32u);
}

TEST(GgufWriter, EveryMetadataTypeRoundTrips) {
  Writer w;
  w.set_u8("u8", 200);
  w.set_i8("i8", -100);
  w.set_u16("u16", 60000);
  w.set_i16("i16", -30000);
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set_u64("u64", 18000000000000000000ull);
  w.set_i64("i64", -9000000000000000000ll);
  w.set_f32("f32", 1.5e-6f);
  w.set_f64("f64", 3.141592653589793);
  w.set_bool("bool", true);
  w.set_string("string", std::string("a\0b\xff", 4));
  w.set_array_u8("a_u8", {1, 2, 255});
  w.set_array_i8("a_i8", {-1, 2});
  w.set_array_u32("a_u32", {0, 4, 128});
  w.set_array_i32("a_i32", {-5, 10});
  w.set_array_u64("a_u64", {1ull << 40});
  w.set_array_i64("a_i64", {-(1ll << 40)});
  w.set_array_f32("a_f32", {0.5f, -1.25f});
  w.set_array_f64("a_f64", {1e300});
  w.set_array_bool("a_bool", {true, false, true});
  w.set_array_string("a_str", {"x", "", "hello"});
  w.set_array_u32("empty", {});
  w.set_value("nested", MetaValue::array(ValueType::ARRAY, {MetaValue::array_string(std::vector<std::string>{"p", "q"}),
                                                            MetaValue::array_i16(std::vector<int16_t>{-7})}));
  const fs::path path = program_temp_dir() / "types.gguf";
  w.write(path);

  const File f = File::open(path);
  ASSERT_EQ(f.metadata().size(), 24u);
  EXPECT_EQ(f.metadata()[0].key, "u8");
  EXPECT_EQ(f.get("u8").type(), ValueType::U8);
  EXPECT_EQ(f.get("u8").as_u8(), 200);
  EXPECT_EQ(f.get("i8").type(), ValueType::I8);
  EXPECT_EQ(f.get("i8").as_i8(), -100);
  EXPECT_EQ(f.get("u16").as_u16(), 60000);
  EXPECT_EQ(f.get("i16").as_i16(), -30000);
  EXPECT_EQ(f.get_u32("u32"), 4000000000u);
  EXPECT_EQ(f.get_i32("i32"), -2000000000);
  EXPECT_EQ(f.get_u64("u64"), 18000000000000000000ull);
  EXPECT_EQ(f.get_i64("i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_f32("f32"), 1.5e-6f);
  EXPECT_EQ(f.get_f64("f64"), 3.141592653589793);
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("string"), std::string("a\0b\xff", 4));
  EXPECT_EQ(f.get("a_u8").array_u8(), (std::vector<uint8_t>{1, 2, 255}));
  EXPECT_EQ(f.get("a_i8").array_i32(), (std::vector<int32_t>{-1, 2}));
  EXPECT_EQ(f.get("a_u32").array_u32(), (std::vector<uint32_t>{0, 4, 128}));
  EXPECT_EQ(f.get("a_i32").array_i32(), (std::vector<int32_t>{-5, 10}));
  EXPECT_EQ(f.get("a_u64").array_u64(), (std::vector<uint64_t>{1ull << 40}));
  EXPECT_EQ(f.get("a_i64").array_i64(), (std::vector<int64_t>{-(1ll << 40)}));
  EXPECT_EQ(f.get("a_f32").array_f32(), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(f.get("a_f64").array_f64(), (std::vector<double>{1e300}));
  EXPECT_EQ(f.get("a_bool").array_bool(), (std::vector<bool>{true, false, true}));
  const auto strs = f.get("a_str").array_strings();
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs[0], "x");
  EXPECT_EQ(strs[1], "");
  EXPECT_EQ(strs[2], "hello");
  EXPECT_EQ(f.get_array("empty").size(), 0u);
  EXPECT_EQ(f.get_array("empty").array_type(), ValueType::U32);
  const Value& nested = f.get_array("nested");
  ASSERT_EQ(nested.array_type(), ValueType::ARRAY);
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested.element(0).array_strings()[1], "q");
  EXPECT_EQ(nested.element(1).array_type(), ValueType::I16);
  EXPECT_EQ(nested.element(1).element(0).as_i16(), -7);
}

TEST(GgufWriter, SettingAKeyAgainReplacesItInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "now a string");
  EXPECT_EQ(w.metadata_count(), 2u);
  const fs::path path = program_temp_dir() / "replace.gguf";
  w.write(path);
  const File f = File::open(path);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "a");
  EXPECT_EQ(f.get_string("a"), "now a string");
  EXPECT_EQ(f.metadata()[1].key, "b");
}

TEST(GgufWriter, CopiesValuesReadFromAnotherFile) {
  Writer src;
  src.set_f32("f", 0.25f);
  src.set_string("s", "text");
  src.set_array_string("tokens", {"a", "bb"});
  src.set_value("nested", MetaValue::array(ValueType::ARRAY, {MetaValue::array_u32(std::vector<uint32_t>{9})}));
  const fs::path a = program_temp_dir() / "copy_src.gguf";
  src.write(a);
  const File in = File::open(a);

  Writer dst;
  for (const auto& e : in.metadata()) dst.set_value(std::string(e.key), e.value);
  const fs::path b = program_temp_dir() / "copy_dst.gguf";
  dst.write(b);
  EXPECT_EQ(read_bytes(a), read_bytes(b));
}

TEST(GgufWriter, TensorLayoutFollowsGgml) {
  Writer w;
  std::vector<std::string> order;
  auto fill_with = [&](std::string name, uint8_t v) {
    return [&order, name, v](std::span<uint8_t> dst) {
      for (uint8_t b : dst) EXPECT_EQ(b, 0) << "buffer must arrive zeroed";
      order.push_back(name);
      std::fill(dst.begin(), dst.end(), v);
    };
  };
  w.add_tensor("q", GgmlType::Q8_0, {64, 3}, fill_with("q", 0x11));  // 2 blocks x 34 x 3 rows = 204 bytes
  w.add_tensor("e", GgmlType::F16, {5}, fill_with("e", 0x22));       // 10 bytes
  w.add_tensor("k", GgmlType::Q4_K, {256, 2}, fill_with("k", 0x33));  // 288 bytes
  EXPECT_EQ(w.tensor_data_bytes(), 224u + 32u + 288u);
  const fs::path path = program_temp_dir() / "layout.gguf";
  w.write(path);
  EXPECT_EQ(order, (std::vector<std::string>{"q", "e", "k"}));

  const File f = File::open(path);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].offset, 0u);
  EXPECT_EQ(f.tensors()[0].nbytes, 204u);
  EXPECT_EQ(f.tensors()[1].offset, 224u);
  EXPECT_EQ(f.tensors()[2].offset, 256u);
  EXPECT_EQ(f.file_size(), f.data_offset() + 544u);
  const auto bytes = read_bytes(path);
  for (const auto& t : f.tensors()) {
    const uint8_t v = t.name == "q" ? 0x11 : t.name == "e" ? 0x22 : 0x33;
    for (uint64_t i = 0; i < t.nbytes; ++i) ASSERT_EQ(t.data[i], v) << t.name;
  }
  // Padding is zeros.
  for (uint64_t i = f.data_offset() + 204; i < f.data_offset() + 224; ++i) ASSERT_EQ(bytes[i], 0);
  for (uint64_t i = f.data_offset() + 234; i < f.data_offset() + 256; ++i) ASSERT_EQ(bytes[i], 0);
}

TEST(GgufWriter, StreamsEachTensorBeforeAskingForTheNext) {
  // When the second tensor's fill runs, the first tensor's bytes must already
  // be in the file: data is written as it is produced, not gathered.
  Writer w;
  w.add_tensor("first", GgmlType::F32, {1024}, [](std::span<uint8_t> dst) { std::fill(dst.begin(), dst.end(), 7); });
  const fs::path path = program_temp_dir() / "stream.gguf";
  uint64_t size_seen = 0;
  w.add_tensor("second", GgmlType::F32, {8}, [&](std::span<uint8_t>) {
    size_seen = fs::file_size(path.string() + ".tmp");
  });
  w.write(path);
  const File f = File::open(path);
  EXPECT_GE(size_seen, f.data_offset() + 4096);
}

TEST(GgufWriter, WithoutDataIsTheFileWithZeroTensorsAndCallsNoFill) {
  // The same directory and size as a full write whose tensors are all zero,
  // byte for byte; no fill function runs.
  bool filled = false;
  const auto fill = [&](std::span<uint8_t> dst) {
    filled = true;
    std::fill(dst.begin(), dst.end(), 0);
  };
  Writer w(64);
  w.set_string("general.architecture", "test");
  w.add_tensor("a", GgmlType::Q8_0, {64, 3}, fill);
  w.add_tensor("b", GgmlType::F16, {5}, fill);
  const fs::path full = program_temp_dir() / "full.gguf", hollow = program_temp_dir() / "hollow.gguf";
  w.write(full);
  ASSERT_TRUE(filled);
  filled = false;
  w.write_without_data(hollow);
  EXPECT_FALSE(filled);
  EXPECT_EQ(read_bytes(hollow), read_bytes(full));
  const File f = File::open(hollow);
  EXPECT_EQ(f.tensors().size(), 2u);
}

TEST(GgufWriter, RejectsBadAlignment) {
  EXPECT_NE(error_of([] { Writer w(0); }).find("alignment 0 is not a power of two"), std::string::npos);
  EXPECT_NE(error_of([] { Writer w(3); }).find("alignment 3 is not a power of two"), std::string::npos);
  Writer w(64);
  EXPECT_NE(error_of([&] { w.set_u32("general.alignment", 16); }).find("must be the u32 64"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_string("general.alignment", "64"); }).find("general.alignment"), std::string::npos);
  w.set_u32("general.alignment", 64);  // the same value is fine
  EXPECT_EQ(w.metadata_count(), 1u);
}

TEST(GgufWriter, RejectsBadTensors) {
  Writer w;
  w.add_tensor("ok", GgmlType::F32, {4}, nullptr);
  auto err = [&](std::string name, GgmlType type, std::vector<uint64_t> ne) {
    return error_of([&] { w.add_tensor(name, type, ne, nullptr); });
  };
  EXPECT_NE(err("ok", GgmlType::F32, {4}).find("'ok': duplicate tensor name"), std::string::npos);
  EXPECT_NE(err("z", GgmlType::F32, {4, 0}).find("'z': dimension 1 is 0"), std::string::npos);
  EXPECT_NE(err("n", GgmlType::F32, {}).find("'n': 0 dimensions"), std::string::npos);
  EXPECT_NE(err("n5", GgmlType::F32, {1, 1, 1, 1, 1}).find("5 dimensions"), std::string::npos);
  EXPECT_NE(err("b", GgmlType::Q8_0, {48, 2}).find("ne[0] = 48 is not a multiple of the q8_0 block size 32"),
            std::string::npos);
  EXPECT_NE(err("o", GgmlType::F32, {1ull << 32, 1ull << 32}).find("element count overflows"), std::string::npos);
  EXPECT_NE(err("", GgmlType::F32, {1}).find("tensor name is empty"), std::string::npos);
  EXPECT_NE(err(std::string(64, 'x'), GgmlType::F32, {1}).find("64 bytes, ggml allows at most 63"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("s", GgmlType::F32, {4}, std::vector<uint8_t>(15)); })
                .find("'s': 15 bytes given, its shape and type need 16"),
            std::string::npos);
  EXPECT_EQ(w.tensor_count(), 1u);
}

TEST(GgufWriter, RejectsBadKeys) {
  Writer w;
  EXPECT_NE(error_of([&] { w.set_u32("", 1); }).find("metadata key is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_u32("bad\xff", 1); }).find("'bad\\xff' is not valid UTF-8"), std::string::npos);
  std::vector<MetaValue> mixed = {MetaValue::u32(1), MetaValue::i32(2)};
  EXPECT_NE(error_of([&] { MetaValue::array(ValueType::U32, mixed); }).find("element 1 has type i32"),
            std::string::npos);
  MetaValue deep = MetaValue::array_u8(std::vector<uint8_t>{1});
  for (int i = 0; i < 7; ++i) deep = MetaValue::array(ValueType::ARRAY, {deep});
  EXPECT_EQ(deep.array_depth(), 8u);
  EXPECT_NE(error_of([&] { MetaValue::array(ValueType::ARRAY, {deep}); }).find("nested more than 8 deep"),
            std::string::npos);
}

TEST(GgufWriter, IoErrorNamesThePathAndLeavesNothing) {
  Writer w;
  w.set_u32("a", 1);
  const fs::path bad = program_temp_dir() / "no_such_dir" / "x.gguf";
  const std::string msg = error_of([&] { w.write(bad); });
  EXPECT_NE(msg.find(bad.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(GgufWriter, FailingFillLeavesNoFile) {
  Writer w;
  w.add_tensor("t", GgmlType::F32, {4}, [](std::span<uint8_t>) { throw std::runtime_error("source gone"); });
  const fs::path path = program_temp_dir() / "fill_throws.gguf";
  EXPECT_THROW(w.write(path), std::runtime_error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

// A resumable write (WriteOptions::resume): an interrupted run leaves its
// temporary file; the next run with the same directory keeps the tensors
// wholly in it (their fill functions are not called again) and the result is
// the file an uninterrupted write makes, byte for byte. A temporary file of
// another layout, or one cut inside the directory, is started over.
TEST(GgufWriter, ResumeKeepsWholeTensorsOfTheSameFile) {
  std::vector<int> fills(4, 0);
  auto make = [&fills](uint8_t salt) {
    Writer w;
    w.set_string("general.architecture", "test");
    for (int i = 0; i < 4; ++i) {
      w.add_tensor("t" + std::to_string(i), GgmlType::F32, {static_cast<uint64_t>(5 + i)},
                   [&fills, i, salt](std::span<uint8_t> dst) {
                     ++fills[static_cast<size_t>(i)];
                     for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<uint8_t>(k * 7 + i + salt);
                   });
    }
    return w;
  };
  const fs::path dir = program_temp_dir();
  const std::string fresh = (dir / "resume_fresh.gguf").string(), path = (dir / "resume.gguf").string();
  make(0).write(fresh);

  Writer::WriteOptions o;
  o.temp_suffix = ".part";
  o.resume = true;
  o.progress = [](size_t tensors, uint64_t) {
    if (tensors == 3) throw ds4::Error("interrupted");
  };
  EXPECT_EQ(error_of([&] { make(0).write(path, o); }), "interrupted");
  ASSERT_TRUE(fs::exists(path + ".part")) << "kept for a resume";
  EXPECT_FALSE(fs::exists(path));

  // Cut in the middle of tensor 3's bytes, as a kill would.
  fs::resize_file(path + ".part", fs::file_size(path + ".part") - 5);
  fills.assign(4, 0);
  size_t first_progress = 99;
  o.progress = [&first_progress](size_t tensors, uint64_t) { first_progress = std::min(first_progress, tensors); };
  EXPECT_EQ(make(0).write(path, o), 2u) << "tensors 0 and 1 were whole";
  EXPECT_EQ(first_progress, 2u);
  EXPECT_EQ(fills, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(read_bytes(path), read_bytes(fresh));
  EXPECT_FALSE(fs::exists(path + ".part"));

  // Another file's leftovers (other metadata): started over.
  Writer other;
  other.set_string("general.architecture", "other");
  other.add_tensor("x", GgmlType::F32, {64}, std::vector<uint8_t>(256, 9));
  other.write(path + ".part.src");
  fs::rename(path + ".part.src", path + ".part");
  fs::remove(path);
  EXPECT_EQ(make(0).write(path, o), 0u);
  EXPECT_EQ(read_bytes(path), read_bytes(fresh));
  // Without resume nothing is kept either.
  o.resume = false;
  make(1).write(path + ".b", o);
  EXPECT_NE(read_bytes(path + ".b"), read_bytes(fresh));
}
