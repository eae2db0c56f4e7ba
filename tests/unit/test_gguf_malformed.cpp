// Malformed GGUF files: each case damages one field of a valid writer-made
// file and expects ONE clear error naming the section, key or tensor, both
// from the library (File::parse, File::open) and from `ds4-gguf info`, which
// must exit 1 with exactly one line on stderr.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using ds4::GgmlType;
using ds4::gguf::File;
using ds4::gguf::MetaValue;
using ds4::gguf::ValueType;
using ds4::gguf::Writer;
using ds4::test::program_temp_dir;
using ds4::test::read_bytes;
using ds4::test::write_bytes;

namespace {

using Bytes = std::vector<uint8_t>;

// The valid file every case starts from.
const Bytes& base_file() {
  static const Bytes bytes = [] {
    Writer w;
    w.set_u32("general.alignment", 32);                                           // kv 0
    w.set_string("general.architecture", "deepseek4");                            // kv 1
    w.set_u32("deepseek4.block_count", 2);                                        // kv 2
    w.set_bool("deepseek4.expert_weights_norm", true);                            // kv 3
    w.set_array_string("tokenizer.ggml.tokens", {"<s>", "hello", "world"});       // kv 4
    w.set_array_i32("deepseek4.attention.compress_ratios", {0, 4});               // kv 5
    w.set_u32("dup.key1", 1);                                                     // kv 6
    w.set_u32("dup.key2", 2);                                                     // kv 7
    w.set_value("nested", MetaValue::array(ValueType::ARRAY, {MetaValue::array_u8(std::vector<uint8_t>{7})}));  // kv 8
    w.add_tensor("blk.0.attn_q_a.weight", GgmlType::Q8_0, {64, 4}, nullptr);  // 272 bytes at 0
    w.add_tensor("blk.0.attn_q_b.weight", GgmlType::F32, {8, 4}, nullptr);    // 128 bytes at 288
    w.add_tensor("output_norm.weight", GgmlType::F32, {8}, nullptr);          // 32 bytes at 416
    const fs::path p = program_temp_dir() / "base.gguf";
    w.write(p);
    return read_bytes(p);
  }();
  return bytes;
}

// Where each field of base_file() sits, found by walking it (the file is
// valid, so the walk needs no checks).
struct KvLoc {
  std::string key;
  size_t key_len_off, type_off, value_off, end;
};
struct TensorLoc {
  std::string name;
  size_t name_len_off, ndims_off, dims_off, type_off, offset_off;
};
struct Layout {
  std::vector<KvLoc> kv;
  std::vector<TensorLoc> t;
  size_t infos_end;
};

uint32_t get32(const Bytes& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, &b[off], 4);
  return v;
}
uint64_t get64(const Bytes& b, size_t off) {
  uint64_t v;
  std::memcpy(&v, &b[off], 8);
  return v;
}
void put32(Bytes& b, size_t off, uint32_t v) { std::memcpy(&b[off], &v, 4); }
void put64(Bytes& b, size_t off, uint64_t v) { std::memcpy(&b[off], &v, 8); }
void append32(Bytes& b, uint32_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); }
void append64(Bytes& b, uint64_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); }

size_t skip_value(const Bytes& b, uint32_t type, size_t p) {
  static const size_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  if (type == 8) return p + 8 + get64(b, p);
  if (type != 9) return p + kSize[type];
  const uint32_t elem = get32(b, p);
  const uint64_t n = get64(b, p + 4);
  p += 12;
  for (uint64_t i = 0; i < n; ++i) p = skip_value(b, elem, p);
  return p;
}

const Layout& layout() {
  static const Layout l = [] {
    const Bytes& b = base_file();
    Layout out;
    size_t p = 24;
    for (uint64_t i = 0; i < get64(b, 16); ++i) {
      KvLoc k;
      k.key_len_off = p;
      k.key.assign(reinterpret_cast<const char*>(&b[p + 8]), get64(b, p));
      k.type_off = p + 8 + k.key.size();
      k.value_off = k.type_off + 4;
      k.end = skip_value(b, get32(b, k.type_off), k.value_off);
      p = k.end;
      out.kv.push_back(k);
    }
    for (uint64_t i = 0; i < get64(b, 8); ++i) {
      TensorLoc t;
      t.name_len_off = p;
      t.name.assign(reinterpret_cast<const char*>(&b[p + 8]), get64(b, p));
      t.ndims_off = p + 8 + t.name.size();
      t.dims_off = t.ndims_off + 4;
      t.type_off = t.dims_off + 8 * get32(b, t.ndims_off);
      t.offset_off = t.type_off + 4;
      p = t.offset_off + 8;
      out.t.push_back(t);
    }
    out.infos_end = p;
    return out;
  }();
  return l;
}

const KvLoc& kv(const std::string& key) {
  for (const auto& k : layout().kv) {
    if (k.key == key) return k;
  }
  throw std::logic_error("test layout has no key " + key);
}

const TensorLoc& tensor(const std::string& name) {
  for (const auto& t : layout().t) {
    if (t.name == name) return t;
  }
  throw std::logic_error("test layout has no tensor " + name);
}

// Replaces bytes [from, to) with `with`.
Bytes splice(Bytes b, size_t from, size_t to, const Bytes& with) {
  b.erase(b.begin() + static_cast<ptrdiff_t>(from), b.begin() + static_cast<ptrdiff_t>(to));
  b.insert(b.begin() + static_cast<ptrdiff_t>(from), with.begin(), with.end());
  return b;
}

Bytes string_bytes(std::string_view s) {
  Bytes b;
  append64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
  return b;
}

struct Case {
  std::string name;
  std::function<Bytes(Bytes)> damage;
  std::vector<std::string> expect;  // substrings of the message after "<file>: "
};

std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.name; }

const std::string kQa = "blk.0.attn_q_a.weight";
const std::string kQb = "blk.0.attn_q_b.weight";
const std::string kNorm = "output_norm.weight";

std::vector<Case> cases() {
  return {
      // header
      {"EmptyFile", [](Bytes) { return Bytes{}; },
       {"header: truncated: the file is 0 bytes, a GGUF header needs 24"}},
      {"TruncatedHeader", [](Bytes b) { b.resize(10); return b; },
       {"header: truncated: the file is 10 bytes, a GGUF header needs 24"}},
      {"BadMagic", [](Bytes b) { b[2] = 'M'; b[3] = 'L'; return b; },
       {"header: bad magic 'GGML', expected 'GGUF'"}},
      {"Version1", [](Bytes b) { put32(b, 4, 1); return b; },
       {"header: GGUF version 1 is not supported; only version 3 is"}},
      {"Version2", [](Bytes b) { put32(b, 4, 2); return b; },
       {"header: GGUF version 2 is not supported; only version 3 is"}},
      {"Version4", [](Bytes b) { put32(b, 4, 4); return b; },
       {"header: GGUF version 4 is not supported; only version 3 is"}},
      {"BigEndian", [](Bytes b) { put32(b, 4, 0x03000000); return b; },
       {"header: ", "big-endian"}},
      {"AbsurdTensorCount", [](Bytes b) { put64(b, 8, 1ull << 62); return b; },
       {"header: tensor count 4611686018427387904 needs at least 32 bytes per tensor info"}},
      {"AbsurdMetadataCount", [](Bytes b) { put64(b, 16, 1ull << 62); return b; },
       {"header: metadata count 4611686018427387904 needs at least 13 bytes per entry"}},
      // metadata
      {"TruncatedMetadataKey", [](Bytes b) { b.resize(kv("dup.key2").key_len_off + 8 + 3); return b; },
       {"metadata entry 7 of 9: key length 8 at offset", "runs past the end of the file"}},
      {"TruncatedMetadataValue", [](Bytes b) { b.resize(kv("dup.key2").value_off + 2); return b; },
       {"metadata key 'dup.key2': truncated: u32 value (4 bytes at offset", "runs past the end of the file"}},
      {"TruncatedArrayBody",
       [](Bytes b) {
         // Cut inside the third token's bytes ("world").
         b.resize(kv("tokenizer.ggml.tokens").end - 2);
         return b;
       },
       {"metadata key 'tokenizer.ggml.tokens': array element [2]: string length 5 at offset",
        "runs past the end of the file (3 bytes left)"}},
      {"StringLengthPastEof",
       [](Bytes b) { put64(b, kv("tokenizer.ggml.tokens").value_off + 12, 1ull << 40); return b; },
       {"metadata key 'tokenizer.ggml.tokens': array element [0]: string length 1099511627776 at offset"}},
      {"ArrayCountOverflowsSize",
       [](Bytes b) {
         // 2^62 + 1 elements of 4 bytes: the byte count wraps around 2^64.
         put64(b, kv("deepseek4.attention.compress_ratios").value_off + 4, (1ull << 62) + 1);
         return b;
       },
       {"metadata key 'deepseek4.attention.compress_ratios': array of 4611686018427387905 i32 elements needs at "
        "least 4 bytes each"}},
      {"ArraysNestedTooDeep",
       [](Bytes b) {
         Bytes v;
         for (int i = 0; i < 8; ++i) {  // eight arrays of arrays ...
           append32(v, 9);
           append64(v, 1);
         }
         append32(v, 0);  // ... around an array of u8: nine levels
         append64(v, 1);
         v.push_back(7);
         return splice(b, kv("nested").value_off, kv("nested").end, v);
       },
       {"metadata key 'nested': array element [0][0][0][0][0][0][0][0]: arrays nested more than 8 deep"}},
      {"UnknownValueType", [](Bytes b) { put32(b, kv("deepseek4.block_count").type_off, 13); return b; },
       {"metadata key 'deepseek4.block_count': unknown value type id 13"}},
      {"UnknownArrayElementType", [](Bytes b) { put32(b, kv("tokenizer.ggml.tokens").value_off, 99); return b; },
       {"metadata key 'tokenizer.ggml.tokens': unknown array element type id 99"}},
      {"BoolValue2", [](Bytes b) { b[kv("deepseek4.expert_weights_norm").value_off] = 2; return b; },
       {"metadata key 'deepseek4.expert_weights_norm': bool value is 2, must be 0 or 1"}},
      {"DuplicateKey", [](Bytes b) { b[kv("dup.key2").type_off - 1] = '1'; return b; },
       {"metadata key 'dup.key1': duplicate key (first defined by metadata entry 6)"}},
      {"EmptyKey",
       [](Bytes b) { return splice(b, kv("dup.key2").key_len_off, kv("dup.key2").type_off, string_bytes("")); },
       {"metadata entry 7 of 9: key is empty"}},
      {"KeyNotUtf8", [](Bytes b) { b[kv("deepseek4.block_count").key_len_off + 8 + 9] = 0xff; return b; },
       {"metadata entry 2 of 9: key 'deepseek4\\xffblock_count' is not valid UTF-8"}},
      {"AlignmentZero", [](Bytes b) { put32(b, kv("general.alignment").value_off, 0); return b; },
       {"metadata key 'general.alignment': alignment 0 is not a power of two"}},
      {"AlignmentThree", [](Bytes b) { put32(b, kv("general.alignment").value_off, 3); return b; },
       {"metadata key 'general.alignment': alignment 3 is not a power of two"}},
      {"AlignmentWrongType", [](Bytes b) { put32(b, kv("general.alignment").type_off, 5); return b; },
       {"metadata key 'general.alignment': has type i32, must be u32"}},
      {"AlignmentAsString",
       [](Bytes b) {
         Bytes v;
         append32(v, 8);
         const Bytes s = string_bytes("32");
         v.insert(v.end(), s.begin(), s.end());
         return splice(b, kv("general.alignment").type_off, kv("general.alignment").end, v);
       },
       {"metadata key 'general.alignment': has type string, must be u32"}},
      // tensor info
      {"TruncatedTensorInfo", [](Bytes b) { b.resize(tensor(kQb).dims_off + 4); return b; },
       {"tensor info '" + kQb + "': truncated: dimensions (16 bytes at offset", "runs past the end of the file"}},
      {"NDims0", [](Bytes b) { put32(b, tensor(kQa).ndims_off, 0); return b; },
       {"tensor info '" + kQa + "': n_dims is 0; a tensor has 1 to 4 dimensions"}},
      {"NDims5", [](Bytes b) { put32(b, tensor(kQa).ndims_off, 5); return b; },
       {"tensor info '" + kQa + "': n_dims is 5; ggml supports at most 4 (GGML_MAX_DIMS)"}},
      {"DimZero", [](Bytes b) { put64(b, tensor(kQa).dims_off + 8, 0); return b; },
       {"tensor info '" + kQa + "': dimension 1 is 0"}},
      {"ElementCountOverflow",
       [](Bytes b) {
         put64(b, tensor(kQb).dims_off, 1ull << 32);
         put64(b, tensor(kQb).dims_off + 8, 1ull << 32);
         return b;
       },
       {"tensor info '" + kQb + "': element count of shape [4294967296, 4294967296] overflows int64"}},
      {"ByteSizeOverflow",
       [](Bytes b) {
         put64(b, tensor(kQb).dims_off, 1ull << 31);
         put64(b, tensor(kQb).dims_off + 8, 1ull << 31);
         return b;
       },
       {"tensor info '" + kQb + "': byte size of shape [2147483648, 2147483648] as f32 overflows 64 bits"}},
      {"RowNotWholeBlocks", [](Bytes b) { put64(b, tensor(kQa).dims_off, 48); return b; },
       {"tensor info '" + kQa + "': row length ne[0] = 48 is not a multiple of the q8_0 block size 32"}},
      {"UnknownGgmlType", [](Bytes b) { put32(b, tensor(kQb).type_off, 77); return b; },
       {"tensor info '" + kQb + "': unknown ggml type id 77"}},
      {"RemovedGgmlType", [](Bytes b) { put32(b, tensor(kQb).type_off, 4); return b; },
       {"tensor info '" + kQb + "': unknown ggml type id 4"}},
      {"OffsetMisaligned", [](Bytes b) { put64(b, tensor(kQb).offset_off, 288 + 4); return b; },
       {"tensor info '" + kQb + "': offset 292 is not a multiple of the alignment 32"}},
      {"DuplicateTensorName", [](Bytes b) { b[tensor(kQb).ndims_off - 8] = 'a'; return b; },
       {"tensor info '" + kQa + "': duplicate tensor name (first used by tensor info 0)"}},
      {"TensorNameTooLong",
       [](Bytes b) {
         return splice(b, tensor(kNorm).name_len_off, tensor(kNorm).ndims_off, string_bytes(std::string(64, 'x')));
       },
       {"tensor info '" + std::string(64, 'x') + "': name is 64 bytes, ggml allows at most 63"}},
      // data
      {"TruncatedData", [](Bytes b) { b.resize(b.size() - 10); return b; },
       {"data: tensor '" + kNorm + "': bytes [416, 416 + 32) of the data section run past the end of the file"}},
      {"DataSectionPastEof", [](Bytes b) { b.resize(layout().infos_end + 1); return b; },
       {"data: the data section starts at offset", "past the end of the file"}},
      {"OffsetPastEof", [](Bytes b) { put64(b, tensor(kNorm).offset_off, 1ull << 40); return b; },
       {"data: tensor '" + kNorm + "': bytes [1099511627776, 1099511627776 + 32) of the data section run past"}},
      {"OffsetNearU64Max", [](Bytes b) { put64(b, tensor(kNorm).offset_off, ~uint64_t{31}); return b; },
       {"data: tensor '" + kNorm + "': bytes [18446744073709551584, 18446744073709551584 + 32)"}},
      {"OverlappingTensors", [](Bytes b) { put64(b, tensor(kQb).offset_off, 256); return b; },
       {"data: tensors '" + kQa + "' [0, 272) and '" + kQb + "' [256, 384) overlap"}},
  };
}

// Runs bin/ds4-gguf with args.
ds4::test::ProcessResult run_cli(const std::vector<std::string>& args) {
  return ds4::test::run_app(DS4_BIN_DIR, "ds4-gguf", args);
}

void expect_message(const std::string& msg, const std::string& file, const Case& c) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  ASSERT_EQ(msg.rfind(file + ": ", 0), 0u) << "message must start with the file name: " << msg;
  for (const std::string& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "missing '" << s << "' in: " << msg;
}

class Malformed : public testing::TestWithParam<Case> {};

}  // namespace

TEST(MalformedBase, BaseFileIsValid) {
  const File f = File::parse(base_file(), "base.gguf");
  EXPECT_EQ(f.metadata().size(), 9u);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensor(kQb).offset, 288u);
  EXPECT_EQ(f.tensor(kNorm).offset, 416u);
  EXPECT_EQ(f.file_size(), f.data_offset() + 448);
  const ds4::test::ProcessResult r = run_cli({"info", (program_temp_dir() / "base.gguf").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("tokenizer.ggml.tokens"), std::string::npos);
  EXPECT_NE(r.out.find("[\"<s>\", \"hello\", \"world\"]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kQa), std::string::npos);
  EXPECT_NE(r.out.find("64 x 4"), std::string::npos);
}

TEST(MalformedBase, EightNestedArraysAreAccepted) {
  const KvLoc& k = kv("nested");
  Bytes v;
  for (int i = 0; i < 7; ++i) {
    append32(v, 9);
    append64(v, 1);
  }
  append32(v, 0);
  append64(v, 1);
  v.push_back(7);
  const Bytes b = splice(base_file(), k.value_off, k.end, v);
  // The splice shifts the data section; only the metadata matters here.
  Bytes head(b.begin(), b.begin() + static_cast<ptrdiff_t>(k.value_off + v.size()));
  put64(head, 8, 0);  // no tensors
  put64(head, 16, 9);
  const File f = File::parse(head, "deep.gguf");
  ds4::gguf::Value e = f.get_array("nested");
  for (int i = 0; i < 7; ++i) e = e.element(0);
  EXPECT_EQ(e.array_u8(), Bytes{7});
}

TEST_P(Malformed, ParseRejects) {
  const Case& c = GetParam();
  const Bytes b = c.damage(base_file());
  try {
    File::parse(b, "model.gguf");
    ADD_FAILURE() << "accepted";
  } catch (const ds4::Error& e) {
    expect_message(e.what(), "model.gguf", c);
  }
}

TEST_P(Malformed, OpenRejects) {
  const Case& c = GetParam();
  const fs::path p = program_temp_dir() / (c.name + ".gguf");
  write_bytes(p, c.damage(base_file()));
  try {
    File::open(p);
    ADD_FAILURE() << "accepted";
  } catch (const ds4::Error& e) {
    expect_message(e.what(), p.string(), c);
  }
}

TEST_P(Malformed, CliPrintsOneLineAndExits1) {
  const Case& c = GetParam();
  const fs::path p = program_temp_dir() / (c.name + ".cli.gguf");
  write_bytes(p, c.damage(base_file()));
  const ds4::test::ProcessResult r = run_cli({"info", p.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  ASSERT_EQ(r.err.back(), '\n');
  const std::string line = r.err.substr(0, r.err.size() - 1);
  ASSERT_EQ(line.rfind("ds4-gguf: ", 0), 0u) << line;
  expect_message(line.substr(10), p.string(), c);
}

INSTANTIATE_TEST_SUITE_P(Gguf, Malformed, testing::ValuesIn(cases()), case_name);

TEST(GgufCli, MissingFile) {
  const std::string p = (program_temp_dir() / "does_not_exist.gguf").string();
  const ds4::test::ProcessResult r = run_cli({"info", p});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ds4-gguf: " + p + ": cannot open: No such file or directory\n");
}

TEST(GgufCli, UsageErrorsExit2) {
  ds4::test::ProcessResult r = run_cli({"info"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("ds4-gguf: ", 0), 0u) << r.err;
  r = run_cli({});
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("info"), std::string::npos);
}
