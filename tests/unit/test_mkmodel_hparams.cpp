// deepseek4 hyperparameters, rules, metadata and tensor list: checked against
// the shapes and counts the specs give for DeepSeek V4 Flash (MODEL.md §1-2,
// SYSTEMS.md §2.2) and against the rules llama.cpp's loader imposes.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"
#include "model/quant_mix.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

namespace fs = std::filesystem;

using test::error_of;
using test::TempDir;

TEST(MkmodelHParams, PresetsAreValid) {
  for (const char* name : {"tiny", "small", "bench", "flash", "pro"}) {
    SCOPED_TRACE(name);
    const auto hp = preset_by_name(name);
    ASSERT_TRUE(hp.has_value());
    EXPECT_NO_THROW(hp->validate());
  }
  EXPECT_FALSE(preset_by_name("huge").has_value());
}

TEST(MkmodelHParams, TinyCoversEveryAttentionKind) {
  const Deepseek4HParams hp = preset_tiny();
  std::map<uint32_t, int> count;
  for (uint32_t r : hp.compress_ratios) ++count[r];
  EXPECT_GE(count[4], 2);
  EXPECT_GE(count[128], 1);
  EXPECT_GE(count[0], 1);
  EXPECT_GE(hp.n_hash_layers, 1u);
  EXPECT_LT(hp.n_hash_layers, hp.n_layer);
  // On a 600-token sequence a ratio-4 layer has 150 compressed rows: top-k must select.
  EXPECT_LT(hp.indexer_top_k * 10, 600u / 4);
  // Every mix must hold every matrix: K-quant rows are multiples of 256.
  EXPECT_EQ(hp.n_embd % 256, 0u);
  EXPECT_EQ(hp.n_ff_exp % 256, 0u);
}

TEST(MkmodelHParams, BenchHasFlashWidths) {
  const Deepseek4HParams flash = preset_flash();
  for (uint32_t layers : {1u, 2u, 5u}) {
    const Deepseek4HParams b = preset_bench(layers);
    EXPECT_EQ(b.n_layer, layers);
    EXPECT_EQ(b.n_embd, 4096u);
    EXPECT_EQ(b.n_head, 64u);
    EXPECT_EQ(b.head_dim, 512u);
    EXPECT_EQ(b.n_rot, 64u);
    EXPECT_EQ(b.q_lora_rank, 1024u);
    EXPECT_EQ(b.o_groups, 8u);
    EXPECT_EQ(b.o_lora_rank, 1024u);
    EXPECT_EQ(b.n_expert, 256u);
    EXPECT_EQ(b.n_expert_used, 6u);
    EXPECT_EQ(b.n_expert_shared, 1u);
    EXPECT_EQ(b.n_ff_exp, 2048u);
    EXPECT_EQ(b.n_vocab, 129280u);
    EXPECT_EQ(b.indexer_n_head, 64u);
    EXPECT_EQ(b.indexer_head_dim, 128u);
    EXPECT_EQ(b.indexer_top_k, 512u);
    EXPECT_EQ(b.n_swa, 128u);
    EXPECT_EQ(b.hc_count, 4u);
    EXPECT_EQ(b.hc_sinkhorn_iters, 20u);
    EXPECT_EQ(b.n_hash_layers, std::min(3u, layers - 1));
    ASSERT_EQ(b.compress_ratios.size(), layers);
    EXPECT_EQ(b.compress_ratios[0], 4u);  // llama.cpp needs a ratio-4 layer
    if (layers > 1) {
      EXPECT_EQ(b.compress_ratios[1], 128u);
    }
    EXPECT_NO_THROW(b.validate());
  }
  // Flash as MODEL.md §1 gives it.
  EXPECT_EQ(flash.n_layer, 43u);
  ASSERT_EQ(flash.compress_ratios.size(), 43u);
  for (uint32_t il = 0; il < 43; ++il) {
    const uint32_t want = il < 2 ? 0 : (il % 2 == 0 ? 4 : 128);
    EXPECT_EQ(flash.compress_ratios[il], want) << "layer " << il;
  }
  EXPECT_EQ(flash.n_hash_layers, 3u);
}

TEST(MkmodelHParams, FlashTensorListMatchesTheSpec) {
  const Deepseek4HParams hp = preset_flash();
  const std::vector<TensorSpec> t = deepseek4_tensors(hp);
  // MODEL.md §2.2: 6 + 43*24 + 41*4 + 21*6.
  EXPECT_EQ(t.size(), 1328u);
  std::map<std::string, std::vector<uint64_t>> shape;
  for (const TensorSpec& s : t) {
    EXPECT_TRUE(shape.emplace(s.name, s.ne).second) << "duplicate " << s.name;
  }
  const std::map<std::string, std::vector<uint64_t>> want = {
      {"token_embd.weight", {4096, 129280}},
      {"output_hc_fn.weight", {16384, 4}},
      {"output_hc_base.weight", {4}},
      {"output_hc_scale.weight", {1}},
      {"output_norm.weight", {4096}},
      {"output.weight", {4096, 129280}},
      {"blk.0.hc_attn_fn.weight", {16384, 24}},
      {"blk.0.hc_attn_scale.weight", {3}},
      {"blk.0.hc_attn_base.weight", {24}},
      {"blk.0.attn_norm.weight", {4096}},
      {"blk.0.attn_q_a.weight", {4096, 1024}},
      {"blk.0.attn_q_a_norm.weight", {1024}},
      {"blk.0.attn_q_b.weight", {1024, 32768}},
      {"blk.0.attn_kv.weight", {4096, 512}},
      {"blk.0.attn_kv_a_norm.weight", {512}},
      {"blk.0.attn_sinks.weight", {64}},
      {"blk.0.attn_output_a.weight", {4096, 8192}},
      {"blk.0.attn_output_b.weight", {8192, 4096}},
      {"blk.0.hc_ffn_fn.weight", {16384, 24}},
      {"blk.0.ffn_norm.weight", {4096}},
      {"blk.0.ffn_gate_inp.weight", {4096, 256}},
      {"blk.0.ffn_gate_tid2eid.weight", {6, 129280}},
      {"blk.2.ffn_gate_tid2eid.weight", {6, 129280}},
      {"blk.3.exp_probs_b.bias", {256}},
      {"blk.0.ffn_gate_exps.weight", {4096, 2048, 256}},
      {"blk.0.ffn_up_exps.weight", {4096, 2048, 256}},
      {"blk.0.ffn_down_exps.weight", {2048, 4096, 256}},
      {"blk.0.ffn_gate_shexp.weight", {4096, 2048}},
      {"blk.0.ffn_up_shexp.weight", {4096, 2048}},
      {"blk.0.ffn_down_shexp.weight", {2048, 4096}},
      {"blk.2.attn_compressor_ape.weight", {1024, 4}},
      {"blk.2.attn_compressor_kv.weight", {4096, 1024}},
      {"blk.2.attn_compressor_gate.weight", {4096, 1024}},
      {"blk.2.attn_compressor_norm.weight", {512}},
      {"blk.3.attn_compressor_ape.weight", {512, 128}},
      {"blk.3.attn_compressor_kv.weight", {4096, 512}},
      {"blk.2.indexer.attn_q_b.weight", {1024, 8192}},
      {"blk.2.indexer.proj.weight", {4096, 64}},
      {"blk.2.indexer_compressor_ape.weight", {256, 4}},
      {"blk.2.indexer_compressor_kv.weight", {4096, 256}},
      {"blk.2.indexer_compressor_gate.weight", {4096, 256}},
      {"blk.2.indexer_compressor_norm.weight", {128}},
  };
  for (const auto& [name, ne] : want) {
    ASSERT_TRUE(shape.count(name)) << name << " missing";
    EXPECT_EQ(shape[name], ne) << name;
  }
  // Conditional tensors only where the spec puts them.
  for (const char* absent : {"blk.0.attn_compressor_kv.weight", "blk.1.attn_compressor_ape.weight",
                             "blk.3.indexer.proj.weight", "blk.2.exp_probs_b.bias", "blk.3.ffn_gate_tid2eid.weight"}) {
    EXPECT_FALSE(shape.count(absent)) << absent;
  }
}

// SYSTEMS.md §2.2: one routed expert (gate + up + down) takes 7,077,888 B in
// q2, 14,155,776 B in q4 and 13,369,344 B in MXFP4.
TEST(MkmodelHParams, RoutedExpertBytesMatchThePublishedFiles) {
  const Deepseek4HParams hp = preset_bench(2);
  const std::vector<TensorSpec> t = deepseek4_tensors(hp);
  const std::map<QuantMix, uint64_t> want = {
      {QuantMix::Ds4Q2, 7077888}, {QuantMix::Ds4Q4, 14155776}, {QuantMix::Mxfp4, 13369344}};
  for (const auto& [mix, bytes] : want) {
    uint64_t per_expert = 0;
    for (const TensorSpec& s : t) {
      if (s.layer != 0) continue;
      if (s.family() != TensorFamily::RoutedGateUp && s.family() != TensorFamily::RoutedDown) continue;
      per_expert += *ggml_nbytes(tensor_type(mix, s), s.n_elements()) / hp.n_expert;
    }
    EXPECT_EQ(per_expert, bytes) << quant_mix_name(mix);
  }
}

TEST(MkmodelHParams, ResizeLayersKeepsThePattern) {
  Deepseek4HParams hp = preset_tiny();
  resize_layers(hp, 9);
  EXPECT_EQ(hp.compress_ratios, (std::vector<uint32_t>{0, 4, 128, 4, 128, 4, 128, 4, 128}));
  EXPECT_EQ(hp.swiglu_clamp_exp.size(), 9u);
  EXPECT_NO_THROW(hp.validate());
  resize_layers(hp, 2);
  EXPECT_EQ(hp.compress_ratios, (std::vector<uint32_t>{0, 4}));
  EXPECT_EQ(hp.n_hash_layers, 1u);  // one top-k routed layer stays
  EXPECT_NO_THROW(hp.validate());
}

struct Rule {
  const char* what;
  std::function<void(Deepseek4HParams&)> change;
  const char* message;  // a fragment the error must contain
};

TEST(MkmodelHParams, RuleViolationsAreNamed) {
  const std::vector<Rule> rules = {
      {"ratio 2", [](auto& h) { h.compress_ratios[1] = 2; }, "must be 0, 4 or 128"},
      {"no ratio 4", [](auto& h) { h.compress_ratios = {0, 128, 128, 0, 128, 0}; }, "at least one ratio-4"},
      {"ratio list length", [](auto& h) { h.compress_ratios.pop_back(); }, "compress ratios list has 5"},
      {"hc 3", [](auto& h) { h.hc_count = 3; }, "hyper-connection count 3 must be 4"},
      {"two KV heads", [](auto& h) { h.n_head_kv = 2; }, "KV head count 2 must be 1"},
      {"indexer 96", [](auto& h) { h.indexer_head_dim = 96; }, "indexer key length 96"},
      {"indexer 32", [](auto& h) { h.indexer_head_dim = 32; }, "power of two >= 64"},
      {"odd rope", [](auto& h) { h.n_rot = 63; }, "rope dims 63 must be even"},
      {"rope > head", [](auto& h) { h.n_rot = 256; }, "must not exceed head dim"},
      {"rope > indexer", [](auto& h) {
         h.head_dim = 256;
         h.n_rot = 192;
         h.indexer_head_dim = 128;
       }, "must not exceed indexer key length"},
      {"fp8 blocks", [](auto& h) { h.head_dim = 160; }, "multiple of 64 (FP8 KV blocks)"},
      {"o_groups", [](auto& h) { h.o_groups = 3; }, "output group count 3 must divide head count 4"},
      {"experts used", [](auto& h) { h.n_expert_used = 17; }, "experts used 17"},
      {"hash layers", [](auto& h) { h.n_hash_layers = 7; }, "hash layer count 7 exceeds block count 6"},
      {"gating", [](auto& h) { h.expert_gating_func = 1; }, "gating function 1 must be 4 (sqrt-softplus)"},
      {"no layers", [](auto& h) { h.n_layer = 0; }, "block count 0"},
      {"clamps", [](auto& h) { h.swiglu_clamp_exp.resize(2); }, "swiglu clamp list has 2"},
      {"rope scaling", [](auto& h) { h.rope_scaling_type = "linear"; }, "must be 'yarn'"},
      {"window", [](auto& h) { h.n_swa = 0; }, "sliding window must be at least 1"},
      {"sinkhorn", [](auto& h) { h.hc_sinkhorn_iters = 0; }, "Sinkhorn iteration count"},
      {"eps", [](auto& h) { h.rms_eps = 0.0f; }, "RMS norm epsilon"},
      {"too many experts", [](auto& h) { h.n_expert = 2000; }, "expert count 2000"},
  };
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.what);
    Deepseek4HParams hp = preset_tiny();
    r.change(hp);
    const std::string msg = error_of([&] { hp.validate(); });
    EXPECT_NE(msg.find(r.message), std::string::npos) << "got: '" << msg << "'";
    // The tensor list refuses the same hyperparameters.
    EXPECT_FALSE(error_of([&] { (void)deepseek4_tensors(hp); }).empty());
  }
}

TEST(MkmodelHParams, MetadataRoundTrips) {
  TempDir dir;
  for (Deepseek4HParams hp : {preset_tiny(), preset_small(), preset_bench(3), preset_pro()}) {
    SCOPED_TRACE(hp.name);
    hp.swiglu_clamp_shexp.assign(hp.n_layer, 7.5f);  // the optional key too
    gguf::Writer w;
    write_metadata(hp, w);
    const std::string path = dir.file(hp.name + ".gguf");
    w.write(path);
    const gguf::File f = gguf::File::open(path);
    EXPECT_EQ(read_metadata(f), hp);
    // The exact scalar types llama.cpp's loader insists on.
    EXPECT_EQ(f.get("deepseek4.context_length").type(), gguf::ValueType::U32);
    EXPECT_EQ(f.get("deepseek4.rope.scaling.original_context_length").type(), gguf::ValueType::U32);
    EXPECT_EQ(f.get("deepseek4.expert_weights_norm").type(), gguf::ValueType::BOOL);
    EXPECT_EQ(f.get("deepseek4.rope.freq_base").type(), gguf::ValueType::F32);
    EXPECT_EQ(f.get("deepseek4.swiglu_clamp_exp").array_type(), gguf::ValueType::F32);
    EXPECT_EQ(f.get("deepseek4.swiglu_clamp_exp").size(), hp.n_layer);
    EXPECT_EQ(f.get("deepseek4.attention.compress_ratios").array_type(), gguf::ValueType::U32);
    EXPECT_EQ(f.get_string("general.architecture"), "deepseek4");
    EXPECT_EQ(f.get_u32("deepseek4.expert_gating_func"), 4u);
    EXPECT_EQ(f.get_u32("deepseek4.attention.key_length"), f.get_u32("deepseek4.attention.value_length"));
  }
}

TEST(MkmodelHParams, ReadingAcceptsOtherWritersForms) {
  // Flash's files carry 44 ratios (one for MTP) and a scalar clamp; ds4's may
  // omit the gating key; context length may be u64.
  TempDir dir;
  const Deepseek4HParams hp = preset_tiny();
  gguf::Writer w;
  write_metadata(hp, w);
  std::vector<uint32_t> ratios = hp.compress_ratios;
  ratios.push_back(0);
  w.set_array_u32("deepseek4.attention.compress_ratios", ratios);
  w.set_f32("deepseek4.swiglu_clamp_exp", 10.0f);
  w.set_u64("deepseek4.context_length", hp.n_ctx_train);
  const std::string path = dir.file("other.gguf");
  w.write(path);
  EXPECT_EQ(read_metadata(gguf::File::open(path)), hp);
}

TEST(MkmodelHParams, ReadingNamesWhatIsWrong) {
  TempDir dir;
  struct Case {
    const char* what;
    std::function<void(gguf::Writer&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"K != V", [](gguf::Writer& w) { w.set_u32("deepseek4.attention.value_length", 64); },
       "value length 64 must equal key length 128"},
      {"short ratios", [](gguf::Writer& w) { w.set_array_u32("deepseek4.attention.compress_ratios", {0, 4}); },
       "deepseek4.attention.compress_ratios' has 2 entries"},
      {"rule", [](gguf::Writer& w) { w.set_u32("deepseek4.hyper_connection.count", 8); },
       "hyper-connection count 8 must be 4"},
      {"groups", [](gguf::Writer& w) { w.set_u32("deepseek4.expert_group_count", 4); }, "no expert groups"},
      {"arch", [](gguf::Writer& w) { w.set_string("general.architecture", "llama"); }, "expected 'deepseek4'"},
      {"mtp", [](gguf::Writer& w) { w.set_u32("deepseek4.nextn_predict_layers", 1); },
       "MTP blocks inside the main model file are not supported"},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    gguf::Writer w;
    write_metadata(preset_tiny(), w);
    c.edit(w);
    const std::string path = dir.file("bad" + std::to_string(i++) + ".gguf");
    w.write(path);
    const std::string msg = error_of([&] { (void)read_metadata(gguf::File::open(path)); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << "got: '" << msg << "'";
    EXPECT_NE(msg.find(path), std::string::npos) << "the file is not named: '" << msg << "'";
  }
  // A missing key.
  gguf::Writer w;
  w.set_string("general.architecture", "deepseek4");
  const std::string path = dir.file("empty.gguf");
  w.write(path);
  const std::string msg = error_of([&] { (void)read_metadata(gguf::File::open(path)); });
  EXPECT_NE(msg.find("deepseek4.block_count"), std::string::npos) << msg;
}

TEST(MkmodelHParams, TensorDirectoryValidation) {
  TempDir dir;
  Deepseek4HParams hp = preset_tiny();
  hp.n_expert = 4;
  hp.n_expert_used = 2;
  resize_layers(hp, 3);  // ratios 0, 4, 128; layers 0 and 1 hash routed
  auto write = [&](const std::string& name, const std::function<bool(const TensorSpec&, gguf::Writer&)>& edit) {
    gguf::Writer w;
    write_metadata(hp, w);
    for (const TensorSpec& s : deepseek4_tensors(hp)) {
      if (edit(s, w)) continue;
      const GgmlType type = s.kind == TensorKind::FfnGateTid2Eid ? GgmlType::I32 : GgmlType::F32;
      w.add_tensor(s.name, type, s.ne, [](std::span<uint8_t>) {});
    }
    const std::string path = dir.file(name);
    w.write(path);
    return path;
  };
  const std::string good = write("good.gguf", [](const TensorSpec&, gguf::Writer&) { return false; });
  EXPECT_NO_THROW(validate_tensor_directory(gguf::File::open(good), hp));

  const std::string missing = write("missing.gguf", [](const TensorSpec& s, gguf::Writer&) {
    return s.name == "blk.1.ffn_gate_tid2eid.weight";
  });
  std::string msg = error_of([&] { validate_tensor_directory(gguf::File::open(missing), hp); });
  EXPECT_NE(msg.find("'blk.1.ffn_gate_tid2eid.weight' missing (hash layers route by token id)"), std::string::npos)
      << msg;

  // A ratio-4 ape ([2*head_dim, 4]) stored transposed.
  const std::string reshaped4 = write("shape4.gguf", [](const TensorSpec& s, gguf::Writer& w) {
    if (s.name != "blk.1.attn_compressor_ape.weight") return false;
    w.add_tensor(s.name, GgmlType::F32, {s.ne[1], s.ne[0]}, [](std::span<uint8_t>) {});
    return true;
  });
  msg = error_of([&] { validate_tensor_directory(gguf::File::open(reshaped4), hp); });
  EXPECT_NE(msg.find("'blk.1.attn_compressor_ape.weight' has shape [4, 256], expected [256, 4]"), std::string::npos)
      << msg;

  const std::string extra = write("extra.gguf", [](const TensorSpec& s, gguf::Writer& w) {
    if (s.name == "output.weight") w.add_tensor("blk.0.exp_probs_b.bias", GgmlType::F32, {16}, [](std::span<uint8_t>) {});
    return false;
  });
  msg = error_of([&] { validate_tensor_directory(gguf::File::open(extra), hp); });
  EXPECT_NE(msg.find("'blk.0.exp_probs_b.bias' is not part of"), std::string::npos) << msg;

  const std::string wrong_type = write("type.gguf", [](const TensorSpec& s, gguf::Writer& w) {
    if (s.kind != TensorKind::FfnGateTid2Eid) return false;
    w.add_tensor(s.name, GgmlType::F32, s.ne, [](std::span<uint8_t>) {});
    return true;
  });
  msg = error_of([&] { validate_tensor_directory(gguf::File::open(wrong_type), hp); });
  EXPECT_NE(msg.find("expected i32"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ds4::model
