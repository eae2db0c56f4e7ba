// Opening a deepseek4 GGUF for inference: the validated configuration and the
// weight binding, on synthetic files written by the mkmodel library (several
// mixes), on hand-edited copies that break one thing each, and on the two file
// layouts in circulation (llama.cpp-converted with an MTP block, published DS4
// with MTP declared but absent). docs/model-files.md lists what is tested here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "model/deepseek4_config.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_memory.h"
#include "model/deepseek4_model.h"
#include "model/deepseek4_tensors.h"
#include "model/deepseek4_weights.h"
#include "model/quant_mix.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

using test::error_of;
using test::TempDir;

std::string write_model(const Deepseek4HParams& hp, QuantMix mix, const std::string& path) {
  gguf::Writer w;
  write_metadata(hp, w);
  make_synthetic_tokenizer(hp.n_vocab).write(w);
  add_synthetic_tensors(w, hp, mix, /*seed=*/7, /*n_threads=*/2);
  w.write(path);
  return path;
}

// A copy of `src` through gguf::Writer. `meta` may change the writer after the
// metadata is copied; `skip_key` drops one key; `tensor` returns true when it
// has handled (replaced or dropped) a tensor itself; `extra` adds tensors at the end.
struct Edit {
  std::string skip_key = {};
  std::function<void(gguf::Writer&)> meta = {};
  std::function<bool(const gguf::TensorInfo&, gguf::Writer&)> tensor = {};
  std::function<void(gguf::Writer&)> extra = {};
};

std::string rewrite(const std::string& src_path, const std::string& path, const Edit& e) {
  const gguf::File src = gguf::File::open(src_path);
  gguf::Writer w;
  for (const gguf::MetadataEntry& m : src.metadata())
    if (m.key != e.skip_key) w.set_value(std::string(m.key), m.value);
  if (e.meta) e.meta(w);
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (e.tensor && e.tensor(t, w)) continue;
    const gguf::TensorInfo* tp = &t;
    w.add_tensor(t.name, t.type, t.ne, [tp](std::span<uint8_t> dst) {
      std::copy(tp->data, tp->data + tp->nbytes, dst.data());
    });
  }
  if (e.extra) e.extra(w);
  w.write(path);
  return path;
}

void add_zero(gguf::Writer& w, const std::string& name, GgmlType type, std::vector<uint64_t> ne) {
  w.add_tensor(name, type, std::move(ne), [](std::span<uint8_t>) {});
}

class ModelBinding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("ds4-model-binding-");
    q2_ = write_model(preset_tiny(), QuantMix::Ds4Q2, dir_->file("tiny-q2.gguf"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string file(const std::string& name) { return dir_->file(name); }
  static std::string edited(const std::string& name, const Edit& e) { return rewrite(q2_, file(name), e); }

  static TempDir* dir_;
  static std::string q2_;
};
TempDir* ModelBinding::dir_ = nullptr;
std::string ModelBinding::q2_;

void expect_views_match_file(const Deepseek4Model& m) {
  const gguf::File& f = m.file();
  const std::vector<TensorSpec> specs = deepseek4_tensors(m.hparams());
  const std::vector<const TensorView*> views = m.weights().all();
  ASSERT_EQ(views.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorView& v = *views[i];
    const gguf::TensorInfo& t = f.tensor(specs[i].name);
    SCOPED_TRACE(specs[i].name);
    EXPECT_EQ(v.name, specs[i].name);
    EXPECT_EQ(v.kind, specs[i].kind);
    EXPECT_EQ(v.type, t.type);
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(v.ne[d], t.dim(d));
    EXPECT_EQ(v.data, t.data);
    EXPECT_EQ(v.nbytes, t.nbytes);
    EXPECT_EQ(v.row_bytes * v.n_rows, t.nbytes);
    EXPECT_EQ(v.n_rows, t.n_elements / t.ne[0]);
    EXPECT_TRUE(v.data >= f.bytes().data() && v.data + v.nbytes <= f.bytes().data() + f.bytes().size());
  }
}

TEST_F(ModelBinding, EveryMixBindsAndViewsMatchTheFile) {
  for (QuantMix mix : {QuantMix::F32, QuantMix::F16, QuantMix::Q8_0, QuantMix::Ds4Q2, QuantMix::Ds4Q4, QuantMix::Mxfp4,
                       QuantMix::Bf16, QuantMix::LlamaConvert, QuantMix::Q6_K, QuantMix::Iq3Xxs, QuantMix::Q3_K,
                       QuantMix::Q5_K, QuantMix::Iq4Xs, QuantMix::Legacy}) {
    SCOPED_TRACE(std::string(quant_mix_name(mix)));
    const std::string path = write_model(preset_tiny(), mix, file("mix.gguf"));
    const Deepseek4Model m = Deepseek4Model::open(path);
    EXPECT_EQ(m.hparams(), preset_tiny());
    EXPECT_EQ(m.config().block_count, 6u);
    EXPECT_EQ(m.config().mtp_layers_in_file, 0u);
    EXPECT_TRUE(m.weights().notes.empty());
    expect_views_match_file(m);
    EXPECT_EQ(weight_bytes(m.weights()).total(), m.file().tensor_data_bytes());
    EXPECT_EQ(weight_bytes(m.weights()).by_family, weight_bytes(preset_tiny(), mix).by_family);
  }
}

TEST_F(ModelBinding, LayerStructFollowsTheSchedule) {
  const Deepseek4Model m = Deepseek4Model::open(q2_);
  const Deepseek4Weights& w = m.weights();
  ASSERT_EQ(w.layers.size(), 6u);  // ratios 0, 4, 128, 4, 128, 4; layers 0-1 hash routed
  EXPECT_FALSE(w.layers[0].attn_compressor.present());
  EXPECT_FALSE(w.layers[0].indexer_compressor.present());
  EXPECT_TRUE(w.layers[1].attn_compressor.present());
  EXPECT_TRUE(w.layers[1].indexer_compressor.present());
  EXPECT_TRUE(w.layers[1].indexer_q_b.present());
  EXPECT_TRUE(w.layers[2].attn_compressor.present());
  EXPECT_FALSE(w.layers[2].indexer_proj.present());
  EXPECT_EQ(w.layers[2].attn_compressor.ape.ne[1], 128u);
  EXPECT_TRUE(w.layers[1].ffn_gate_tid2eid.present());
  EXPECT_FALSE(w.layers[1].exp_probs_b.present());
  EXPECT_TRUE(w.layers[2].exp_probs_b.present());
  EXPECT_FALSE(w.layers[2].ffn_gate_tid2eid.present());
  EXPECT_EQ(w.layers[3].ffn_gate_exps.type, GgmlType::IQ2_XXS);
  EXPECT_EQ(w.layers[3].ffn_down_exps.type, GgmlType::Q2_K);
  EXPECT_EQ(w.output.type, GgmlType::Q8_0);
  // An expert matrix is ne[1] rows; expert e starts e matrices in.
  const TensorView& g = w.layers[3].ffn_gate_exps;
  EXPECT_EQ(g.matrix(5), g.data + 5 * g.ne[1] * g.row_bytes);
  EXPECT_EQ(g.row_bytes, 256u / 256u * 66u);  // one IQ2_XXS block per 256-wide row
}

struct ErrorCase {
  const char* what;
  Edit edit;
  std::vector<std::string> message;  // substrings
};

TEST_F(ModelBinding, EachBrokenFileNamesWhatIsWrong) {
  auto replace = [](const std::string& name, GgmlType type, std::vector<uint64_t> ne) {
    return [=](const gguf::TensorInfo& t, gguf::Writer& w) {
      if (t.name != name) return false;
      add_zero(w, name, type, ne);
      return true;
    };
  };
  auto drop = [](const std::string& name) {
    return [=](const gguf::TensorInfo& t, gguf::Writer&) { return t.name == name; };
  };
  const std::vector<ErrorCase> cases = {
      {"wrong architecture", {.meta = [](gguf::Writer& w) { w.set_string("general.architecture", "deepseek2"); }},
       {"general.architecture is 'deepseek2', expected 'deepseek4'"}},
      {"architecture missing", {.skip_key = "general.architecture"}, {"general.architecture", "missing"}},
      {"missing key", {.skip_key = "deepseek4.attention.q_lora_rank"},
       {"'deepseek4.attention.q_lora_rank'", "missing"}},
      {"wrong key type",
       {.meta = [](gguf::Writer& w) { w.set_string("deepseek4.embedding_length", "256"); }},
       {"'deepseek4.embedding_length' has type string, expected"}},
      {"float key of wrong type",
       {.meta = [](gguf::Writer& w) { w.set_bool("deepseek4.expert_weights_scale", true); }},
       {"'deepseek4.expert_weights_scale' has type bool"}},
      {"family rule", {.meta = [](gguf::Writer& w) { w.set_u32("deepseek4.attention.indexer.key_length", 96); }},
       {"indexer key length 96 must be a power of two >= 64"}},
      {"ratio rule", {.meta = [](gguf::Writer& w) {
                        w.set_array_u32("deepseek4.attention.compress_ratios", {0, 4, 128, 4, 64, 4});
                      }},
       {"compress ratio 64 of layer 4 must be 0, 4 or 128"}},
      {"nextn past block_count", {.meta = [](gguf::Writer& w) { w.set_u32("deepseek4.nextn_predict_layers", 9); }},
       {"'deepseek4.nextn_predict_layers' is 9, more than block_count 6"}},
      {"missing tensor", {.tensor = drop("blk.2.attn_compressor_kv.weight")},
       {"tensor 'blk.2.attn_compressor_kv.weight' missing"}},
      {"missing tid2eid", {.tensor = drop("blk.1.ffn_gate_tid2eid.weight")},
       {"tensor 'blk.1.ffn_gate_tid2eid.weight' missing (hash layers route by token id)"}},
      {"unexpected tensor",
       {.extra = [](gguf::Writer& w) { add_zero(w, "blk.0.exp_probs_b.bias", GgmlType::F32, {16}); }},
       {"unexpected tensor 'blk.0.exp_probs_b.bias'", "layer 0 has compress ratio 0, hash routed"}},
      {"tensor past the last layer",
       {.extra = [](gguf::Writer& w) { add_zero(w, "blk.6.attn_norm.weight", GgmlType::F32, {256}); }},
       {"unexpected tensor 'blk.6.attn_norm.weight'", "the model has 6 layers"}},
      {"wrong shape", {.tensor = replace("blk.1.attn_q_a.weight", GgmlType::Q8_0, {128, 256})},
       {"tensor 'blk.1.attn_q_a.weight' has shape [128, 256], expected [256, 128]"}},
      {"wrong shape 3-D", {.tensor = replace("blk.4.ffn_down_exps.weight", GgmlType::Q2_K, {256, 256, 8})},
       {"tensor 'blk.4.ffn_down_exps.weight' has shape [256, 256, 8], expected [256, 256, 16]"}},
      {"norm not f32", {.tensor = replace("blk.0.attn_norm.weight", GgmlType::F16, {256})},
       {"tensor 'blk.0.attn_norm.weight' has type f16; allowed: f32"}},
      {"dense in a ternary type", {.tensor = replace("blk.3.attn_kv.weight", GgmlType::TQ2_0, {256, 128})},
       {"tensor 'blk.3.attn_kv.weight' has type tq2_0; allowed: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, "
        "q3_K, q4_K, q5_K, q6_K, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, iq4_nl, iq4_xs, mxfp4"}},
      {"routed in tq1_0", {.tensor = replace("blk.3.ffn_down_exps.weight", GgmlType::TQ1_0, {256, 256, 16})},
       {"tensor 'blk.3.ffn_down_exps.weight' has type tq1_0; allowed: iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, "
        "iq1_m, iq4_nl, iq4_xs, q2_K, q3_K, q4_K, q5_K, q6_K, mxfp4, q4_0, q4_1, q5_0, q5_1, f32, f16, bf16, q8_0"}},
      {"tid2eid not i32", {.tensor = replace("blk.0.ffn_gate_tid2eid.weight", GgmlType::F32, {4, 512})},
       {"tensor 'blk.0.ffn_gate_tid2eid.weight' has type f32; allowed: i32"}},
      {"gate/up types differ", {.tensor = replace("blk.3.ffn_up_exps.weight", GgmlType::Q4_K, {256, 256, 16})},
       {"'blk.3.ffn_gate_exps.weight' (iq2_xxs) and 'blk.3.ffn_up_exps.weight' (q4_K) must share a type"}},
  };
  int i = 0;
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = edited("bad" + std::to_string(i++) + ".gguf", c.edit);
    const std::string msg = error_of([&] { (void)Deepseek4Model::open(path); });
    ASSERT_FALSE(msg.empty()) << "loaded";
    for (const std::string& s : c.message) EXPECT_NE(msg.find(s), std::string::npos) << "got: " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "the file is not named: " << msg;
  }
}

TEST_F(ModelBinding, TruncatedFileNamesTheTensorAndSaysTruncated) {
  std::vector<uint8_t> bytes = test::read_bytes(q2_);
  const gguf::File f = gguf::File::open(q2_);
  const gguf::TensorInfo& last = f.tensors().back();  // output.weight, written last
  bytes.resize(last.file_offset + last.nbytes / 2);
  const std::string path = file("truncated.gguf");
  test::write_bytes(path, bytes);
  const std::string msg = error_of([&] { (void)Deepseek4Model::open(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'" + last.name + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the file is truncated"), std::string::npos) << msg;
}

TEST_F(ModelBinding, MissingRouterBiasIsToleratedAsZero) {
  const std::string path = edited("nobias.gguf", {.tensor = [](const gguf::TensorInfo& t, gguf::Writer&) {
                                     return t.name == "blk.4.exp_probs_b.bias";
                                   }});
  const Deepseek4Model m = Deepseek4Model::open(path);
  EXPECT_FALSE(m.weights().layers[4].exp_probs_b.present());
  EXPECT_TRUE(m.weights().layers[5].exp_probs_b.present());
  ASSERT_EQ(m.weights().notes.size(), 1u);
  EXPECT_NE(m.weights().notes[0].find("without exp_probs_b"), std::string::npos);
  EXPECT_EQ(m.weights().all().size(), deepseek4_tensors(m.hparams()).size() - 1);
}

// llama.cpp's converter writes no deepseek4.vocab_size (its loader counts
// tokenizer.ggml.tokens): the token list gives the vocabulary; without
// either, one line names both.
TEST_F(ModelBinding, VocabSizeFromTheTokenListWithoutTheKey) {
  const std::string path = edited("novocab.gguf", {.skip_key = "deepseek4.vocab_size"});
  ASSERT_FALSE(gguf::File::open(path).find("deepseek4.vocab_size"));
  const Deepseek4Model m = Deepseek4Model::open(path);
  EXPECT_EQ(m.hparams().n_vocab, preset_tiny().n_vocab);
  const std::string bare = rewrite(path, file("novocab-notokens.gguf"), {.skip_key = "tokenizer.ggml.tokens"});
  const std::string msg = error_of([&] { Deepseek4Model::open(bare); });
  EXPECT_NE(msg.find("neither metadata key 'deepseek4.vocab_size' nor 'tokenizer.ggml.tokens'"), std::string::npos)
      << msg;
}

// The MTP block as llama.cpp's converter appends it: blk.<n_layer> with one
// ratio-0 attention block, an FFN with exp_probs_b, and the nextn tensors.
void add_llama_cpp_mtp_block(gguf::Writer& w, const Deepseek4HParams& hp) {
  Deepseek4HParams one = hp;
  resize_layers(one, 1);
  one.compress_ratios = {4};  // validate() wants a ratio-4 layer; ratio-4 tensors are filtered below
  one.n_hash_layers = 0;
  const std::string prefix = "blk." + std::to_string(hp.n_layer) + ".";
  for (TensorSpec s : deepseek4_tensors(one)) {
    if (s.layer != 0 || s.family() == TensorFamily::CompressorProj || s.family() == TensorFamily::CompressorApe ||
        s.family() == TensorFamily::IndexerProj || s.kind == TensorKind::AttnCompNorm ||
        s.kind == TensorKind::IndexerCompNorm)
      continue;
    const std::string name = prefix + s.name.substr(s.name.find('.', 4) + 1);
    add_zero(w, name, tensor_type(QuantMix::Ds4Q2, s), s.ne);
  }
  const uint64_t e = hp.n_embd;
  add_zero(w, prefix + "nextn.eh_proj.weight", GgmlType::Q8_0, {2 * e, e});
  add_zero(w, prefix + "nextn.enorm.weight", GgmlType::F32, {e});
  add_zero(w, prefix + "nextn.hnorm.weight", GgmlType::F32, {e});
  add_zero(w, prefix + "nextn.shared_head_norm.weight", GgmlType::F32, {e});
}

TEST_F(ModelBinding, LoadsTheLlamaCppLayoutWithAnMtpBlock) {
  const Deepseek4HParams hp = preset_tiny();
  const std::string path = edited(
      "llama-cpp.gguf",
      {.meta =
           [&](gguf::Writer& w) {
             // block_count counts the nextn layer; per-layer arrays cover it.
             w.set_u32("deepseek4.block_count", 7);
             w.set_u32("deepseek4.nextn_predict_layers", 1);
             std::vector<uint32_t> r = hp.compress_ratios;
             r.push_back(0);
             w.set_array_u32("deepseek4.attention.compress_ratios", r);
             w.set_array_f32("deepseek4.swiglu_clamp_exp", std::vector<float>(7, 10.0f));
             w.set_array_f32("deepseek4.swiglu_clamp_shexp", std::vector<float>(7, 10.0f));
             w.set_string("deepseek4.rope.scaling.type", "yarn");
             w.set_u32("deepseek4.expert_gating_func", kGatingSqrtSoftplus);
             w.set_u32("deepseek4.embedding_length_out", 4 * hp.n_embd);
           },
       .extra =
           [&](gguf::Writer& w) {
             add_llama_cpp_mtp_block(w, hp);
             // The vision variant's image-token routing bias.
             add_zero(w, "blk.3.exp_probs_b_vl.bias", GgmlType::F32, {hp.n_expert});
           }});
  const Deepseek4Model m = Deepseek4Model::open(path);
  Deepseek4HParams want = hp;
  want.swiglu_clamp_shexp.assign(6, 10.0f);
  EXPECT_EQ(m.hparams(), want);
  EXPECT_EQ(m.config().block_count, 7u);
  EXPECT_EQ(m.config().nextn_declared, 1u);
  EXPECT_EQ(m.config().mtp_layers_in_file, 1u);
  EXPECT_EQ(m.config().compress_ratio_entries, 7u);
  const auto& ignored = m.weights().ignored_tensors;
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "blk.6.nextn.eh_proj.weight"), ignored.end());
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "blk.6.attn_norm.weight"), ignored.end());
  EXPECT_NE(std::find(ignored.begin(), ignored.end(), "blk.3.exp_probs_b_vl.bias"), ignored.end());
  EXPECT_EQ(m.weights().layers.size(), 6u);
  expect_views_match_file(m);
}

TEST_F(ModelBinding, RefusesALlamaCppMtpOnlyFile) {
  const Deepseek4HParams hp = preset_tiny();
  const std::string path = edited(
      "mtp-only.gguf",
      {.meta = [](gguf::Writer& w) {
         w.set_u32("deepseek4.block_count", 7);
         w.set_u32("deepseek4.nextn_predict_layers", 1);
       },
       .tensor = [](const gguf::TensorInfo& t, gguf::Writer&) { return t.name.starts_with("blk."); },
       .extra = [&](gguf::Writer& w) { add_llama_cpp_mtp_block(w, hp); }});
  const std::string msg = error_of([&] { (void)Deepseek4Model::open(path); });
  EXPECT_NE(msg.find("MTP-only file"), std::string::npos) << msg;
}

TEST_F(ModelBinding, LoadsThePublishedDs4Layout) {
  const Deepseek4HParams hp = preset_tiny();
  // Published DS4 metadata: MTP declared but shipped separately, 44-style
  // ratio list with the MTP entry, f64 clamp array also covering MTP, expert
  // group keys present as 0, no gating/rope-type keys, an integer-typed float,
  // u64 lengths, the joyai-llm pre-tokenizer; exp_probs_b omitted on a layer.
  const std::string path = edited(
      "published.gguf",
      {.skip_key = "deepseek4.expert_gating_func",
       .meta =
           [&](gguf::Writer& w) {
             w.set_u32("deepseek4.nextn_predict_layers", 1);
             std::vector<uint32_t> r = hp.compress_ratios;
             r.push_back(0);
             w.set_array_u32("deepseek4.attention.compress_ratios", r);
             w.set_array_f64("deepseek4.swiglu_clamp_exp", std::vector<double>(7, 10.0));
             w.set_u32("deepseek4.expert_group_count", 0);
             w.set_u32("deepseek4.expert_group_used_count", 0);
             w.set_u32("deepseek4.rope.freq_base", 10000);
             w.set_u64("deepseek4.context_length", hp.n_ctx_train);
             w.set_u64("deepseek4.rope.scaling.original_context_length", hp.rope_scaling_orig_ctx);
             w.set_string("tokenizer.ggml.pre", "joyai-llm");
           },
       .tensor = [](const gguf::TensorInfo& t, gguf::Writer&) { return t.name == "blk.5.exp_probs_b.bias"; }});
  // rope.scaling.type cannot be dropped together with the gating key above; drop it in a second pass.
  const std::string path2 = rewrite(path, file("published2.gguf"), {.skip_key = "deepseek4.rope.scaling.type"});
  const Deepseek4Model m = Deepseek4Model::open(path2);
  EXPECT_EQ(m.hparams(), hp);
  EXPECT_EQ(m.config().block_count, 6u);
  EXPECT_EQ(m.config().nextn_declared, 1u);
  EXPECT_EQ(m.config().mtp_layers_in_file, 0u);
  EXPECT_EQ(m.config().compress_ratio_entries, 7u);
  EXPECT_EQ(m.config().tokenizer_pre, "joyai-llm");
  EXPECT_FALSE(m.weights().layers[5].exp_probs_b.present());
  EXPECT_TRUE(m.weights().ignored_tensors.empty());
}

// Flash 0731 (DeepSeek's 2026-07-31 checkpoint) keeps the pre-0731 shapes,
// tensor set and metadata keys; its files differ in general.name and, when
// llama.cpp's converter wrote them, in the chat template it picks for a model
// id containing "0731". Neither changes the configuration or the binding.
TEST_F(ModelBinding, LoadsAFlash0731File) {
  const std::string path = edited("flash-0731.gguf", {.meta = [](gguf::Writer& w) {
                                    w.set_string("general.name", "DeepSeek-V4-Flash-0731");
                                    w.set_string("tokenizer.chat_template", "{# a 0731 template #}");
                                  }});
  const Deepseek4Model m = Deepseek4Model::open(path);
  Deepseek4HParams want = preset_tiny();
  want.name = "DeepSeek-V4-Flash-0731";
  EXPECT_EQ(m.hparams(), want);
  EXPECT_TRUE(m.weights().ignored_tensors.empty());
  const Deepseek4Model pre = Deepseek4Model::open(q2_);
  EXPECT_EQ(weight_bytes(m.weights()).by_family, weight_bytes(pre.weights()).by_family);
}

TEST_F(ModelBinding, BlockCountCountingAnAbsentMtpBlock) {
  // block_count 7 = 6 main + 1 MTP, the MTP tensors left out of the file.
  const Deepseek4HParams hp = preset_tiny();
  const std::string path = edited("absent-mtp.gguf", {.meta = [&](gguf::Writer& w) {
                                                         w.set_u32("deepseek4.block_count", 7);
                                                         w.set_u32("deepseek4.nextn_predict_layers", 1);
                                                         std::vector<uint32_t> r = hp.compress_ratios;
                                                         r.push_back(0);
                                                         w.set_array_u32("deepseek4.attention.compress_ratios", r);
                                                       }});
  const Deepseek4Model m = Deepseek4Model::open(path);
  EXPECT_EQ(m.hparams(), hp);
  EXPECT_EQ(m.config().mtp_layers_in_file, 0u);
  ASSERT_FALSE(m.config().notes.empty());
}

TEST_F(ModelBinding, SmallShapeFromTheFamilyRules) {
  // Any shape validate() allows binds: 3 layers, 4 experts, 1 hash layer.
  Deepseek4HParams hp = preset_tiny();
  hp.n_expert = 4;
  hp.n_expert_used = 2;
  resize_layers(hp, 3);
  hp.n_hash_layers = 1;
  const Deepseek4Model m = Deepseek4Model::open(write_model(hp, QuantMix::Q8_0, file("small-shape.gguf")));
  EXPECT_EQ(m.hparams(), hp);
  expect_views_match_file(m);
}

}  // namespace
}  // namespace ds4::model
