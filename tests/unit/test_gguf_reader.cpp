// GGUF reader on files assembled byte by byte here from the format spec
// (SYSTEMS.md 1.1), independent of the writer: every value type, nested
// arrays, typed getters and their errors, the tensor directory and layout.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using ds4::GgmlType;
using ds4::gguf::File;
using ds4::gguf::Value;
using ds4::gguf::ValueType;
using ds4::test::error_of;

namespace {

// Little-endian GGUF bytes, appended field by field.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& raw(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(v); }
  Bytes& u64(uint64_t v) { return raw(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& key(std::string_view k, ValueType t) {
    str(k);
    return u32(static_cast<uint32_t>(t));
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv) {
    u32(0x46554747);
    u32(3);
    u64(n_tensors);
    return u64(n_kv);
  }
  Bytes& tensor(std::string_view name, std::vector<uint64_t> ne, GgmlType type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(static_cast<uint32_t>(type));
    return u64(offset);
  }
  Bytes& pad_to(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
};

// One file holding every metadata value type and two tensors.
std::vector<uint8_t> sample_file() {
  Bytes f;
  f.header(2, 17);
  f.key("general.architecture", ValueType::STRING).str("deepseek4");
  f.key("u8", ValueType::U8).raw<uint8_t>(250);
  f.key("i8", ValueType::I8).raw<int8_t>(-3);
  f.key("u16", ValueType::U16).raw<uint16_t>(65535);
  f.key("i16", ValueType::I16).raw<int16_t>(-32768);
  f.key("u32", ValueType::U32).raw<uint32_t>(43);
  f.key("i32", ValueType::I32).raw<int32_t>(-1);
  f.key("f32", ValueType::F32).raw<float>(1e-6f);
  f.key("bool", ValueType::BOOL).raw<uint8_t>(1);
  f.key("u64", ValueType::U64).raw<uint64_t>(1ull << 40);
  f.key("i64", ValueType::I64).raw<int64_t>(-(1ll << 40));
  f.key("f64", ValueType::F64).raw<double>(0.1);
  f.key("ratios", ValueType::ARRAY).u32(static_cast<uint32_t>(ValueType::I32)).u64(3).raw<int32_t>(0).raw<int32_t>(4).raw<int32_t>(128);
  f.key("tokens", ValueType::ARRAY).u32(static_cast<uint32_t>(ValueType::STRING)).u64(3).str("<s>").str("").str("\xc4\xa0the");
  f.key("flags", ValueType::ARRAY).u32(static_cast<uint32_t>(ValueType::BOOL)).u64(2).raw<uint8_t>(0).raw<uint8_t>(1);
  // [[1.5, 2.5], ["x"]]: an array of arrays with different element types.
  f.key("nested", ValueType::ARRAY).u32(static_cast<uint32_t>(ValueType::ARRAY)).u64(2);
  f.u32(static_cast<uint32_t>(ValueType::F32)).u64(2).raw<float>(1.5f).raw<float>(2.5f);
  f.u32(static_cast<uint32_t>(ValueType::STRING)).u64(1).str("x");
  f.key("scales", ValueType::ARRAY).u32(static_cast<uint32_t>(ValueType::F64)).u64(2).raw<double>(0.5).raw<double>(-2.0);
  // Tensors listed out of offset order: the directory order is kept, and
  // ggml's packing rule is not required.
  f.tensor("blk.0.attn_q_a.weight", {64, 3}, GgmlType::Q8_0, 32);  // 2 blocks x 34 bytes x 3 rows = 204
  f.tensor("output_norm.weight", {4}, GgmlType::F32, 0);           // 16 bytes
  f.pad_to(32);
  const size_t data = f.b.size();
  f.b.resize(data + 32 + 204, 0);
  for (int i = 0; i < 4; ++i) {
    const float v = 0.5f * static_cast<float>(i);
    std::memcpy(&f.b[data + 4 * i], &v, 4);
  }
  f.b[data + 32] = 0xab;
  f.b[data + 32 + 203] = 0xcd;
  return f.b;
}

}  // namespace

TEST(GgufReader, HeaderAndLayout) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  EXPECT_EQ(f.path(), "sample.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.data_offset() + 32 + 204, bytes.size());
  EXPECT_EQ(f.metadata().size(), 17u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.metadata()[16].key, "scales");
  EXPECT_EQ(f.bytes().data(), bytes.data()) << "parse() must not copy";
}

TEST(GgufReader, ScalarValues) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek4");
  EXPECT_EQ(f.get("general.architecture").as_string().data(), reinterpret_cast<const char*>(bytes.data()) + 24 + 8 + 20 + 4 + 8)
      << "strings are views into the file";
  EXPECT_EQ(f.get("u8").as_u8(), 250);
  EXPECT_EQ(f.get("i8").as_i8(), -3);
  EXPECT_EQ(f.get("u16").as_u16(), 65535);
  EXPECT_EQ(f.get("i16").as_i16(), -32768);
  EXPECT_EQ(f.get_u32("u32"), 43u);
  EXPECT_EQ(f.get_i32("i32"), -1);
  EXPECT_EQ(f.get_f32("f32"), 1e-6f);
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_u64("u64"), 1ull << 40);
  EXPECT_EQ(f.get_i64("i64"), -(1ll << 40));
  EXPECT_EQ(f.get_f64("f64"), 0.1);
  EXPECT_EQ(f.metadata()[1].value.type(), ValueType::U8);
  EXPECT_EQ(f.metadata()[11].value.type(), ValueType::F64);
}

TEST(GgufReader, IntegerAndFloatConversions) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  // Widening and in-range narrowing are allowed across integer types.
  EXPECT_EQ(f.get_u64("u32"), 43u);
  EXPECT_EQ(f.get_i64("u8"), 250);
  EXPECT_EQ(f.get_i32("u16"), 65535);
  EXPECT_EQ(f.get("u32").as_u8(), 43);
  EXPECT_EQ(f.get_f64("f32"), static_cast<double>(1e-6f));
  EXPECT_EQ(f.get_f32("f64"), 0.1f);
  // Values that do not fit are errors naming the file, key and value.
  EXPECT_EQ(error_of([&] { f.get_u32("i32"); }), "sample.gguf: metadata key 'i32' value -1 does not fit in u32");
  EXPECT_EQ(error_of([&] { f.get("u8").as_i8(); }), "sample.gguf: metadata key 'u8' value 250 does not fit in i8");
  EXPECT_EQ(error_of([&] { f.get_u32("u64"); }),
            "sample.gguf: metadata key 'u64' value 1099511627776 does not fit in u32");
  EXPECT_EQ(error_of([&] { f.get("i16").as_u16(); }), "sample.gguf: metadata key 'i16' value -32768 does not fit in u16");
}

TEST(GgufReader, TypeErrorsNameFileKeyAndTypes) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  EXPECT_EQ(error_of([&] { f.get_u32("general.architecture"); }),
            "sample.gguf: metadata key 'general.architecture' has type string, expected u32");
  EXPECT_EQ(error_of([&] { f.get_string("u32"); }), "sample.gguf: metadata key 'u32' has type u32, expected string");
  EXPECT_EQ(error_of([&] { f.get_f32("u32"); }), "sample.gguf: metadata key 'u32' has type u32, expected f32");
  EXPECT_EQ(error_of([&] { f.get_bool("u8"); }), "sample.gguf: metadata key 'u8' has type u8, expected bool");
  EXPECT_EQ(error_of([&] { f.get_array("u8"); }), "sample.gguf: metadata key 'u8' has type u8, expected an array");
  EXPECT_EQ(error_of([&] { f.get_u32("tokens"); }),
            "sample.gguf: metadata key 'tokens' has type array of string, expected u32");
  EXPECT_EQ(error_of([&] { f.get("tokens").array_u32(); }),
            "sample.gguf: metadata key 'tokens' has type array of string, expected array of u32");
  EXPECT_EQ(error_of([&] { f.get("tokens").element(0).as_u32(); }),
            "sample.gguf: metadata key 'tokens' element has type string, expected u32");
  EXPECT_EQ(error_of([&] { f.get("tokens").element(3); }),
            "sample.gguf: metadata key 'tokens': element 3 requested, the array has 3");
  EXPECT_EQ(error_of([&] { f.get_u32("deepseek4.block_count"); }),
            "sample.gguf: metadata key 'deepseek4.block_count' missing");
}

TEST(GgufReader, OptionalGetters) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_EQ(f.find_u32("absent"), std::nullopt);
  EXPECT_EQ(f.find_string("absent"), std::nullopt);
  EXPECT_EQ(f.find_array("absent"), nullptr);
  EXPECT_EQ(f.find_u32("u32"), 43u);
  EXPECT_EQ(f.find_i32("i32"), -1);
  EXPECT_EQ(f.find_u64("u64"), 1ull << 40);
  EXPECT_EQ(f.find_i64("i64"), -(1ll << 40));
  EXPECT_EQ(f.find_f32("f32"), 1e-6f);
  EXPECT_EQ(f.find_f64("f64"), 0.1);
  EXPECT_EQ(f.find_bool("bool"), true);
  EXPECT_EQ(f.find_string("general.architecture"), "deepseek4");
  ASSERT_NE(f.find_array("ratios"), nullptr);
  // A present key of the wrong type is still an error.
  EXPECT_NE(error_of([&] { f.find_u32("general.architecture"); }).find("has type string, expected u32"),
            std::string::npos);
}

TEST(GgufReader, Arrays) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  const Value& ratios = f.get_array("ratios");
  EXPECT_EQ(ratios.type_description(), "array of i32");
  EXPECT_EQ(ratios.array_type(), ValueType::I32);
  EXPECT_EQ(ratios.size(), 3u);
  EXPECT_EQ(ratios.array_i32(), (std::vector<int32_t>{0, 4, 128}));
  EXPECT_EQ(ratios.array_u32(), (std::vector<uint32_t>{0, 4, 128}));  // non-negative i32 read as u32
  EXPECT_EQ(ratios.array_i64(), (std::vector<int64_t>{0, 4, 128}));
  EXPECT_EQ(ratios.element(2).as_u32(), 128u);
  EXPECT_EQ(ratios.raw().size(), 12u);

  const Value& tokens = f.get_array("tokens");
  const auto strs = tokens.array_strings();
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs[0], "<s>");
  EXPECT_EQ(strs[1], "");
  EXPECT_EQ(strs[2], "\xc4\xa0the");
  EXPECT_EQ(tokens.element(2).as_string(), "\xc4\xa0the");
  std::vector<std::string> walked;
  tokens.for_each_element([&](const Value& v) { walked.emplace_back(v.as_string()); });
  EXPECT_EQ(walked, (std::vector<std::string>{"<s>", "", "\xc4\xa0the"}));
  int visited = 0;
  tokens.for_each_element([&](const Value&) { return ++visited < 2; });
  EXPECT_EQ(visited, 2) << "returning false stops the walk";

  EXPECT_EQ(f.get_array("flags").array_bool(), (std::vector<bool>{false, true}));
  EXPECT_EQ(f.get_array("scales").array_f64(), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.get_array("scales").array_f32(), (std::vector<float>{0.5f, -2.0f}));

  const Value& nested = f.get_array("nested");
  EXPECT_EQ(nested.type_description(), "array of array");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested.element(0).array_f32(), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ(nested.element(1).array_strings().at(0), "x");
  EXPECT_EQ(nested.raw().size(), (12u + 8u) + (12u + 9u));
}

TEST(GgufReader, TensorDirectory) {
  const auto bytes = sample_file();
  const File f = File::parse(bytes, "sample.gguf");
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto& q = f.tensors()[0];
  EXPECT_EQ(q.name, "blk.0.attn_q_a.weight");
  EXPECT_EQ(q.type, GgmlType::Q8_0);
  EXPECT_EQ(q.ne, (std::vector<uint64_t>{64, 3}));
  EXPECT_EQ(q.n_dims(), 2u);
  EXPECT_EQ(q.dim(0), 64u);
  EXPECT_EQ(q.dim(3), 1u);
  EXPECT_EQ(q.n_elements, 192u);
  EXPECT_EQ(q.nbytes, 204u);
  EXPECT_EQ(q.row_bytes(), 68u);
  EXPECT_EQ(q.n_rows(), 3u);
  EXPECT_EQ(q.offset, 32u);
  EXPECT_EQ(q.file_offset, f.data_offset() + 32);
  EXPECT_EQ(q.data, bytes.data() + q.file_offset);
  EXPECT_EQ(q.bytes().front(), 0xab);
  EXPECT_EQ(q.bytes().back(), 0xcd);

  const auto& n = f.tensor("output_norm.weight");
  EXPECT_EQ(n.type, GgmlType::F32);
  EXPECT_EQ(n.offset, 0u);
  float v[4];
  std::memcpy(v, n.data, 16);
  EXPECT_EQ(v[3], 1.5f);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q_a.weight"), &q);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(error_of([&] { f.tensor("nope"); }), "sample.gguf: tensor 'nope' missing");
  EXPECT_EQ(f.tensor_data_bytes(), 220u);
  EXPECT_EQ(f.parameter_count(), 196u);
}

TEST(GgufReader, AlignmentKeyMovesDataSection) {
  Bytes b;
  b.header(2, 1);
  b.key("general.alignment", ValueType::U32).u32(64);
  b.tensor("a", {3}, GgmlType::F32, 0);
  b.tensor("b", {2}, GgmlType::F32, 64);
  const size_t end_of_infos = b.b.size();
  b.pad_to(64);
  b.b.resize(b.b.size() + 72, 0);
  const File f = File::parse(b.b, "a64.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset(), (end_of_infos + 63) / 64 * 64);
  EXPECT_EQ(f.tensor("b").file_offset, f.data_offset() + 64);
}

TEST(GgufReader, ValuesStayValidWhenTheFileIsMoved) {
  const auto bytes = sample_file();
  File f = File::parse(bytes, "sample.gguf");
  const Value* v = f.find("tokens");
  const auto* t = f.find_tensor("output_norm.weight");
  File g = std::move(f);
  EXPECT_EQ(v->array_strings()[0], "<s>");
  EXPECT_EQ(g.find("tokens"), v);
  EXPECT_EQ(g.find_tensor("output_norm.weight"), t);
}

TEST(GgufReader, StringValuesAreNotCheckedForUtf8) {
  Bytes b;
  b.header(0, 1);
  b.key("tokenizer.ggml.tokens", ValueType::ARRAY).u32(static_cast<uint32_t>(ValueType::STRING)).u64(1).str("\xff\xfe");
  const File f = File::parse(b.b, "bytes.gguf");
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").array_strings()[0], "\xff\xfe");
}

TEST(GgufReader, OpenMapsAFileFromDisk) {
  const ds4::test::TempDir tmp;
  const fs::path& dir = tmp.path();
  const auto bytes = sample_file();
  const fs::path path = dir / "sample.gguf";
  ds4::test::write_bytes(path, bytes);
  const File f = File::open(path);
  EXPECT_EQ(f.path(), path.string());
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.get_u32("u32"), 43u);
  EXPECT_EQ(f.tensor("blk.0.attn_q_a.weight").bytes().back(), 0xcd);

  EXPECT_EQ(error_of([&] { File::open((dir / "missing.gguf").string()); }),
            (dir / "missing.gguf").string() + ": cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] { File::open(dir.string()); }), dir.string() + ": is a directory, not a file");
  const fs::path empty = dir / "empty.gguf";
  ds4::test::write_text(empty, "");
  EXPECT_EQ(error_of([&] { File::open(empty); }),
            empty.string() + ": header: truncated: the file is 0 bytes, a GGUF header needs 24");
}

TEST(GgufReader, HelperFunctions) {
  EXPECT_EQ(ds4::gguf::value_type_name(ValueType::F64), "f64");
  EXPECT_EQ(ds4::gguf::value_type_name(static_cast<ValueType>(99)), "unknown type");
  EXPECT_EQ(ds4::gguf::value_type_size(ValueType::I16), 2u);
  EXPECT_EQ(ds4::gguf::value_type_size(ValueType::STRING), 0u);
  EXPECT_TRUE(ds4::gguf::is_valid_utf8("plain \xc4\xa0 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(ds4::gguf::is_valid_utf8("\xc0\x80"));          // overlong NUL
  EXPECT_FALSE(ds4::gguf::is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(ds4::gguf::is_valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(ds4::gguf::is_valid_utf8("\xe2\x82"));          // cut short
  EXPECT_EQ(ds4::gguf::quote_name("a\nb'c"), "'a\\x0ab\\x27c'");
  EXPECT_EQ(ds4::gguf::quote_name("\xff"), "'\\xff'");
  EXPECT_EQ(ds4::gguf::quote_name("\xe2\x82\xac"), "'\xe2\x82\xac'");
}
