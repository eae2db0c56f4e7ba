// Logits parity of our CPU forward pass in --quality numerics with llama.cpp's
// deepseek4 graph (the reference harness: flash attention off, F32 KV, all
// tokens in one batch), on three tiny shapes x every quant mix, over 640
// tokens: every sliding window wraps many times, ratio-4 layers hold 160
// compressed rows against an indexer top-k of 2-8, ratio-128 layers emit 5.
//
// --quality replicates the float order of the ggml kernels llama.cpp runs for
// a prefill batch on AVX-512 (tinyBLAS / vec_dot for F32, F16 and BF16, the
// 8-lane Q8_0 / Q5_0 / Q4_1 / Q5_1 and K-quant vec_dots, the repacked gemv /
// gemm of Q4_K / Q2_K / MXFP4 experts and Q4_0 / IQ4_NL matrices, the IQP
// kernel of the IQ types, softmax with ggml_v_expf, the compiler's fused
// multiply-adds in HC, RoPE and Sinkhorn), because llama.cpp re-quantises
// activations and one ulp upstream can flip an activation code. Bars (the
// issue's):
//   f32:         every position within 1e-3 of that reference row's range;
//                64 greedy tokens identical.
//   other mixes: top-1 agreement >= 99 % and mean KL(ref || ours) <= 1e-3
//                (measured: >= 639/640 and <= 3e-9, most bit-identical);
//                bf16 and llama-convert on AVX-512 CPUs without AVX512-BF16
//                (see has_unconfirmed_kernels) and any mix on a CPU without
//                AVX-512: top-1 >= 80 % and KL <= 0.02, a regression guard.
// With DS4_PARITY_SELF=1 also printed, not asserted: llama.cpp against
// itself decoding token by token, which takes other kernels (vec_dot instead
// of tinyBLAS / IQP) and lands much further away on the quantised mixes.
// DS4_PARITY_TRACE=1 prints every position whose error exceeds 1e-5. The
// case itself (figures, bars, greedy check) is forward_parity.h's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "forward_parity.h"
#include "logits_comparison.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "reference_client.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"

namespace ds4 {
namespace {

constexpr int kTokens = 640;
constexpr int kGreedy = 64;
constexpr int kRefThreads = 1;  // see test_reference_models.cpp

struct Config {
  std::string name;
  model::Deepseek4HParams hp;
  uint64_t seed;
};

// Three shapes the family rules allow, each with the indexer top-k far below
// the compressed row count and every attention kind present.
std::vector<Config> configs() {
  std::vector<Config> v;
  // head_dim 256, not the preset's 128: llama.cpp rotates every KV cache by a
  // Hadamard matrix when the attention head is as wide as the indexer head
  // (llama-kv-cache.cpp, "always create Hadamard rotation tensors for
  // DeepSeek lightning indexers"), which changes only rounding. Flash (512
  // vs 128) never has it, so the parity shapes avoid it too.
  auto a = model::preset_tiny();
  a.head_dim = 256;
  v.push_back({"tiny", a, 11});

  auto b = model::preset_tiny();
  b.head_dim = 256;
  b.name = "deepseek4-tiny-b";
  b.n_swa = 16;
  b.compress_ratios = {4, 0, 128, 4, 4, 128};
  b.indexer_top_k = 8;
  b.n_hash_layers = 1;
  b.n_expert = 8;
  b.n_expert_used = 2;
  b.q_lora_rank = 64;
  b.swiglu_clamp_exp.assign(b.n_layer, 7.0f);
  v.push_back({"wide_window", b, 22});

  auto c = model::preset_tiny();
  c.name = "deepseek4-tiny-c";
  c.head_dim = 256;
  c.n_layer = 4;
  c.n_embd = 512;
  c.n_head = 8;
  c.o_groups = 4;
  c.o_lora_rank = 32;
  c.q_lora_rank = 256;
  c.compress_ratios = {128, 4, 0, 4};
  c.indexer_n_head = 8;
  c.indexer_top_k = 2;
  c.n_hash_layers = 2;
  c.n_expert = 32;
  c.n_expert_used = 6;
  c.swiglu_clamp_exp.assign(c.n_layer, 10.0f);
  v.push_back({"eight_heads", c, 33});
  return v;
}

struct Case {
  size_t config;
  model::QuantMix mix;
};

std::string case_name(const testing::TestParamInfo<Case> &info) {
  std::string name = configs()[info.param.config].name + "_" + std::string(model::quant_mix_name(info.param.mix));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}
void PrintTo(const Case &c, std::ostream *os) {
  *os << configs()[c.config].name << " " << model::quant_mix_name(c.mix);
}

class ForwardParity : public testing::TestWithParam<Case> {};

TEST_P(ForwardParity, QualityLogitsMatchLlamaCpp) {
  const Config cfg = configs()[GetParam().config];
  reference::check_forward_parity({cfg.name, cfg.hp, GetParam().mix, cfg.seed, kTokens, kGreedy});
}

// Where no activation code flips, our --quality pass is llama.cpp's function
// bit for bit, quantised weights included: a Q8_0 model of one ratio-4 and
// one ratio-128 layer (hash routed, indexer active from token 19) over 64
// tokens. This pins the ggml-order Q8_0 dot (quant/dot_ggml_x86.cpp), the
// activation rounding, the HC, norms, compressors, indexer selection,
// attention and MoE to llama.cpp's exact float operations.
TEST(ForwardParityExact, Q8_0TwoLayersBitIdentical) {
  if (!reference::replicated_kernels()) GTEST_SKIP() << "llama.cpp runs a non-AVX-512 CPU variant here";
  auto hp = model::preset_tiny();
  hp.head_dim = 256;  // see configs()
  hp.n_layer = 2;
  hp.compress_ratios = {4, 128};
  hp.n_hash_layers = 1;
  hp.swiglu_clamp_exp.assign(2, 10.0f);
  test::SyntheticModel m(hp, model::QuantMix::Q8_0, 11);
  const auto tokens = test::random_tokens(hp.n_vocab, 64, 5);
  const auto ref = reference::logits(m.path(), tokens, kRefThreads);
  cpu::Forward fwd(m.model(), cpu::Numerics::Quality, nullptr);
  auto session = fwd.make_session(64);
  std::vector<float> ours(ref.size());
  fwd.eval(session, tokens, ours.data());
  // A rare activation-code flip (see the file header) may still touch a
  // row; every other row must be identical to the last bit.
  const size_t nv = hp.n_vocab;
  std::vector<size_t> differing;
  for (size_t t = 0; t < tokens.size(); ++t)
    if (!std::equal(ref.begin() + t * nv, ref.begin() + (t + 1) * nv, ours.begin() + t * nv)) differing.push_back(t);
  std::printf("[parity] q8_0 2-layer: %zu of %zu rows bit-identical\n", tokens.size() - differing.size(),
              tokens.size());
  EXPECT_LE(differing.size(), 2u) << "first differing row " << (differing.empty() ? 0 : differing[0]);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (size_t c = 0; c < configs().size(); ++c)
    for (auto mix : {model::QuantMix::F32, model::QuantMix::F16, model::QuantMix::Q8_0, model::QuantMix::Mxfp4,
                     model::QuantMix::Ds4Q2, model::QuantMix::Ds4Q4, model::QuantMix::Bf16,
                     model::QuantMix::LlamaConvert, model::QuantMix::Q6_K, model::QuantMix::Iq3Xxs,
                     model::QuantMix::Q3_K, model::QuantMix::Q5_K, model::QuantMix::Iq4Xs, model::QuantMix::Legacy})
      v.push_back({c, mix});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Mixes, ForwardParity, testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace ds4
