// Writes the small seed files of tests/fuzz/corpus/gguf: valid files that
// reach every value type, nested arrays, many tensor types and a non-default
// alignment, plus a few damaged ones that start the fuzzer inside the error
// paths. Usage: gen_gguf_seeds OUT_DIR
// (No .gguf extension: the repository ignores *.gguf.)
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "core/gguf_writer.h"

namespace {

using ds4::GgmlType;
using ds4::gguf::MetaValue;
using ds4::gguf::ValueType;
using ds4::gguf::Writer;
namespace fs = std::filesystem;

Writer::Fill pattern(uint8_t seed) {
  return [seed](std::span<uint8_t> dst) {
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<uint8_t>(seed + i * 13);
  };
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out);

  Writer().write(out / "empty");

  {
    Writer w;
    w.set_u8("u8", 200);
    w.set_i8("i8", -5);
    w.set_u16("u16", 65000);
    w.set_i16("i16", -300);
    w.set_u32("u32", 43);
    w.set_i32("i32", -1);
    w.set_f32("f32", 1e-6f);
    w.set_bool("bool", true);
    w.set_string("string", "deepseek4");
    w.set_u64("u64", 1ull << 40);
    w.set_i64("i64", -7);
    w.set_f64("f64", 0.1);
    w.set_array_u8("a.u8", {1, 2, 3});
    w.set_array_i32("a.i32", {0, 4, 128, -1});
    w.set_array_f32("a.f32", {0.5f, 2.0f});
    w.set_array_bool("a.bool", {true, false});
    w.set_array_string("a.string", {"<s>", "", "\xc4\xa0the", "\xff"});
    w.set_array_u64("a.u64", {1, 2});
    w.set_array_f64("a.f64", {1.5});
    w.set_value("a.nested", MetaValue::array(ValueType::ARRAY,
                                             {MetaValue::array_u32(std::vector<uint32_t>{1, 2}),
                                              MetaValue::array_string(std::vector<std::string>{"x"}),
                                              MetaValue::array(ValueType::ARRAY, {MetaValue::array_u8(std::vector<uint8_t>{9})})}));
    w.write(out / "all_types");
  }

  {
    Writer w;
    w.set_string("general.architecture", "deepseek4");
    w.add_tensor("f32", GgmlType::F32, {4, 2}, pattern(1));
    w.add_tensor("f16", GgmlType::F16, {8}, pattern(2));
    w.add_tensor("bf16", GgmlType::BF16, {2, 2, 2}, pattern(3));
    w.add_tensor("q8_0", GgmlType::Q8_0, {32, 2}, pattern(4));
    w.add_tensor("q4_k", GgmlType::Q4_K, {256}, pattern(5));
    w.add_tensor("q2_k", GgmlType::Q2_K, {256}, pattern(6));
    w.add_tensor("iq2_xxs", GgmlType::IQ2_XXS, {256}, pattern(7));
    w.add_tensor("mxfp4", GgmlType::MXFP4, {32, 1, 2, 1}, pattern(8));
    w.add_tensor("i32", GgmlType::I32, {3}, pattern(9));
    w.write(out / "tensor_types");
  }

  {
    Writer w(64);
    w.set_string("general.name", "aligned");
    w.add_tensor("a", GgmlType::F32, {3}, pattern(10));
    w.add_tensor("b", GgmlType::I8, {5}, pattern(11));
    w.write(out / "align64");
  }

  {
    Writer w;
    w.set_string("general.architecture", "deepseek4");
    w.set_u32("deepseek4.block_count", 2);
    w.set_u32("deepseek4.embedding_length", 64);
    w.set_f32("deepseek4.rope.freq_base", 10000.0f);
    w.set_bool("deepseek4.expert_weights_norm", true);
    w.set_array_i32("deepseek4.attention.compress_ratios", {4, 128});
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_array_string("tokenizer.ggml.tokens", {"a", "b", "ab", "\xc4\xa0"});
    w.set_array_string("tokenizer.ggml.merges", {"a b"});
    w.add_tensor("token_embd.weight", GgmlType::F16, {64, 4}, pattern(12));
    w.add_tensor("blk.0.attn_q_a.weight", GgmlType::Q8_0, {64, 2}, pattern(13));
    w.add_tensor("blk.0.ffn_gate_exps.weight", GgmlType::IQ2_XXS, {256, 1, 2}, pattern(14));
    w.add_tensor("output_norm.weight", GgmlType::F32, {64}, pattern(15));
    w.write(out / "ds4_like");
  }

  // Damaged copies: the fuzzer starts from the error paths as well.
  const std::vector<uint8_t> good = read_all(out / "ds4_like");
  std::vector<uint8_t> b = good;
  b.resize(b.size() - 7);
  write_all(out / "bad_truncated_data", b);
  b = good;
  b[4] = 2;  // version 2
  write_all(out / "bad_version", b);
  b = good;
  b.resize(200);
  write_all(out / "bad_truncated_metadata", b);
  return 0;
}
