// ds4-quantize's MTP files and metadata flavours (model/deepseek4_mtp.h,
// model/deepseek4_metadata.h). Truth: the published layouts written out here
// by hand -- ds4's sidecar's 32 tensor names and its architecture string
// (MODEL.md §2.2, the published DeepSeek-V4-Flash-MTP file's header), the
// names and shapes llama.cpp's deepseek4 loader creates for the nextn block,
// the keys and value types llama.cpp's converter writes (conversion/deepseek.py
// and gguf-py: compress_ratios as i32 with the MTP entry, no vocab_size, ...)
// and its size label of the real Flash conversion ("256x8.4B"); values
// decoded from the random checkpoint with the format definitions
// (support/synthetic_checkpoint.h). A file whose metadata alone changes gives
// the same logits.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/gguf.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_metadata.h"
#include "model/deepseek4_model.h"
#include "model/deepseek4_mtp.h"
#include "model/safetensors.h"
#include "quant/quant.h"
#include "support/error_of.h"
#include "support/random_tokens.h"
#include "support/subprocess.h"
#include "support/synthetic_checkpoint.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

Deepseek4HParams shape() {
  Deepseek4HParams hp = preset_tiny();
  hp.name = "deepseek4";
  return hp;
}

struct Checkpoint {
  test::TempDir dir{"ds4-mtp-"};
  std::string folder = dir.file("ckpt");
  Checkpoint() { test::write_synthetic_checkpoint(shape(), 7, folder); }
};
const Checkpoint& checkpoint() {
  static const Checkpoint c;
  return c;
}

std::string quantize(const std::vector<std::string>& args, const std::string& out) {
  std::vector<std::string> a = {"-q"};
  a.insert(a.end(), args.begin(), args.end());
  a.push_back(checkpoint().folder);
  a.push_back(out);
  const test::ProcessResult r = test::run_app(DS4_BIN_DIR, "ds4-quantize", a);
  EXPECT_TRUE(r.ok()) << r.err;
  return r.err;
}

// Q8_0 rows of the checkpoint's FP8 matrix `name`, decoded by the format's definition.
std::vector<uint8_t> q8_0_of_fp8(const SafetensorsSet& set, const std::string& name, uint64_t row) {
  const StTensor& q = set.get(name + ".weight");
  const StTensor& s = set.get(name + ".scale");
  const uint64_t cols = q.shape[1], scols = (cols + 127) / 128;
  std::vector<float> x(cols);
  for (uint64_t j = 0; j < cols; ++j)
    x[j] = test::fp8_e4m3_value(q.data[row * cols + j]) * test::e8m0_scale(s.data[(row / 128) * scols + j / 128]);
  std::vector<uint8_t> out(cols / 32 * 34);
  quant::quantize_row(GgmlType::Q8_0, x.data(), out.data(), static_cast<int64_t>(cols));
  return out;
}

float bf16_value(const StTensor& t, uint64_t i) {
  uint16_t h;
  std::memcpy(&h, t.data.data() + 2 * i, 2);
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

TEST(MtpFiles, Ds4SidecarHoldsTheReleaseBlock) {
  test::TempDir dir;
  const std::string path = dir.file("mtp.gguf");
  quantize({"--mtp", "--mix", "llama-convert"}, path);
  const gguf::File f = gguf::File::open(path);
  const Deepseek4HParams hp = shape();

  EXPECT_EQ(f.find_string("general.architecture").value_or(""), "deepseek4_mtp_support");
  EXPECT_EQ(f.get("deepseek4.nextn_predict_layers").as_u32(), 1u);
  EXPECT_EQ(f.get("deepseek4.mtp_layer_count").as_u32(), 1u);
  EXPECT_EQ(f.get("deepseek4.embedding_length").as_u32(), hp.n_embd);
  EXPECT_EQ(f.get("deepseek4.expert_count").as_u32(), hp.n_expert);
  EXPECT_FALSE(f.find("tokenizer.ggml.tokens")) << "the sidecar borrows the model's tokenizer";

  // ds4's sidecar: these 32 tensors and no other.
  const std::vector<std::string> want = {
      "hc_head_base", "hc_head_fn", "hc_head_scale", "e_proj", "h_proj", "enorm", "hnorm", "norm",
      "hc_attn_fn", "hc_attn_scale", "hc_attn_base", "attn_norm", "attn_q_a", "attn_q_a_norm", "attn_q_b",
      "attn_kv", "attn_kv_a_norm", "attn_sinks", "attn_output_a", "attn_output_b", "hc_ffn_fn", "hc_ffn_scale",
      "hc_ffn_base", "ffn_norm", "ffn_gate_inp", "exp_probs_b", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
      "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const std::string& stem : want) {
    const std::string name = "mtp.0." + stem + (stem == "exp_probs_b" ? ".bias" : ".weight");
    EXPECT_TRUE(f.find_tensor(name)) << name;
  }
  const uint64_t e = hp.n_embd;
  EXPECT_EQ(f.tensor("mtp.0.e_proj.weight").ne, (std::vector<uint64_t>{e, e}));
  EXPECT_EQ(f.tensor("mtp.0.hc_head_fn.weight").ne, (std::vector<uint64_t>{4 * e, 4}));
  EXPECT_EQ(f.tensor("mtp.0.ffn_down_exps.weight").ne, (std::vector<uint64_t>{hp.n_ff_exp, e, hp.n_expert}));
  EXPECT_EQ(f.tensor("mtp.0.hc_attn_fn.weight").ne, (std::vector<uint64_t>{4 * e, 24}));
  EXPECT_FALSE(f.find_tensor("mtp.0.attn_compressor_kv.weight")) << "the block attends by sliding window only";

  // Values: the projections are Q8_0 of the FP8 values, the experts the FP4
  // values exactly, the norms the BF16 values, hc_head as stored.
  const SafetensorsSet set = SafetensorsSet::open(checkpoint().folder);
  for (const char* proj : {"e_proj", "h_proj"}) {
    const gguf::TensorInfo& t = f.tensor(std::string("mtp.0.") + proj + ".weight");
    ASSERT_EQ(t.type, GgmlType::Q8_0);
    for (uint64_t r = 0; r < t.ne[1]; ++r) {
      const std::vector<uint8_t> q = q8_0_of_fp8(set, std::string("mtp.0.") + proj, r);
      ASSERT_TRUE(std::equal(q.begin(), q.end(), t.data + r * t.row_bytes())) << proj << " row " << r;
    }
  }
  EXPECT_EQ(test::fp4_experts_mismatch(f.tensor("mtp.0.ffn_up_exps.weight"), set,
                                       [](uint64_t x) { return "mtp.0.ffn.experts." + std::to_string(x) + ".w3"; }),
            "");
  for (const char* norm : {"enorm", "hnorm", "norm"}) {
    const gguf::TensorInfo& t = f.tensor(std::string("mtp.0.") + norm + ".weight");
    ASSERT_EQ(t.type, GgmlType::F32);
    const StTensor& src = set.get(std::string("mtp.0.") + norm + ".weight");
    for (uint64_t j = 0; j < t.ne[0]; ++j) {
      float v;
      std::memcpy(&v, t.data + 4 * j, 4);
      ASSERT_EQ(v, bf16_value(src, j)) << norm << " " << j;
    }
  }
  EXPECT_TRUE(std::ranges::equal(f.tensor("mtp.0.hc_head_fn.weight").bytes(), set.get("mtp.0.hc_head_fn").data));
  EXPECT_TRUE(std::ranges::equal(f.tensor("mtp.0.attn_sinks.weight").bytes(), set.get("mtp.0.attn.attn_sink").data));

  // Not a model: the loader says what it is.
  const std::string msg = test::error_of([&] { Deepseek4Model::open(path); });
  EXPECT_NE(msg.find("MTP draft sidecar"), std::string::npos) << msg;

  // ds4's published layout (Q4_K experts) from a mix.
  quantize({"--mtp", "--mix", "ds4-q4"}, dir.file("q4.gguf"));
  const gguf::File q4 = gguf::File::open(dir.file("q4.gguf"));
  EXPECT_EQ(q4.tensor("mtp.0.ffn_gate_exps.weight").type, GgmlType::Q4_K);
  EXPECT_EQ(q4.tensor("mtp.0.e_proj.weight").type, GgmlType::Q8_0);
}

TEST(MtpFiles, LlamaLayoutFusesTheProjections) {
  test::TempDir dir;
  const std::string path = dir.file("mtp-llama.gguf");
  quantize({"--mtp", "--flavour", "llama", "--mix", "llama-convert"}, path);
  const gguf::File f = gguf::File::open(path);
  const Deepseek4HParams hp = shape();
  const uint32_t n = hp.n_layer;  // the block's index
  const std::string blk = "blk." + std::to_string(n) + ".";

  EXPECT_EQ(f.find_string("general.architecture").value_or(""), "deepseek4");
  EXPECT_EQ(f.get("deepseek4.block_count").as_u32(), n + 1);
  EXPECT_EQ(f.get("deepseek4.nextn_predict_layers").as_u32(), 1u);
  EXPECT_EQ(f.get("deepseek4.attention.compress_ratios").array_type(), gguf::ValueType::I32);
  EXPECT_EQ(f.get("deepseek4.attention.compress_ratios").size(), n + 1);
  EXPECT_EQ(f.get("deepseek4.swiglu_clamp_exp").size(), n + 1);
  EXPECT_TRUE(f.find("tokenizer.ggml.tokens"));

  // llama.cpp's loader: the model's embedding, norm and head; hc_head; the block; nextn.*.
  for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight", "output_hc_fn.weight",
                           "output_hc_base.weight", "output_hc_scale.weight"}) {
    EXPECT_TRUE(f.find_tensor(name)) << name;
  }
  EXPECT_FALSE(f.find_tensor("blk.0.attn_norm.weight")) << "no main layer (llama.cpp's MTP-only probe)";
  EXPECT_TRUE(f.find_tensor(blk + "attn_q_a.weight"));
  EXPECT_TRUE(f.find_tensor(blk + "exp_probs_b.bias"));
  const uint64_t e = hp.n_embd;
  const gguf::TensorInfo& eh = f.tensor(blk + "nextn.eh_proj.weight");
  EXPECT_EQ(eh.ne, (std::vector<uint64_t>{2 * e, e}));
  ASSERT_EQ(eh.type, GgmlType::Q8_0);
  for (const char* norm : {"nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"})
    EXPECT_EQ(f.tensor(blk + norm).ne, (std::vector<uint64_t>{e})) << norm;

  // Row r of eh_proj: e_proj's row r, then h_proj's (the embedding is concatenated first).
  const SafetensorsSet set = SafetensorsSet::open(checkpoint().folder);
  for (uint64_t r = 0; r < e; ++r) {
    std::vector<uint8_t> want = q8_0_of_fp8(set, "mtp.0.e_proj", r);
    const std::vector<uint8_t> h = q8_0_of_fp8(set, "mtp.0.h_proj", r);
    want.insert(want.end(), h.begin(), h.end());
    ASSERT_TRUE(std::equal(want.begin(), want.end(), eh.data + r * eh.row_bytes())) << "row " << r;
  }
  // The MTP block's hc_head is the file's output_hc_*; the model's output norm is its own.
  EXPECT_TRUE(std::ranges::equal(f.tensor("output_hc_fn.weight").bytes(), set.get("mtp.0.hc_head_fn").data));
  const gguf::TensorInfo& shn = f.tensor(blk + "nextn.shared_head_norm.weight");
  const StTensor& shn_src = set.get("mtp.0.norm.weight");
  for (uint64_t j = 0; j < e; ++j) {
    float v;
    std::memcpy(&v, shn.data + 4 * j, 4);
    ASSERT_EQ(v, bf16_value(shn_src, j)) << j;
  }

  const std::string msg = test::error_of([&] { Deepseek4Model::open(path); });
  EXPECT_NE(msg.find("MTP-only"), std::string::npos) << msg;
}

TEST(MtpFiles, FromAGgufIsRefused) {
  test::TempDir dir;
  const test::ProcessResult r =
      test::run_app(DS4_BIN_DIR, "ds4-quantize", {"-q", "--mtp", dir.file("model.gguf"), dir.file("out.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--mtp: the MTP block is read from an official checkpoint folder"), std::string::npos) << r.err;
}

TEST(MetadataFlavours, SizeLabelOfTheFlashConversion) {
  // general.size_label of llama.cpp's conversion of V4 Flash, as published.
  const std::vector<TensorSpec> flash = deepseek4_tensors(preset_flash());
  EXPECT_EQ(llama_size_label(flash), "256x8.4B");
}

TEST(MetadataFlavours, LlamaFlavourHasTheConvertersKeysAndTheSameLogits) {
  test::TempDir dir;
  quantize({"--mix", "q8_0"}, dir.file("ds4.gguf"));
  quantize({"--mix", "q8_0", "--flavour", "llama"}, dir.file("llama.gguf"));
  const gguf::File f = gguf::File::open(dir.file("llama.gguf"));
  const Deepseek4HParams hp = shape();

  EXPECT_FALSE(f.find("deepseek4.vocab_size")) << "the converter leaves the vocabulary to the token list";
  EXPECT_EQ(f.find_string("general.type").value_or(""), "model");
  EXPECT_EQ(f.get("general.quantization_version").as_u32(), 2u);
  EXPECT_TRUE(f.find_string("general.size_label"));
  const gguf::Value& ratios = f.get("deepseek4.attention.compress_ratios");
  EXPECT_EQ(ratios.array_type(), gguf::ValueType::I32);
  EXPECT_EQ(ratios.size(), hp.n_layer + 1) << "config.json's list, the MTP entry included";
  EXPECT_EQ(f.get("deepseek4.swiglu_clamp_shexp").size(), hp.n_layer);
  EXPECT_EQ(f.get("deepseek4.expert_gating_func").as_u32(), 4u);
  EXPECT_EQ(f.get("deepseek4.embedding_length_out").as_u32(), 4 * hp.n_embd);
  EXPECT_EQ(f.get("deepseek4.block_count").as_u32(), hp.n_layer);
  EXPECT_FALSE(f.find("deepseek4.nextn_predict_layers"));

  // Metadata alone differs: the same model, the same logits.
  const Deepseek4Model a = Deepseek4Model::open(dir.file("ds4.gguf"));
  const Deepseek4Model b = Deepseek4Model::open(dir.file("llama.gguf"));
  Deepseek4HParams hb = b.hparams();
  EXPECT_EQ(hb.swiglu_clamp_shexp, hb.swiglu_clamp_exp) << "written out by the converter, equal here";
  hb.swiglu_clamp_shexp.clear();  // ds4's files leave it out when it equals swiglu_clamp_exp
  EXPECT_EQ(a.hparams(), hb);
  const std::vector<int32_t> tokens = test::random_tokens(hp.n_vocab, 6, 2);
  std::vector<float> la(tokens.size() * hp.n_vocab), lb(la.size());
  for (auto [m, out] : {std::pair{&a, la.data()}, std::pair{&b, lb.data()}}) {
    cpu::Forward fwd(*m, cpu::Numerics::Default, nullptr);
    auto session = fwd.new_session(16);
    std::vector<backend::Part> parts = {{session.get(), tokens, out}};
    fwd.eval(parts);
  }
  EXPECT_EQ(la, lb);

  // A GGUF source switches flavour both ways; ds4 -> llama -> ds4 gives ds4's keys back.
  const test::ProcessResult r = test::run_app(
      DS4_BIN_DIR, "ds4-quantize", {"-q", "--flavour", "ds4", dir.file("llama.gguf"), dir.file("back.gguf")});
  ASSERT_TRUE(r.ok()) << r.err;
  const gguf::File orig = gguf::File::open(dir.file("ds4.gguf"));
  const gguf::File back = gguf::File::open(dir.file("back.gguf"));
  for (const gguf::MetadataEntry& m : orig.metadata()) {
    const gguf::Value* v = back.find(m.key);
    ASSERT_TRUE(v) << m.key;
    EXPECT_EQ(v->type(), m.value.type()) << m.key;
    EXPECT_TRUE(std::ranges::equal(v->raw(), m.value.raw())) << m.key;
  }
  EXPECT_FALSE(back.find("general.size_label"));
}

}  // namespace
}  // namespace ds4::model
