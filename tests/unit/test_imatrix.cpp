// Importance matrix files (model/imatrix.h), in llama.cpp's two forms.
// Truth: the formats as llama-imatrix writes them and llama-quantize's rule
// for turning them into importance (sums / count per matrix, 1 where the
// count is 0; legacy sums / ncall). That llama-quantize reads our files the
// same way is test_reference_requantize.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "model/imatrix.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

using test::error_of;

Imatrix sample() {
  Imatrix m;
  m.datasets = {"wiki.txt", "code.txt"};
  m.chunk_count = 12;
  m.chunk_size = 512;
  m.entries["blk.0.attn_q_a.weight"] = {{1, 2, 3, 4}, {2}};
  m.entries["blk.0.ffn_up_exps.weight"] = {{1, 2, 3, 4, 5, 6}, {4, 0, 1.6f}};
  return m;
}

std::vector<uint8_t> bytes_of(std::initializer_list<int32_t> ints) {
  std::vector<uint8_t> b(ints.size() * 4);
  std::memcpy(b.data(), ints.begin(), b.size());
  return b;
}

TEST(Imatrix, GgufRoundTripAndLlamaQuantizesImportance) {
  test::TempDir dir;
  sample().save(dir.file("m.gguf"));
  const gguf::File f = gguf::File::open(dir.file("m.gguf"));
  EXPECT_EQ(f.get_string("general.type"), "imatrix");
  EXPECT_EQ(f.get_u32("imatrix.chunk_count"), 12u);
  const gguf::TensorInfo& sums = f.tensor("blk.0.ffn_up_exps.weight.in_sum2");
  EXPECT_EQ(sums.ne, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(f.tensor("blk.0.ffn_up_exps.weight.counts").ne, (std::vector<uint64_t>{1, 3}));

  const Imatrix m = Imatrix::load(dir.file("m.gguf"));
  EXPECT_FALSE(m.legacy);
  EXPECT_EQ(m.datasets, sample().datasets);
  EXPECT_EQ(m.chunk_size, 512u);
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries.at("blk.0.ffn_up_exps.weight").sums, sample().entries.at("blk.0.ffn_up_exps.weight").sums);
  EXPECT_EQ(*m.importance("blk.0.attn_q_a.weight", 1, 4), (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  // Expert 1 has count 0: importance 1; expert 2's count 1.6 is taken as 2.
  EXPECT_EQ(*m.importance("blk.0.ffn_up_exps.weight", 3, 2), (std::vector<float>{0.25f, 0.5f, 1, 1, 2.5f, 3}));
  EXPECT_FALSE(m.importance("output.weight", 1, 4));
  EXPECT_NE(error_of([&] { m.importance("blk.0.attn_q_a.weight", 1, 8); }).find("has 4 values; the tensor has 1 x 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m.importance("blk.0.ffn_up_exps.weight", 2, 3); }).find("has 3 matrices; the tensor has 2"),
            std::string::npos);
}

// attn_output_a: llama.cpp multiplies it as o_groups matrices of the file's
// rows, so llama-imatrix writes n_groups x n_columns values under one count;
// each group's block of rows gets its own importance. A single-matrix entry
// is written [n] (ggml drops trailing 1s), as llama-imatrix's.
TEST(Imatrix, GroupedEntryGivesEachGroupItsBlock) {
  test::TempDir dir;
  Imatrix m;
  m.entries["blk.0.attn_output_a.weight"] = {{2, 4, 6, 8, 10, 12}, {2}};
  m.save(dir.file("g.gguf"));
  const gguf::File f = gguf::File::open(dir.file("g.gguf"));
  EXPECT_EQ(f.tensor("blk.0.attn_output_a.weight.in_sum2").ne, (std::vector<uint64_t>{6}));
  EXPECT_EQ(f.tensor("blk.0.attn_output_a.weight.counts").ne, (std::vector<uint64_t>{1}));
  const Imatrix g = Imatrix::load(dir.file("g.gguf"));
  EXPECT_EQ(*g.importance("blk.0.attn_output_a.weight", 1, 3), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(*g.importance("blk.0.attn_output_a.weight", 1, 6), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_NE(error_of([&] { g.importance("blk.0.attn_output_a.weight", 1, 4); }).find("has 6 values"),
            std::string::npos);
}

// llama-imatrix's --in-file and --output-format dat: GGUF sums and counts
// add (one count broadcast over several matrices), a legacy file's per-call
// means scale back by the chunk size; the legacy writer stores sum / count
// x ncall, ncall the rows rounded up to chunks, and leaves out entries no
// row met.
TEST(Imatrix, CombinesAndWritesLegacyAsLlamaImatrix) {
  test::TempDir dir;
  Imatrix a;
  a.datasets = {"a.txt"};
  a.entries["blk.0.attn_q_a.weight"] = {{1, 2}, {3}};
  a.entries["blk.0.ffn_up_exps.weight"] = {{1, 1, 2, 2}, {5}};  // one count, two experts
  Imatrix b;
  b.datasets = {"b.txt"};
  b.entries["blk.0.attn_q_a.weight"] = {{10, 20}, {7}};
  b.entries["blk.0.ffn_up_exps.weight"] = {{1, 1, 1, 1}, {1, 0}};
  b.entries["blk.0.ffn_gate_exps.weight"] = {{4, 4}, {0, 0}};
  Imatrix legacy;
  legacy.legacy = true;
  legacy.entries["blk.0.attn_q_a.weight"] = {{0.5f, 0.25f}, {2}};  // per-call means, 2 calls

  Imatrix total;
  total.add(a, 4);
  total.add(b, 4);
  total.add(legacy, 4);
  EXPECT_EQ(total.entries.at("blk.0.attn_q_a.weight").sums, (std::vector<float>{13, 23}));
  EXPECT_EQ(total.entries.at("blk.0.attn_q_a.weight").counts, (std::vector<float>{18}));
  EXPECT_EQ(total.entries.at("blk.0.ffn_up_exps.weight").sums, (std::vector<float>{2, 2, 3, 3}));
  EXPECT_EQ(total.entries.at("blk.0.ffn_up_exps.weight").counts, (std::vector<float>{6, 5}));
  EXPECT_EQ(total.datasets, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(total.chunk_size, 4u);
  EXPECT_EQ(total.chunk_count, 4u);  // 18 rows / 4
  Imatrix wrong;
  wrong.entries["blk.0.attn_q_a.weight"] = {{1, 2, 3}, {1}};
  EXPECT_NE(error_of([&] { total.add(wrong, 4); }).find("'blk.0.attn_q_a.weight' (collected) has 3 values"),
            std::string::npos);

  total.save_legacy(dir.file("t.dat"));
  const Imatrix back = Imatrix::load(dir.file("t.dat"));
  EXPECT_TRUE(back.legacy);
  ASSERT_EQ(back.entries.size(), 2u) << "gate_exps met no row: left out";
  // q_a: 18 rows -> ncall 5 (rounded up), values sum / 18 x 5.
  EXPECT_EQ(back.entries.at("blk.0.attn_q_a.weight").counts, (std::vector<float>{5}));
  EXPECT_EQ(back.entries.at("blk.0.attn_q_a.weight").sums, (std::vector<float>{13.0f / 18 * 5, 23.0f / 18 * 5}));
  EXPECT_EQ(back.entries.at("blk.0.ffn_up_exps.weight").sums,
            (std::vector<float>{2.0f / 6 * 2, 2.0f / 6 * 2, 3.0f / 5 * 2, 3.0f / 5 * 2}));
  EXPECT_EQ(back.chunk_count, 4u);
  EXPECT_EQ(back.datasets, (std::vector<std::string>{"b.txt"}));
}

TEST(Imatrix, LegacyDat) {
  test::TempDir dir;
  std::vector<uint8_t> b = bytes_of({1, 5});
  b.insert(b.end(), {'x', '.', 'w', 'e', 't'});
  const std::vector<uint8_t> counts = bytes_of({4, 2});  // ncall 4, nval 2
  b.insert(b.end(), counts.begin(), counts.end());
  const float sums[2] = {2.0f, 6.0f};
  b.insert(b.end(), reinterpret_cast<const uint8_t*>(sums), reinterpret_cast<const uint8_t*>(sums) + 8);
  test::write_bytes(dir.file("plain.dat"), b);
  Imatrix m = Imatrix::load(dir.file("plain.dat"));
  EXPECT_TRUE(m.legacy);
  EXPECT_EQ(*m.importance("x.wet", 1, 2), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(m.chunk_count, 0u);

  std::vector<uint8_t> with_trailer = b;
  const std::vector<uint8_t> trailer = bytes_of({9, 3});
  with_trailer.insert(with_trailer.end(), trailer.begin(), trailer.end());
  with_trailer.insert(with_trailer.end(), {'a', 'b', 'c'});
  test::write_bytes(dir.file("trailer.dat"), with_trailer);
  m = Imatrix::load(dir.file("trailer.dat"));
  EXPECT_EQ(m.chunk_count, 9u);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"abc"});

  test::write_bytes(dir.file("cut.dat"), std::vector<uint8_t>(b.begin(), b.end() - 3));
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("cut.dat")); }).find("cut.dat: legacy imatrix ends inside entry 1 of 1's values"),
            std::string::npos);
  test::write_bytes(dir.file("zero.dat"), bytes_of({0}));
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("zero.dat")); }).find("not an imatrix file"), std::string::npos);
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("none.dat")); }).find("none.dat: cannot open"), std::string::npos);
}

TEST(Imatrix, MalformedGgufNamesTheEntry) {
  test::TempDir dir;
  gguf::Writer a;
  a.add_tensor("w.in_sum2", GgmlType::F32, {4, 1}, std::vector<uint8_t>(16, 0));
  a.write(dir.file("a.gguf"));
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("a.gguf")); }).find("'w' has .in_sum2 but no .counts"), std::string::npos);
  gguf::Writer b;
  b.add_tensor("w.in_sum2", GgmlType::F16, {4, 1}, std::vector<uint8_t>(8, 0));
  b.add_tensor("w.counts", GgmlType::F32, {1, 1}, std::vector<uint8_t>(4, 0));
  b.write(dir.file("b.gguf"));
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("b.gguf")); }).find("is f16; an imatrix holds F32"), std::string::npos);
  gguf::Writer c;
  c.add_tensor("w.in_sum2", GgmlType::F32, {3, 1}, std::vector<uint8_t>(12, 0));
  c.add_tensor("w.counts", GgmlType::F32, {1, 2}, std::vector<uint8_t>(8, 0));
  c.write(dir.file("c.gguf"));
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("c.gguf")); }).find("3 sums for 2 matrices"), std::string::npos);
  gguf::Writer d;
  d.add_tensor("token_embd.weight", GgmlType::F32, {4}, std::vector<uint8_t>(16, 0));
  d.write(dir.file("d.gguf"));
  EXPECT_NE(error_of([&] { Imatrix::load(dir.file("d.gguf")); }).find("not an imatrix file"), std::string::npos);
}

// ds4-quantize --imatrix: llama-quantize's provenance keys, and a warning
// for the quantized tensors the file does not cover.
TEST(Imatrix, DrivesDsQuantize) {
  test::TempDir dir;
  const test::SyntheticModel src(preset_tiny(), QuantMix::Bf16, 8);
  const gguf::File f = gguf::File::open(src.path());
  Imatrix m;
  m.datasets = {"calibration.txt"};
  m.chunk_count = 5;
  const gguf::TensorInfo& up = f.tensor("blk.1.ffn_up_exps.weight");
  m.entries[up.name] = {std::vector<float>(up.ne[0] * up.ne[2], 1.5f), std::vector<float>(up.ne[2], 3.0f)};
  m.save(dir.file("i.gguf"));
  const test::ProcessResult r = test::run_app(
      DS4_BIN_DIR, "ds4-quantize", {"--mix", "ds4-q4", "--imatrix", dir.file("i.gguf"), src.path(), dir.file("o.gguf")});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.err.find("warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quantized tensors have no entry in " + dir.file("i.gguf")), std::string::npos) << r.err;
  const gguf::File out = gguf::File::open(dir.file("o.gguf"));
  EXPECT_EQ(out.get_string("quantize.imatrix.file"), dir.file("i.gguf"));
  EXPECT_EQ(out.get_string("quantize.imatrix.dataset"), "calibration.txt");
  EXPECT_EQ(out.get_i32("quantize.imatrix.entries_count"), 1);
  EXPECT_EQ(out.get_i32("quantize.imatrix.chunks_count"), 5);
}

}  // namespace
}  // namespace ds4::model
