// Whole synthetic model files, written through the library exactly as
// ds4-mkmodel writes them and read back with gguf::File: every preset x quant
// mix has the deepseek4 tensor set, the types the mix specifies, metadata and
// tokenizer that round-trip, and weights with the designed statistics; the
// bytes are reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"
#include "model/quant_mix.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "quant/quant.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::string write_model(const Deepseek4HParams& hp, QuantMix mix, uint64_t seed, unsigned threads,
                        const std::string& path) {
  gguf::Writer w;
  write_metadata(hp, w);
  make_synthetic_tokenizer(hp.n_vocab).write(w);
  add_synthetic_tensors(w, hp, mix, seed, threads);
  w.write(path);
  return path;
}

// The types SYSTEMS.md §2.2 and the mix definitions give, written out here
// independently of quant_mix.cpp.
GgmlType expected_type(QuantMix mix, TensorKind kind, uint64_t row_length) {
  const TensorFamily fam = family_of(kind);
  using F = TensorFamily;
  switch (fam) {
    case F::Norm:
    case F::HcScale:
    case F::HcBase:
    case F::AttnSinks:
    case F::RouterBias: return GgmlType::F32;
    case F::Tid2Eid: return GgmlType::I32;
    default: break;
  }
  if (mix == QuantMix::F32) return GgmlType::F32;
  if (mix == QuantMix::F16) return GgmlType::F16;
  if (mix == QuantMix::Q8_0) return GgmlType::Q8_0;
  if (mix == QuantMix::Bf16) return GgmlType::BF16;
  if (mix == QuantMix::Q6_K) return row_length % 256 == 0 ? GgmlType::Q6_K : GgmlType::F16;
  if (mix == QuantMix::Iq3Xxs) {
    if (row_length % 256 != 0) return GgmlType::F16;
    return fam == F::Embedding ? GgmlType::IQ3_S : GgmlType::IQ3_XXS;
  }
  if (mix == QuantMix::Q3_K) return row_length % 256 == 0 ? GgmlType::Q3_K : GgmlType::F16;
  if (mix == QuantMix::Q5_K) return row_length % 256 == 0 ? GgmlType::Q5_K : GgmlType::F16;
  if (mix == QuantMix::Iq4Xs) {
    return row_length % 256 == 0 ? GgmlType::IQ4_XS : row_length % 32 == 0 ? GgmlType::IQ4_NL : GgmlType::F16;
  }
  if (mix == QuantMix::Legacy) {
    if (fam == F::RoutedGateUp) return GgmlType::Q4_0;
    if (fam == F::RoutedDown) return GgmlType::Q4_1;
    GgmlType t = GgmlType::F16;
    if (fam == F::AttnProjection || fam == F::OutputHead) t = GgmlType::Q5_0;
    if (fam == F::SharedExpert || fam == F::Embedding) t = GgmlType::Q5_1;
    return row_length % 32 == 0 ? t : GgmlType::F16;
  }
  if (mix == QuantMix::LlamaConvert) {
    // The converter keeps each checkpoint tensor's type: FP8 -> Q8_0, FP4
    // experts -> MXFP4, F32 and BF16 as they are. FP8 in the checkpoint:
    // attention projections, shared expert and the indexer's q_b.
    if (kind == TensorKind::IndexerQB) return GgmlType::Q8_0;
    switch (fam) {
      case F::AttnProjection:
      case F::SharedExpert: return GgmlType::Q8_0;
      case F::RoutedGateUp:
      case F::RoutedDown: return GgmlType::MXFP4;
      case F::HcFn:
      case F::CompressorApe: return GgmlType::F32;
      default: return GgmlType::BF16;
    }
  }
  switch (fam) {
    case F::OutputHead:
    case F::AttnProjection:
    case F::SharedExpert: return GgmlType::Q8_0;
    case F::RoutedGateUp:
      return mix == QuantMix::Ds4Q2 ? GgmlType::IQ2_XXS : mix == QuantMix::Ds4Q4 ? GgmlType::Q4_K : GgmlType::MXFP4;
    case F::RoutedDown:
      return mix == QuantMix::Ds4Q2 ? GgmlType::Q2_K : mix == QuantMix::Ds4Q4 ? GgmlType::Q4_K : GgmlType::MXFP4;
    default: return GgmlType::F16;  // embedding, HC fn, compressor, indexer, router
  }
}

std::vector<float> dequantize(const gguf::TensorInfo& t) {
  std::vector<float> out(t.n_elements);
  quant::dequantize_row(t.type, t.data, out.data(), static_cast<int64_t>(t.n_elements));
  return out;
}

struct Stats {
  double mean, std;
};
Stats stats(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += static_cast<double>(x) * x;
  }
  const double mean = s / v.size();
  return {mean, std::sqrt(std::max(0.0, s2 / v.size() - mean * mean))};
}

void check_file(const std::string& path, const Deepseek4HParams& hp, QuantMix mix) {
  const gguf::File f = gguf::File::open(path);

  // Tensor set, order and shapes.
  EXPECT_NO_THROW(validate_tensor_directory(f, hp));
  const std::vector<TensorSpec> specs = deepseek4_tensors(hp);
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(f.tensors()[i].name, specs[i].name);
    EXPECT_EQ(f.tensors()[i].ne, specs[i].ne) << specs[i].name;
    EXPECT_EQ(f.tensors()[i].type, expected_type(mix, specs[i].kind, specs[i].row_length())) << specs[i].name;
  }

  // Metadata and tokenizer.
  EXPECT_EQ(read_metadata(f), hp);
  const TokenizerData tok = TokenizerData::read(f);
  EXPECT_NO_THROW(tok.validate());
  EXPECT_EQ(tok.size(), hp.n_vocab);
  EXPECT_EQ(f.tensor("token_embd.weight").ne[1], tok.size());
  EXPECT_EQ(tok.tokens, make_synthetic_tokenizer(hp.n_vocab).tokens);

  // Weight statistics of a few families (whole tensors, dequantized by the
  // quant library): mean and std within 10% of the design.
  const double embd = hp.n_embd, ff = hp.n_ff_exp;
  const uint32_t top = hp.n_layer - 1;
  uint32_t csa = 0;  // first ratio-4 layer
  while (hp.ratio(csa) != 4) ++csa;
  const std::map<std::string, Stats> design = {
      {"token_embd.weight", {0.0, 1.0}},
      {"blk.0.attn_q_a.weight", {0.0, 1.0 / std::sqrt(embd)}},
      {"blk.0.attn_output_b.weight", {0.0, 1.0 / std::sqrt(static_cast<double>(hp.o_lora_rank) * hp.o_groups)}},
      {"blk.0.ffn_gate_inp.weight", {0.0, 2.0 / std::sqrt(embd)}},
      {"blk.0.ffn_gate_exps.weight", {0.0, 1.0 / std::sqrt(embd)}},
      {"blk." + std::to_string(top) + ".ffn_up_exps.weight", {0.0, 1.0 / std::sqrt(embd)}},
      {"blk." + std::to_string(top) + ".ffn_down_exps.weight", {0.0, 1.0 / std::sqrt(ff)}},
      {"blk.0.ffn_down_shexp.weight", {0.0, 1.0 / std::sqrt(ff)}},
      {"blk." + std::to_string(csa) + ".attn_compressor_kv.weight", {0.0, 1.0 / std::sqrt(embd)}},
      {"blk." + std::to_string(csa) + ".indexer.attn_q_b.weight", {0.0, 1.0 / std::sqrt(double{1} * hp.q_lora_rank)}},
      {"blk.0.hc_attn_fn.weight", {0.0, 1.0 / std::sqrt(4 * embd)}},
      {"output.weight", {0.0, 1.0 / std::sqrt(embd)}},
      {"blk.0.attn_norm.weight", {1.0, 0.05}},
  };
  for (const auto& [name, want] : design) {
    const Stats got = stats(dequantize(f.tensor(name)));
    EXPECT_NEAR(got.std, want.std, 0.1 * want.std) << name;
    EXPECT_NEAR(got.mean, want.mean, 0.1 * want.std) << name;
  }
  // tid2eid: distinct experts per token row.
  const gguf::TensorInfo& tid = f.tensor("blk.0.ffn_gate_tid2eid.weight");
  const auto* ids = reinterpret_cast<const int32_t*>(tid.data);
  for (uint64_t r = 0; r < tid.ne[1]; ++r) {
    for (uint64_t a = 0; a < tid.ne[0]; ++a) {
      ASSERT_LT(static_cast<uint32_t>(ids[r * tid.ne[0] + a]), hp.n_expert);
      for (uint64_t b = a + 1; b < tid.ne[0]; ++b) ASSERT_NE(ids[r * tid.ne[0] + a], ids[r * tid.ne[0] + b]);
    }
  }
}

class MkmodelFiles : public testing::TestWithParam<std::tuple<std::string, QuantMix>> {};

TEST_P(MkmodelFiles, ReadBackAsDesigned) {
  const auto& [preset, mix] = GetParam();
  const Deepseek4HParams hp = *preset_by_name(preset);
  TempDir dir;
  const std::string path = write_model(hp, mix, 5, 2, dir.file("model.gguf"));
  check_file(path, hp, mix);
}

INSTANTIATE_TEST_SUITE_P(
    PresetsByMixes, MkmodelFiles,
    testing::Combine(testing::Values("tiny", "small"),
                     testing::Values(QuantMix::F32, QuantMix::F16, QuantMix::Q8_0, QuantMix::Ds4Q2, QuantMix::Ds4Q4,
                                     QuantMix::Mxfp4, QuantMix::Bf16, QuantMix::LlamaConvert, QuantMix::Q6_K,
                                     QuantMix::Iq3Xxs, QuantMix::Q3_K, QuantMix::Q5_K, QuantMix::Iq4Xs,
                                     QuantMix::Legacy)),
    [](const auto& info) {
      std::string mix(quant_mix_name(std::get<1>(info.param)));
      for (char& c : mix)
        if (c == '-') c = '_';
      return std::get<0>(info.param) + "_" + mix;
    });

TEST(MkmodelFilesRepro, SameArgumentsSameBytes) {
  TempDir dir;
  // Random codes (ds4-q2, the whole tiny preset) and floats (f16, two layers).
  Deepseek4HParams two_layers = preset_tiny();
  resize_layers(two_layers, 2);
  for (QuantMix mix : {QuantMix::Ds4Q2, QuantMix::F16}) {
    SCOPED_TRACE(quant_mix_name(mix));
    const Deepseek4HParams& hp = mix == QuantMix::F16 ? two_layers : preset_tiny();
    const auto a = test::read_bytes(write_model(hp, mix, 3, 1, dir.file("a.gguf")));
    const auto b = test::read_bytes(write_model(hp, mix, 3, 2, dir.file("b.gguf")));
    const auto c = test::read_bytes(write_model(hp, mix, 4, 2, dir.file("c.gguf")));
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "same seed, different thread count: bytes differ";
    ASSERT_EQ(a.size(), c.size());
    EXPECT_FALSE(a == c) << "a different seed gave the same file";
    // The seed changes the weights, not the metadata: the header bytes agree.
    const gguf::File fa = gguf::File::open(dir.file("a.gguf"));
    EXPECT_TRUE(std::equal(a.begin(), a.begin() + fa.data_offset(), c.begin()));
  }
}

TEST(MkmodelFilesRepro, MixesRejectRowsTheirTypesCannotHold) {
  Deepseek4HParams hp = preset_tiny();
  hp.n_embd = 288;  // a multiple of 32 but not of 256
  EXPECT_NO_THROW(check_mix(QuantMix::Mxfp4, hp));
  EXPECT_NO_THROW(check_mix(QuantMix::Q8_0, hp));
  try {
    check_mix(QuantMix::Ds4Q2, hp);
    ADD_FAILURE() << "ds4-q2 accepted routed rows of 288";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row length 288 is not a multiple of 256 (iq2_xxs blocks)"),
              std::string::npos) << e.what();
  }
  hp.n_embd = 272;  // not even a multiple of 32: q8_0 falls back to f16, mxfp4 refuses
  EXPECT_THROW(check_mix(QuantMix::Mxfp4, hp), Error);
  for (const TensorSpec& s : deepseek4_tensors(hp)) {
    if (s.kind == TensorKind::AttnQA) {
      EXPECT_EQ(tensor_type(QuantMix::Q8_0, s), GgmlType::F16);
    }
    if (s.kind == TensorKind::AttnQB) {
      EXPECT_EQ(tensor_type(QuantMix::Q8_0, s), GgmlType::Q8_0);  // rows of q_lora = 128
    }
  }
}

}  // namespace
}  // namespace ds4::model
