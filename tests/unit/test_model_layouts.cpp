// Full-size model layouts without their weights: `ds4-mkmodel --no-data`
// writes the header, metadata and tensor table of a Flash or PRO file and
// leaves the tensor data a hole, so an 80-460 GB layout is bound in
// milliseconds on any machine. Checked against SYSTEMS.md §2.1, which lists
// the published files' sizes (q2 80.8 GiB, q4 153.3 GiB, mxfp4 145.3 GiB):
// the whole file must come out at that size, ds4-gguf info must describe it,
// and binding with memory accounting must succeed without reading a byte of
// tensor data (no page of the data section becomes resident).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "core/gguf.h"
#include "model/deepseek4_memory.h"
#include "model/deepseek4_model.h"
#include "model/deepseek4_tensors.h"
#include "model/quant_mix.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

#ifndef DS4_BIN_DIR
#error "DS4_BIN_DIR must be defined"
#endif

namespace ds4::model {
namespace {

namespace fs = std::filesystem;

struct Layout {
  const char* preset;
  const char* mix;
  double published_gib;  // SYSTEMS.md §2.1, to its one decimal; 0 when it lists none
};

// Pages of [begin, end) that are resident (mincore), whole pages inside.
uint64_t resident_pages(const uint8_t* begin, const uint8_t* end) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t e = reinterpret_cast<uintptr_t>(end) / page * page;
  if (e <= b) return 0;
  std::vector<unsigned char> v((e - b) / page);
  if (mincore(reinterpret_cast<void*>(b), e - b, v.data()) != 0) return UINT64_MAX;
  uint64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

void PrintTo(const Layout& l, std::ostream* os) { *os << l.preset << " " << l.mix; }

class ModelLayouts : public testing::TestWithParam<Layout> {};

TEST_P(ModelLayouts, BindWithoutReadingTensorData) {
  const Layout& l = GetParam();
  test::TempDir dir;
  const std::string path = dir.file("model.gguf");
  const test::ProcessResult made = test::run_app(
      DS4_BIN_DIR, "ds4-mkmodel", {"--preset", l.preset, "--mix", l.mix, "--no-data", "--out", path},
      test::Stderr::kMergeIntoStdout);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  EXPECT_NE(made.out.find("tensor data left a hole"), std::string::npos) << made.out;

  const uint64_t size = fs::file_size(path);
  if (l.published_gib > 0) {
    EXPECT_NEAR(static_cast<double>(size) / std::exp2(30.0), l.published_gib, 0.05) << size << " bytes";
  }

  const test::ProcessResult info =
      test::run_app(DS4_BIN_DIR, "ds4-gguf", {"info", path}, test::Stderr::kMergeIntoStdout);
  ASSERT_EQ(info.exit_code, 0) << info.out;
  EXPECT_NE(info.out.find("file size:    " + std::to_string(size) + " bytes"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("output.weight"), std::string::npos);

  const Deepseek4Model m = Deepseek4Model::open(path);
  const Deepseek4HParams& hp = m.hparams();
  EXPECT_EQ(m.weights().layers.size(), hp.n_layer);
  EXPECT_EQ(m.file().tensors().size(), deepseek4_tensors(hp).size());
  // Accounting from the bound views equals the planning figure of the mix and
  // the file's data section.
  const WeightBytes bound = weight_bytes(m.weights());
  EXPECT_EQ(bound.by_family, weight_bytes(hp, *quant_mix_from_name(l.mix)).by_family);
  EXPECT_EQ(bound.total(), m.file().tensor_data_bytes());
  // A token reads the non-routed matrices and n_expert_used of n_expert experts.
  EXPECT_GT(decode_weight_bytes_per_token(m.weights(), hp), bound.routed() * hp.n_expert_used / hp.n_expert);
  EXPECT_LT(decode_weight_bytes_per_token(m.weights(), hp), bound.non_routed() + bound.routed() / 8);

  // Nothing past the directory was touched.
  const auto bytes = m.file().bytes();
  const uint8_t* data = m.weights().token_embd.data;
  ASSERT_GE(data, bytes.data());
  EXPECT_EQ(resident_pages(data, bytes.data() + bytes.size()), 0u);
}

// V4 Pro's ds4-q2 layout, accounted from the bound file component by
// component against figures worked out by hand from MODEL.md §10's shapes
// (d 7168, 61 layers: 128, 128 then even -> 4, odd -> 128, i.e. 30 ratio-4
// and 31 ratio-128 layers; 128 heads x 512; q LoRA 1536; 16 x 1024 output
// groups; 384 experts of FF 3072, 6 used; 3 hash layers) and SYSTEMS.md §2.2's
// types (routed gate/up IQ2_XXS, down Q2_K; attention, shared expert and head
// Q8_0; embedding, HC fn, compressor, indexer and router F16), and the KV
// state against MODEL.md §7's Pro figure of 19,696 B per token (f32).
TEST(ModelLayoutsPro, Ds4Q2AccountingByComponent) {
  test::TempDir dir;
  const std::string path = dir.file("pro.gguf");
  const test::ProcessResult made = test::run_app(
      DS4_BIN_DIR, "ds4-mkmodel", {"--preset", "pro", "--mix", "ds4-q2", "--no-data", "--out", path},
      test::Stderr::kMergeIntoStdout);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const Deepseek4Model m = Deepseek4Model::open(path);
  const Deepseek4HParams& hp = m.hparams();
  ASSERT_EQ(hp, preset_pro());

  const uint64_t d = 7168, vocab = 129280, ff = 3072, experts = 384, layers = 61;
  const uint64_t csa = 30, hca = 31, hash = 3;  // ratio-4, ratio-128, hash-routed layers
  const auto q8 = [](uint64_t n) { return n / 32 * 34; };
  const auto f16 = [](uint64_t n) { return 2 * n; };
  const auto f32 = [](uint64_t n) { return 4 * n; };
  const WeightBytes w = weight_bytes(m.weights());
  using F = TensorFamily;
  EXPECT_EQ(w.of(F::Embedding), f16(d * vocab));
  EXPECT_EQ(w.of(F::OutputHead), q8(d * vocab));
  // One expert: gate + up 7168 x 3072 in IQ2_XXS (66 B / 256), down in Q2_K (84 B / 256).
  const uint64_t per_expert = 2 * (d / 256 * 66) * ff + (ff / 256 * 84) * d;
  EXPECT_EQ(per_expert, 18579456u);
  EXPECT_EQ(w.routed(), layers * experts * per_expert);
  // q_a, q_b (to 128 x 512), kv, output_a (16 groups of 8 heads x 512 -> 1024), output_b.
  EXPECT_EQ(w.of(F::AttnProjection),
            layers * q8(d * 1536 + 1536 * 65536 + d * 512 + 4096 * 16384 + 16384 * d));
  EXPECT_EQ(w.of(F::SharedExpert), layers * q8(3 * d * ff));
  EXPECT_EQ(w.of(F::Router), layers * f16(d * experts));
  EXPECT_EQ(w.of(F::RouterBias), (layers - hash) * f32(experts));
  EXPECT_EQ(w.of(F::Tid2Eid), hash * 4 * 6 * vocab);
  // HC over 4 x 7168 = 28672 values, mix width 24; the output head's 4 rows.
  EXPECT_EQ(w.of(F::HcFn), f16(layers * 2 * 28672 * 24 + 28672 * 4));
  EXPECT_EQ(w.of(F::HcScale), f32(layers * 2 * 3 + 1));
  EXPECT_EQ(w.of(F::HcBase), f32(layers * 2 * 24 + 4));
  // Compressors: ratio 4 two lanes of 512 (main) and of 128 (indexer), ratio 128 one lane of 512.
  EXPECT_EQ(w.of(F::CompressorProj), f16(csa * 2 * d * (1024 + 256) + hca * 2 * d * 512));
  EXPECT_EQ(w.of(F::CompressorApe), f16(csa * (1024 * 4 + 256 * 4) + hca * 512 * 128));
  EXPECT_EQ(w.of(F::IndexerProj), f16(csa * (1536 * 64 * 128 + d * 64)));
  EXPECT_EQ(w.of(F::AttnSinks), layers * f32(128));
  EXPECT_EQ(w.of(F::Norm), f32(layers * (d + 1536 + 512 + d + 512) + csa * 128 + d));
  EXPECT_EQ(w.total(), m.file().tensor_data_bytes());
  std::printf("[pro ds4-q2] weights %.2f GiB: routed %.2f, other %.2f (attention %.2f, shared %.2f)\n",
              static_cast<double>(w.total()) / std::exp2(30.0), static_cast<double>(w.routed()) / std::exp2(30.0),
              static_cast<double>(w.non_routed()) / std::exp2(30.0),
              static_cast<double>(w.of(F::AttnProjection)) / std::exp2(30.0),
              static_cast<double>(w.of(F::SharedExpert)) / std::exp2(30.0));

  // A decode step reads every non-routed tensor but one embedding row and one
  // tid2eid row per hash layer, and 6 of the 384 experts.
  EXPECT_EQ(decode_weight_bytes_per_token(m.weights(), hp),
            w.non_routed() - w.of(F::Embedding) + f16(d) - w.of(F::Tid2Eid) + hash * 4 * 6 +
                layers * 6 * per_expert);

  // KV: 30 ratio-4 layers x (512 + 128) / 4 + 31 ratio-128 layers x 512 / 128 values per token.
  EXPECT_EQ(kv_bytes_per_token(hp, 4), 19696.0);
  const uint64_t mi = uint64_t{1} << 20;
  EXPECT_EQ(kv_compressed_bytes(hp, mi, 4), 19696 * mi);  // "20.7 GB at 1M"
  const KvStateBytes k = kv_state_bytes(hp, mi, 4);
  EXPECT_EQ(k.raw_window, layers * 128 * 512 * 4);
  EXPECT_EQ(k.compressed_attn, csa * (mi / 4 + 2) * 512 * 4 + hca * (mi / 128 + 2) * 512 * 4);
  EXPECT_EQ(k.compressed_index, csa * (mi / 4 + 2) * 128 * 4);
  EXPECT_EQ(k.frontiers, csa * 80 * 1024 + hca * 512 * 1024);
  EXPECT_NEAR(static_cast<double>(k.total()) / 1e9, 20.7, 0.05);
  std::printf("[pro ds4-q2] KV %.0f B/token f32; state at 1M tokens %.2f GB\n", kv_bytes_per_token(hp, 4),
              static_cast<double>(k.total()) / 1e9);
}

// The Flash file llama.cpp's converter writes from the official checkpoint
// (docs/model-files.md, "The converter's layout"): FP8 matrices Q8_0 (the
// indexer's q_b among them), BF16 ones BF16, F32 ones F32, experts MXFP4.
// Known answers from MODEL.md §2.2's shapes (21 ratio-4, 20 ratio-128 layers).
TEST(ModelLayoutsConverter, FlashTypesAndSizes) {
  test::TempDir dir;
  const std::string path = dir.file("flash-convert.gguf");
  const test::ProcessResult made = test::run_app(
      DS4_BIN_DIR, "ds4-mkmodel", {"--preset", "flash", "--mix", "llama-convert", "--no-data", "--out", path},
      test::Stderr::kMergeIntoStdout);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const Deepseek4Model m = Deepseek4Model::open(path);
  EXPECT_EQ(m.file().tensor("blk.2.indexer.attn_q_b.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(m.file().tensor("blk.2.indexer.proj.weight").type, GgmlType::BF16);
  EXPECT_EQ(m.file().tensor("blk.2.attn_output_a.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(m.file().tensor("blk.3.attn_compressor_ape.weight").type, GgmlType::F32);

  const uint64_t d = 4096, vocab = 129280, csa = 21, hca = 20, layers = 43;
  const auto q8 = [](uint64_t n) { return n / 32 * 34; };
  const auto bf16 = [](uint64_t n) { return 2 * n; };
  const auto f32 = [](uint64_t n) { return 4 * n; };
  const WeightBytes w = weight_bytes(m.weights());
  using F = TensorFamily;
  EXPECT_EQ(w.of(F::Embedding), bf16(d * vocab));
  EXPECT_EQ(w.of(F::OutputHead), bf16(d * vocab));
  EXPECT_EQ(w.of(F::Router), layers * bf16(d * 256));
  EXPECT_EQ(w.of(F::HcFn), f32(layers * 2 * 16384 * 24 + 16384 * 4));
  EXPECT_EQ(w.of(F::IndexerProj), csa * (q8(1024 * 8192) + bf16(d * 64)));
  EXPECT_EQ(w.of(F::CompressorProj), bf16(csa * 2 * d * (1024 + 256) + hca * 2 * d * 512));
  EXPECT_EQ(w.of(F::CompressorApe), f32(csa * (1024 * 4 + 256 * 4) + hca * 512 * 128));
  EXPECT_EQ(w.routed(), layers * 256 * uint64_t{13369344});  // MXFP4, as ds4's mxfp4 file
  const double gib = static_cast<double>(fs::file_size(path)) / std::exp2(30.0);
  std::printf("[flash llama-convert] file %.3f GiB, weights other than routed %.3f GiB\n", gib,
              static_cast<double>(w.non_routed()) / std::exp2(30.0));
  EXPECT_NEAR(gib, 145.636, 0.001);
}

INSTANTIATE_TEST_SUITE_P(Published, ModelLayouts,
                         testing::Values(Layout{"flash", "ds4-q2", 80.8}, Layout{"flash", "ds4-q4", 153.3},
                                         Layout{"flash", "mxfp4", 145.3}, Layout{"flash", "llama-convert", 0},
                                         Layout{"pro", "ds4-q2", 0}, Layout{"pro", "ds4-q4", 0}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.preset) + "_" + info.param.mix;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ds4::model
