// The official checkpoint as a ds4-quantize source (model/hf_checkpoint.h,
// model/safetensors.h). Truth: a random checkpoint written in the release's
// format by an encoder built from the format definitions
// (support/synthetic_checkpoint.h), decoded here the same independent way:
// the converted GGUF's MXFP4 experts dequantize (ggml's to_float) to exactly
// the checkpoint's FP4 values (the repack is lossless), its Q8_0 matrices are
// the reference quantizer's bytes of the FP8 values, BF16 tensors keep their
// bytes, norms become their F32 values, tid2eid its ids; config.json gives
// the hyperparameters the checkpoint was made from; the model loads and runs.
// Malformed input gets one error naming the file and tensor or key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "model/hf_checkpoint.h"
#include "model/requantize.h"
#include "model/safetensors.h"
#include "quant/quant.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/random_tokens.h"
#include "support/subprocess.h"
#include "support/synthetic_checkpoint.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

using test::error_of;
namespace fs = std::filesystem;

Deepseek4HParams shape() {
  Deepseek4HParams hp = preset_tiny();
  hp.name = "deepseek4";
  return hp;
}

// The checkpoint in `folder` written to `out` in the converter's layout.
void convert(const std::string& folder, const std::string& out) {
  const SafetensorsSet set = SafetensorsSet::open(folder);
  const RequantizeInput in = checkpoint_input(set, hparams_from_config(folder + "/config.json"));
  RequantizeOptions o;
  o.mix = QuantMix::LlamaConvert;
  const std::vector<TensorPlan> plan = plan_requantize(in, o);
  ThreadPool pool(2);
  requantize_writer(in, plan, o, pool).write(out);
}

// One checkpoint per test program, converted when a test needs the GGUF.
struct Checkpoint {
  test::TempDir dir{"ds4-checkpoint-"};
  std::string folder = dir.file("ckpt"), gguf_path = dir.file("converted.gguf");
  Checkpoint() { test::write_synthetic_checkpoint(shape(), 3, folder); }
};
const Checkpoint& checkpoint() {
  static const Checkpoint c;
  return c;
}
const Checkpoint& converted() {
  static const Checkpoint& c = [] () -> const Checkpoint& {
    convert(checkpoint().folder, checkpoint().gguf_path);
    return checkpoint();
  }();
  return c;
}

TEST(HfCheckpoint, ScalarDecodersFollowTheFormats) {
  for (int b = 0; b < 256; ++b) {
    const float a = e4m3_to_f32(static_cast<uint8_t>(b)), want = test::fp8_e4m3_value(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(a)) << b;
    } else {
      EXPECT_EQ(a, want) << "e4m3 byte " << b;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  for (int n = 0; n < 16; ++n) EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(n)), test::fp4_e2m1_value(static_cast<uint8_t>(n))) << n;
  for (int e = 1; e < 255; ++e) EXPECT_EQ(e8m0_to_f32(static_cast<uint8_t>(e)), test::e8m0_scale(static_cast<uint8_t>(e))) << e;
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127)) << "as the converters decode byte 0";
}

TEST(HfCheckpoint, ConfigGivesTheHyperparameters) {
  const Deepseek4HParams got = hparams_from_config(checkpoint().folder + "/config.json");
  EXPECT_EQ(got, shape()) << "config.json round trip (the MTP entry of compress_ratios dropped)";
  EXPECT_EQ(checkpoint_name("blk.3.attn_q_a.weight"), "layers.3.attn.wq_a.weight");
  EXPECT_EQ(checkpoint_name("blk.0.indexer_compressor_ape.weight"), "layers.0.attn.indexer.compressor.ape");
  EXPECT_EQ(checkpoint_name("token_embd.weight"), "embed.weight");
  EXPECT_EQ(checkpoint_name("blk.1.ffn_down_exps.weight"), "layers.1.ffn.experts.0.w2.weight");
  EXPECT_EQ(checkpoint_name("blk.1.nonsense.weight"), "");
}

TEST(HfCheckpoint, ConvertsLosslesslyWhereTheFormatAllows) {
  const Checkpoint& c = converted();
  const SafetensorsSet set = SafetensorsSet::open(c.folder);
  const gguf::File out = gguf::File::open(c.gguf_path);
  const Deepseek4HParams hp = shape();

  // Routed experts: MXFP4, every value the checkpoint's FP4 value.
  for (const char* name : {"blk.1.ffn_gate_exps.weight", "blk.2.ffn_down_exps.weight"}) {
    const std::string ck = std::string(name).find("down") != std::string::npos ? "w2" : "w1";
    const std::string layer = std::string(name).substr(4, 1);
    EXPECT_EQ(test::fp4_experts_mismatch(out.tensor(name), set,
                                         [&](uint64_t e) {
                                           return "layers." + layer + ".ffn.experts." + std::to_string(e) + "." + ck;
                                         }),
              "");
  }
  // An FP8 matrix: Q8_0 of its FP8 values.
  {
    const gguf::TensorInfo& t = out.tensor("blk.0.attn_q_a.weight");
    ASSERT_EQ(t.type, GgmlType::Q8_0);
    const StTensor& q = set.get("layers.0.attn.wq_a.weight");
    const StTensor& s = set.get("layers.0.attn.wq_a.scale");
    const uint64_t cols = t.ne[0], scols = (cols + 127) / 128;
    std::vector<float> x(cols);
    std::vector<uint8_t> want(t.row_bytes());
    for (uint64_t i = 0; i < t.ne[1]; ++i) {
      for (uint64_t j = 0; j < cols; ++j)
        x[j] = test::fp8_e4m3_value(q.data[i * cols + j]) * test::e8m0_scale(s.data[(i / 128) * scols + j / 128]);
      quant::quantize_row(GgmlType::Q8_0, x.data(), want.data(), static_cast<int64_t>(cols));
      ASSERT_TRUE(std::equal(want.begin(), want.end(), t.data + i * t.row_bytes())) << "row " << i;
    }
  }
  // BF16 kept as it is; a BF16 norm as its F32 values; F32 as it is; ids.
  const gguf::TensorInfo& embd = out.tensor("token_embd.weight");
  EXPECT_EQ(embd.type, GgmlType::BF16);
  EXPECT_TRUE(std::ranges::equal(embd.bytes(), set.get("embed.weight").data));
  const gguf::TensorInfo& norm = out.tensor("blk.1.attn_norm.weight");
  ASSERT_EQ(norm.type, GgmlType::F32);
  const StTensor& norm_src = set.get("layers.1.attn_norm.weight");
  for (uint64_t j = 0; j < norm.ne[0]; ++j) {
    uint16_t h;
    std::memcpy(&h, norm_src.data.data() + 2 * j, 2);
    float v;
    std::memcpy(&v, norm.data + 4 * j, 4);
    ASSERT_EQ(v, std::bit_cast<float>(static_cast<uint32_t>(h) << 16)) << j;
  }
  EXPECT_TRUE(std::ranges::equal(out.tensor("blk.2.attn_sinks.weight").bytes(), set.get("layers.2.attn.attn_sink").data));
  const gguf::TensorInfo& ids = out.tensor("blk.0.ffn_gate_tid2eid.weight");
  ASSERT_EQ(ids.type, GgmlType::I32);
  const StTensor& ids_src = set.get("layers.0.ffn.gate.tid2eid");
  for (uint64_t i = 0; i < ids.n_elements; ++i) {
    int64_t want;
    int32_t got;
    std::memcpy(&want, ids_src.data.data() + 8 * i, 8);
    std::memcpy(&got, ids.data + 4 * i, 4);
    ASSERT_EQ(got, want) << i;
  }
  EXPECT_FALSE(out.find_tensor("blk.0.exp_probs_b.bias")) << "hash layers have no router bias";
  EXPECT_TRUE(out.find_tensor("blk.3.exp_probs_b.bias"));

  // The engine loads and runs it.
  const Deepseek4Model m = Deepseek4Model::open(c.gguf_path);
  EXPECT_EQ(m.hparams().n_layer, hp.n_layer);
  cpu::Forward f(m, cpu::Numerics::Default, nullptr);
  auto session = f.new_session(32);
  const std::vector<int32_t> tokens = test::random_tokens(hp.n_vocab, 8, 1);
  std::vector<float> logits(tokens.size() * hp.n_vocab);
  std::vector<backend::Part> parts = {{session.get(), tokens, logits.data()}};
  f.eval(parts);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(HfCheckpoint, MalformedInputNamesTheFileAndTensor) {
  test::TempDir dir;
  const std::string folder = dir.file("ckpt");
  test::write_synthetic_checkpoint(shape(), 4, folder);

  // config.json without a key, or of another family.
  nlohmann::json config = nlohmann::json::parse(test::read_text(folder + "/config.json"));
  nlohmann::json broken = config;
  broken.erase("hidden_size");
  test::write_text(dir.file("c1.json"), broken.dump());
  EXPECT_EQ(error_of([&] { hparams_from_config(dir.file("c1.json")); }), dir.file("c1.json") + ": key \"hidden_size\" missing");
  broken = config;
  broken["scoring_func"] = "softmax";
  test::write_text(dir.file("c2.json"), broken.dump());
  EXPECT_NE(error_of([&] { hparams_from_config(dir.file("c2.json")); }).find("routes by sqrtsoftplus"), std::string::npos);

  // A hash table entry outside the experts.
  std::string shard;
  uint64_t at = 0;
  {
    const SafetensorsSet set = SafetensorsSet::open(folder);
    const StTensor& ids = set.get("layers.0.ffn.gate.tid2eid");
    shard = *ids.shard;
    const std::vector<uint8_t> bytes = test::read_bytes(shard);
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    const auto h = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(header));
    at = 8 + header + h["layers.0.ffn.gate.tid2eid"]["data_offsets"][0].get<uint64_t>();
  }
  {
    std::vector<uint8_t> bytes = test::read_bytes(shard);
    const int64_t bad_id = 99;
    std::memcpy(bytes.data() + at + 8 * 5, &bad_id, 8);
    test::write_bytes(shard, bytes);
    const std::string msg = error_of([&] { convert(folder, dir.file("x.gguf")); });
    EXPECT_NE(msg.find(shard + ": tensor 'layers.0.ffn.gate.tid2eid' (blk.0.ffn_gate_tid2eid.weight): entry 5 is expert 99"),
              std::string::npos)
        << msg;
  }

  // A shard cut short; a tensor the index names but its shard lacks.
  {
    const std::vector<uint8_t> whole = test::read_bytes(shard);
    test::write_bytes(shard, std::span<const uint8_t>(whole.data(), whole.size() - 100));
    const std::string msg = error_of([&] { SafetensorsSet::open(folder); });
    EXPECT_NE(msg.find(shard + ": tensor '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(truncated file?)"), std::string::npos) << msg;
    test::write_bytes(shard, whole);
  }
  nlohmann::json index = nlohmann::json::parse(test::read_text(folder + "/model.safetensors.index.json"));
  index["weight_map"]["layers.9.made.up"] = index["weight_map"]["embed.weight"];
  test::write_text(dir.file("index.json"), index.dump());
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) fs::copy(folder + "/" + f, dir.file(f));
  const std::string msg = error_of([&] { SafetensorsSet::open(dir.file("index.json")); });
  EXPECT_NE(msg.find("tensor 'layers.9.made.up' missing (the index " + dir.file("index.json") + " puts it there)"),
            std::string::npos)
      << msg;

  // Headers that lie.
  auto st = [&](const std::string& header_json, size_t data) {
    std::vector<uint8_t> b(8);
    const uint64_t n = header_json.size();
    std::memcpy(b.data(), &n, 8);
    b.insert(b.end(), header_json.begin(), header_json.end());
    b.resize(b.size() + data);
    test::write_bytes(dir.file("h.safetensors"), b);
    return error_of([&] { SafetensorsFile f(dir.file("h.safetensors")); });
  };
  EXPECT_NE(st(R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}})", 2).find("tensor 'a': unknown dtype \"Q9\""),
            std::string::npos);
  EXPECT_NE(st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8).find("do not hold [2] of F32"),
            std::string::npos);
  EXPECT_NE(st(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 8)
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(st("{not json", 0).find("the header is not valid JSON"), std::string::npos);
}

TEST(HfCheckpoint, DsQuantizeTakesAFolder) {
  const Checkpoint& c = checkpoint();
  test::TempDir dir;
  const test::ProcessResult r =
      test::run_app(DS4_BIN_DIR, "ds4-quantize", {"-q", "--mix", "ds4-q2", c.folder, dir.file("q2.gguf")});
  ASSERT_TRUE(r.ok()) << r.err;
  const Deepseek4Model m = Deepseek4Model::open(dir.file("q2.gguf"));
  EXPECT_EQ(m.weights().layers[2].ffn_up_exps.type, GgmlType::IQ2_XXS);
  const test::ProcessResult plan = test::run_app(DS4_BIN_DIR, "ds4-quantize", {"--dry-run", "--mix", "mxfp4", c.folder, "x"});
  ASSERT_TRUE(plan.ok()) << plan.err;
  EXPECT_NE(plan.out.find("blk.0.ffn_gate_exps.weight"), std::string::npos);
  EXPECT_NE(plan.out.find("FP4 E2M1 pairs x F8_E8M0 (per 32) -> mxfp4"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("F8_E4M3 x F8_E8M0 (128x128 blocks) -> q8_0"), std::string::npos) << plan.out;
}

}  // namespace
}  // namespace ds4::model
