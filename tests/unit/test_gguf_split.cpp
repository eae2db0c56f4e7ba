// Shard sets (core/gguf.h) and ds4-gguf's split / merge (core/gguf_split.h).
// Truths: llama.cpp's gguf-split layout (shard names PREFIX-%05d-of-%05d.gguf;
// every source key in the first shard, then split.no u16, split.tensors.count
// i32, split.count u16; the other shards only those; tensors in source order,
// packed and padded to 32 as ggml writes them) and llama.cpp's loader rules
// (open from the first shard, split.no per file, the tensor total); merging
// gives back the source's bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_split.h"
#include "core/gguf_writer.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace ds4::gguf {
namespace {

using test::error_of;
using test::read_bytes;

struct SourceTensor {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;
};

const std::vector<SourceTensor>& source_tensors() {
  static const std::vector<SourceTensor> t = {
      {"token_embd.weight", GgmlType::F32, {8, 5}},     {"blk.0.attn_norm.weight", GgmlType::F32, {8}},
      {"blk.0.ffn_down.weight", GgmlType::Q8_0, {32, 4}}, {"blk.1.attn_norm.weight", GgmlType::F32, {8}},
      {"blk.1.ffn_down.weight", GgmlType::Q8_0, {32, 3}}, {"blk.2.attn_norm.weight", GgmlType::F32, {3}},
      {"blk.2.ffn_down.weight", GgmlType::F16, {16, 2}},  {"blk.10.attn_norm.weight", GgmlType::F32, {8}},
      {"output_norm.weight", GgmlType::F32, {8}},       {"output.weight", GgmlType::F16, {8, 5}},
  };
  return t;
}

// A source file: assorted metadata and the tensors above, with random bytes.
void write_source(const std::string& path) {
  Writer w;
  w.set_string("general.architecture", "deepseek4");
  w.set_u32("deepseek4.block_count", 11);
  w.set_array_string("tokenizer.ggml.tokens", {"a", "b", "<|end|>"});
  w.set_array_f32("deepseek4.some_floats", {1.5f, -2.0f});
  std::mt19937 rng(5);
  for (const SourceTensor& t : source_tensors()) {
    w.add_tensor(t.name, t.type, t.ne, [&rng](std::span<uint8_t> dst) {
      for (uint8_t& b : dst) b = static_cast<uint8_t>(rng());
    });
  }
  w.write(path);
}

class GgufSplit : public testing::Test {
 protected:
  void SetUp() override { write_source(source_); }
  std::string at(const std::string& name) const { return dir_.file(name); }

  test::TempDir dir_;
  std::string source_ = dir_.file("model.gguf");
};

TEST(ShardNames, AreLlamaCpps) {
  EXPECT_EQ(shard_path("/m/x", 0, 3), "/m/x-00001-of-00003.gguf");
  EXPECT_EQ(shard_path("x", 11, 12), "x-00012-of-00012.gguf");
  EXPECT_EQ(shard_prefix("/m/x-00002-of-00003.gguf", 1, 3), "/m/x");
  EXPECT_FALSE(shard_prefix("/m/x-00002-of-00003.gguf", 0, 3));
  EXPECT_FALSE(shard_prefix("/m/x-00001-of-00004.gguf", 0, 3));
  EXPECT_FALSE(shard_prefix("-00001-of-00003.gguf", 0, 3)) << "an empty prefix is no name";
}

TEST(TensorLayer, ReadsBlkNumbers) {
  EXPECT_EQ(tensor_layer("blk.0.attn_norm.weight"), 0);
  EXPECT_EQ(tensor_layer("blk.42.ffn_up_exps.weight"), 42);
  EXPECT_EQ(tensor_layer("output.weight"), -1);
  EXPECT_EQ(tensor_layer("blk.x.w"), -1);
  EXPECT_EQ(tensor_layer("blk.7"), -1);
}

TEST_F(GgufSplit, ByTensorCountWritesGgufSplitsLayoutAndLoadsAsOneModel) {
  const File src = File::open(source_);
  SplitOptions o;
  o.max_tensors = 4;
  const auto plan = plan_split(src, o);
  ASSERT_EQ(plan.size(), 3u);  // 10 tensors: 4 + 4 + 2, cut at every 4th as gguf-split
  EXPECT_EQ(plan[0], (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(plan[2], (std::vector<size_t>{8, 9}));
  const std::vector<std::string> paths = write_split(src, plan, at("m"));
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[1], at("m-00002-of-00003.gguf"));

  for (uint32_t k = 0; k < 3; ++k) {
    const File one = File::open_one(paths[k]);
    const auto& md = one.metadata();
    const size_t first_split_key = k == 0 ? src.metadata().size() : 0;
    ASSERT_EQ(md.size(), first_split_key + 3) << "shard " << k;
    for (size_t i = 0; i < first_split_key; ++i) {
      EXPECT_EQ(md[i].key, src.metadata()[i].key);
      EXPECT_EQ(md[i].value.type(), src.metadata()[i].value.type());
      EXPECT_TRUE(std::ranges::equal(md[i].value.raw(), src.metadata()[i].value.raw()));
    }
    EXPECT_EQ(md[first_split_key].key, "split.no");
    EXPECT_EQ(md[first_split_key].value.type(), ValueType::U16);
    EXPECT_EQ(md[first_split_key].value.as_u32(), k);
    EXPECT_EQ(md[first_split_key + 1].key, "split.tensors.count");
    EXPECT_EQ(md[first_split_key + 1].value.type(), ValueType::I32);
    EXPECT_EQ(md[first_split_key + 1].value.as_u32(), 10u);
    EXPECT_EQ(md[first_split_key + 2].key, "split.count");
    EXPECT_EQ(md[first_split_key + 2].value.type(), ValueType::U16);
    EXPECT_EQ(md[first_split_key + 2].value.as_u32(), 3u);
    // Packed in order, each padded to 32 bytes, as ggml writes.
    uint64_t offset = 0;
    for (const TensorInfo& t : one.tensors()) {
      EXPECT_EQ(t.offset, offset) << t.name;
      offset += (t.nbytes + 31) / 32 * 32;
    }
    EXPECT_EQ(one.file_size(), one.data_offset() + offset);
  }

  const File set = File::open(paths[0]);
  ASSERT_TRUE(set.is_split());
  ASSERT_EQ(set.shards().size(), 3u);
  EXPECT_EQ(set.shards()[2].path, paths[2]);
  EXPECT_EQ(set.shards()[2].tensor_count, 2u);
  EXPECT_EQ(set.get_string("general.architecture"), "deepseek4");
  ASSERT_EQ(set.tensors().size(), src.tensors().size());
  EXPECT_EQ(set.tensor_data_bytes(), src.tensor_data_bytes());
  EXPECT_EQ(set.parameter_count(), src.parameter_count());
  uint64_t sizes = 0;
  for (const Shard& s : set.shards()) sizes += s.bytes.size();
  EXPECT_EQ(set.file_size(), sizes);
  for (size_t i = 0; i < src.tensors().size(); ++i) {
    const TensorInfo& a = src.tensors()[i];
    const TensorInfo* b = set.find_tensor(a.name);
    ASSERT_NE(b, nullptr) << a.name;
    EXPECT_EQ(&set.tensors()[i], b) << "directory order is shard order";
    EXPECT_EQ(b->shard, i / 4) << a.name;
    EXPECT_EQ(b->type, a.type);
    EXPECT_EQ(b->ne, a.ne);
    EXPECT_TRUE(std::ranges::equal(b->bytes(), a.bytes())) << a.name;
    EXPECT_EQ(b->data, set.shards()[b->shard].bytes.data() + b->file_offset);
  }

  write_merged(set, at("merged.gguf"));
  EXPECT_EQ(read_bytes(at("merged.gguf")), read_bytes(source_)) << "merge gives back the source byte for byte";
  EXPECT_EQ(merged_writer(set).directory(), merged_writer(src).directory());
}

TEST_F(GgufSplit, BySizeKeepsEachShardUnderTheLimitUnlessOneTensorIsLarger) {
  const File src = File::open(source_);
  SplitOptions o;
  o.by = SplitOptions::By::Size;
  o.max_bytes = 224;  // tensor bytes padded to 32: 160 32 | 160 32 | 128 32 64 | 32 32 96
  const auto plan = plan_split(src, o);
  const std::vector<std::vector<size_t>> want = {{0, 1}, {2, 3}, {4, 5, 6}, {7, 8, 9}};
  EXPECT_EQ(plan, want);
  write_split(src, plan, at("s"));
  const File set = File::open(at("s-00001-of-00004.gguf"));
  write_merged(set, at("merged.gguf"));
  EXPECT_EQ(read_bytes(at("merged.gguf")), read_bytes(source_));

  o.max_bytes = 40;  // smaller than most tensors: each gets a shard of its own
  EXPECT_EQ(plan_split(src, o).size(), 10u);
}

TEST_F(GgufSplit, ByLayersCutsAtTheGivenLayers) {
  const File src = File::open(source_);
  SplitOptions o;
  o.by = SplitOptions::By::Layers;
  o.layer_starts = {1, 10};
  const auto plan = plan_split(src, o);
  const std::vector<std::vector<size_t>> want = {{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9}};
  EXPECT_EQ(plan, want);
  write_split(src, plan, at("l"));
  write_merged(File::open(at("l-00001-of-00003.gguf")), at("merged.gguf"));
  EXPECT_EQ(read_bytes(at("merged.gguf")), read_bytes(source_));

  o.layer_starts = {11};
  EXPECT_NE(error_of([&] { plan_split(src, o); }).find("past the last layer (10)"), std::string::npos);
  o.layer_starts = {3};  // no layer 3..9 in the file
  EXPECT_NE(error_of([&] { plan_split(src, o); }).find("no tensor of layer 3"), std::string::npos);
  o.layer_starts = {2, 1};
  EXPECT_NE(error_of([&] { plan_split(src, o); }).find("ascending"), std::string::npos);
  o.layer_starts = {0};
  EXPECT_NE(error_of([&] { plan_split(src, o); }).find("at least 1"), std::string::npos);
}

TEST_F(GgufSplit, NoTensorFirstSplitLeavesTheMetadataAlone) {
  const File src = File::open(source_);
  SplitOptions o;
  o.max_tensors = 128;
  o.no_tensor_first_split = true;
  const auto plan = plan_split(src, o);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(plan[0].empty());
  write_split(src, plan, at("n"));
  const File first = File::open_one(at("n-00001-of-00002.gguf"));
  EXPECT_TRUE(first.tensors().empty());
  const File set = File::open(at("n-00001-of-00002.gguf"));
  EXPECT_EQ(set.tensors().size(), 10u);
  EXPECT_EQ(set.tensors()[0].shard, 1u);
  write_merged(set, at("merged.gguf"));
  EXPECT_EQ(read_bytes(at("merged.gguf")), read_bytes(source_));
}

TEST_F(GgufSplit, WritesNothingOverExistingFiles) {
  const File src = File::open(source_);
  SplitOptions o;
  o.max_tensors = 5;
  const auto plan = plan_split(src, o);
  test::write_text(at("e-00002-of-00002.gguf"), "keep me");
  EXPECT_NE(error_of([&] { write_split(src, plan, at("e")); }).find("e-00002-of-00002.gguf: exists"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(at("e-00001-of-00002.gguf"))) << "nothing written before the check";
  EXPECT_EQ(test::read_text(at("e-00002-of-00002.gguf")), "keep me");
  EXPECT_NE(error_of([&] { write_merged(src, source_); }).find("exists"), std::string::npos);
}

// A two-shard set written by hand, each shard's metadata as the test wants it.
struct HandShard {
  std::vector<std::pair<std::string, MetaValue>> keys;
  std::vector<std::string> tensors;
};

void write_hand_shard(const std::string& path, const HandShard& s) {
  Writer w;
  for (const auto& [k, v] : s.keys) w.set_value(k, v);
  for (const std::string& t : s.tensors) w.add_tensor(t, GgmlType::F32, {4}, std::vector<uint8_t>(16, 1));
  w.write(path);
}

std::vector<std::pair<std::string, MetaValue>> split_keys(uint16_t no, uint16_t count, int32_t tensors) {
  return {{"split.no", MetaValue::u16(no)},
          {"split.tensors.count", MetaValue::i32(tensors)},
          {"split.count", MetaValue::u16(count)}};
}

TEST(GgufShardSet, RefusesWhatLlamaCppRefuses) {
  test::TempDir dir;
  const std::string first = dir.file("h-00001-of-00002.gguf"), second = dir.file("h-00002-of-00002.gguf");
  auto keys0 = split_keys(0, 2, 2);
  keys0.insert(keys0.begin(), {"general.architecture", MetaValue::string("deepseek4")});
  write_hand_shard(first, {keys0, {"a"}});
  write_hand_shard(second, {split_keys(1, 2, 2), {"b"}});
  EXPECT_EQ(File::open(first).tensors().size(), 2u);

  // A later shard opened first: refused, naming the first.
  std::string msg = error_of([&] { File::open(second); });
  EXPECT_NE(msg.find("shard 2 of 2 of a split model; open its first shard, " + first), std::string::npos) << msg;
  EXPECT_EQ(File::open_one(second).tensors().size(), 1u) << "open_one looks at the one file";

  // A missing shard.
  std::filesystem::rename(second, dir.file("moved.gguf"));
  msg = error_of([&] { File::open(first); });
  EXPECT_NE(msg.find(first + ": shard 2 of 2: "), std::string::npos) << msg;
  EXPECT_NE(msg.find(second), std::string::npos) << msg;
  std::filesystem::rename(dir.file("moved.gguf"), second);

  // The second file says it is another shard, or of another count.
  write_hand_shard(second, {split_keys(0, 2, 2), {"b"}});
  msg = error_of([&] { File::open(first); });
  EXPECT_NE(msg.find("'split.no' is 0, expected 1"), std::string::npos) << msg;
  write_hand_shard(second, {split_keys(1, 3, 2), {"b"}});
  msg = error_of([&] { File::open(first); });
  EXPECT_NE(msg.find("'split.count' is 3, expected 2"), std::string::npos) << msg;
  write_hand_shard(second, {{}, {"b"}});
  msg = error_of([&] { File::open(first); });
  EXPECT_NE(msg.find("'split.no' missing"), std::string::npos) << msg;

  // A tensor in both shards.
  write_hand_shard(second, {split_keys(1, 2, 2), {"a"}});
  msg = error_of([&] { File::open(first); });
  EXPECT_NE(msg.find("tensor 'a' is also in shard 1 of 2"), std::string::npos) << msg;

  // The total the first file promises.
  write_hand_shard(second, {split_keys(1, 2, 2), {"b", "c"}});
  msg = error_of([&] { File::open(first); });
  EXPECT_NE(msg.find("hold 3 tensors, but split.tensors.count says 2"), std::string::npos) << msg;

  // A first file not named as a first shard.
  write_hand_shard(second, {split_keys(1, 2, 2), {"b"}});
  std::filesystem::copy_file(first, dir.file("renamed.gguf"));
  msg = error_of([&] { File::open(dir.file("renamed.gguf")); });
  EXPECT_NE(msg.find("must be named PREFIX-00001-of-00002.gguf"), std::string::npos) << msg;

  // split.count 0 or 1 (gguf-split's merge output keeps split.count = 0): one file.
  write_hand_shard(dir.file("merged.gguf"), {split_keys(0, 0, 1), {"a"}});
  EXPECT_FALSE(File::open(dir.file("merged.gguf")).is_split());
  write_hand_shard(dir.file("one.gguf"), {split_keys(0, 1, 1), {"a"}});
  EXPECT_FALSE(File::open(dir.file("one.gguf")).is_split());
}

// ds4-gguf split / merge / info: the same files from the command line, a
// plan printed, bad arguments refused with exit 2 or one error line and exit 1.
TEST_F(GgufSplit, DsGgufSplitsMergesAndShowsShardSets) {
  auto app = [](const std::vector<std::string>& args) { return test::run_app(DS4_BIN_DIR, "ds4-gguf", args); };
  test::ProcessResult r = app({"split", "--split-layers", "1,10", "--dry-run", source_, at("cli")});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("n_split: 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(at("cli-00002-of-00003.gguf") + ": 4 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.1.attn_norm.weight .. blk.2.ffn_down.weight"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(at("cli-00001-of-00003.gguf"))) << "--dry-run writes nothing";

  r = app({"split", "--split-max-size", "1M", source_, at("one")});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("wrote " + at("one-00001-of-00001.gguf")), std::string::npos) << r.out;

  r = app({"split", "--split-layers", "1,10", source_, at("cli")});
  ASSERT_TRUE(r.ok()) << r.err;
  r = app({"info", at("cli-00001-of-00003.gguf")});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("shards:       3\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  3: " + at("cli-00003-of-00003.gguf") + ", 3 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors:      10\n"), std::string::npos) << r.out;
  r = app({"info", "--this-file", at("cli-00002-of-00003.gguf")});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("tensors:      4\n"), std::string::npos) << r.out;
  r = app({"info", at("cli-00002-of-00003.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("open its first shard, " + at("cli-00001-of-00003.gguf")), std::string::npos) << r.err;

  r = app({"merge", at("cli-00001-of-00003.gguf"), at("cli.gguf")});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_EQ(read_bytes(at("cli.gguf")), read_bytes(source_));
  r = app({"merge", at("cli-00001-of-00003.gguf"), at("cli.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "ds4-gguf: " + at("cli.gguf") + ": exists; not overwritten\n");

  r = app({"split", "--split-max-size", "12K", source_, at("bad")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("followed by M or G"), std::string::npos) << r.err;
  r = app({"split", "--split-layers", "1,x", source_, at("bad")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("layer numbers separated by commas"), std::string::npos) << r.err;
  r = app({"split", "--split-layers", "1", "--split-max-tensors", "3", source_, at("bad")});
  EXPECT_EQ(r.exit_code, 2) << "two ways to split at once";
}

}  // namespace
}  // namespace ds4::gguf
