// The whole model on a GPU (backend/cuda/cuda_backend.h) against the CPU
// backend on the tiny synthetic model (f32 and ds4-q2 weights, both
// numerics): the logits after a prompt and after every prompt token, greedy decoding bit-stable
// run to run, batched steps of several sessions equal to each alone,
// snapshots, and sessions moved between the backends through the session
// payload both ways. Needs a GPU: skipped without one, a
// failure with DS4_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_devices.h"
#include "core/error.h"
#include "cuda/gpu_test.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "support/synthetic_model.h"

namespace ds4::cuda {
namespace {

using backend::Numerics;

std::vector<int32_t> prompt_tokens(int n, int n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 7919 + 13) % n_vocab;
  return t;
}

// The largest |a - b| over the largest |b|.
double relative_max(std::span<const float> a, std::span<const float> b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

CudaBackendOptions options(int64_t ctx) {
  CudaBackendOptions o;
  o.max_ctx = ctx;
  return o;
}

class CudaBackendNumerics : public ::testing::TestWithParam<Numerics> {};

INSTANTIATE_TEST_SUITE_P(Both, CudaBackendNumerics, ::testing::Values(Numerics::Default, Numerics::Quality),
                         [](const auto& info) { return info.param == Numerics::Quality ? "Quality" : "Default"; });

TEST_P(CudaBackendNumerics, LogitsFollowTheCpuBackend) {
  REQUIRE_GPU();
  const Numerics numerics = GetParam();
  for (model::QuantMix mix : {model::QuantMix::F32, model::QuantMix::Ds4Q2}) {
    SCOPED_TRACE(std::string(model::quant_mix_name(mix)));
    const ds4::test::SyntheticModel m(model::preset_tiny(), mix, /*seed=*/21);
    const int n_vocab = static_cast<int>(m.hparams().n_vocab);
    cpu::Forward cpu(m.model(), numerics, nullptr);
    CudaBackend gpu(m.model(), numerics, options(512));
    EXPECT_EQ(gpu.numerics(), numerics);
    const std::vector<int32_t> prompt = prompt_tokens(70, n_vocab);
    std::vector<float> cpu_rows(prompt.size() * static_cast<size_t>(n_vocab)), gpu_rows(cpu_rows.size());
    auto cs = cpu.new_session(512);
    auto gs = gpu.new_session(512);
    cpu.eval(*cs, prompt, cpu_rows.data());
    gpu.eval(*gs, prompt, gpu_rows.data());
    // Every prompt row: the same top token for nearly all, none far off.
    int same = 0;
    double worst = 0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      const std::span<const float> c(cpu_rows.data() + t * n_vocab, static_cast<size_t>(n_vocab));
      const std::span<const float> g(gpu_rows.data() + t * n_vocab, static_cast<size_t>(n_vocab));
      same += argmax(c) == argmax(g) ? 1 : 0;
      worst = std::max(worst, relative_max(g, c));
    }
    EXPECT_GE(same, static_cast<int>(prompt.size()) * 9 / 10) << same << " of " << prompt.size();
    EXPECT_LT(worst, mix == model::QuantMix::F32 ? 2e-2 : 1e-1);
    EXPECT_EQ(gs->size(), static_cast<int64_t>(prompt.size()));
    ASSERT_EQ(gs->logits().size(), static_cast<size_t>(n_vocab));
    EXPECT_EQ(std::memcmp(gs->logits().data(), gpu_rows.data() + (prompt.size() - 1) * n_vocab, n_vocab * 4u), 0);

    // Chunked prefill (7 tokens a chunk) ends where one chunk does.
    gpu.set_prefill_chunk(7);
    auto chunked = gpu.new_session(512);
    gpu.eval(*chunked, prompt);
    EXPECT_LT(relative_max(chunked->logits(), gs->logits()), 1e-3);
    gpu.set_prefill_chunk(4096);
  }
}

TEST(CudaBackend, GreedyDecodeIsBitStableAndSnapshotsRestore) {
  REQUIRE_GPU();
  const ds4::test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, /*seed=*/22);
  CudaBackend gpu(m.model(), Numerics::Default, options(256));
  const std::vector<int32_t> prompt = prompt_tokens(40, static_cast<int>(m.hparams().n_vocab));
  auto a = gpu.new_session(256), b = gpu.new_session(256);
  gpu.eval(*a, prompt);
  gpu.eval(*b, prompt);
  const std::unique_ptr<backend::Session> snap = a->snapshot();
  const std::vector<int32_t> first = gpu.generate_greedy(*a, 24);
  const std::vector<int32_t> second = gpu.generate_greedy(*b, 24);
  EXPECT_EQ(first, second);
  ASSERT_EQ(a->logits().size(), b->logits().size());
  EXPECT_EQ(std::memcmp(a->logits().data(), b->logits().data(), a->logits().size() * 4), 0);
  // Back to the snapshot: the same continuation, bit for bit.
  a->restore(*snap);
  EXPECT_EQ(a->size(), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(gpu.generate_greedy(*a, 24), first);
  a->reset();
  EXPECT_EQ(a->size(), 0);
  gpu.eval(*a, prompt);
  EXPECT_EQ(gpu.generate_greedy(*a, 24), first);
}

TEST(CudaBackend, BatchedStepsLeaveEachSessionAsItsStepAlone) {
  REQUIRE_GPU();
  // Quantized weights: up to kMatvecTokens tokens take the decode kernels,
  // whose per-token results do not depend on the batch.
  const ds4::test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, /*seed=*/25);
  const int n_vocab = static_cast<int>(m.hparams().n_vocab);
  CudaBackend gpu(m.model(), Numerics::Default, options(256));
  const std::vector<std::vector<int32_t>> prompts = {
      prompt_tokens(30, n_vocab), {3, 9, 27, 81, 243}, prompt_tokens(19, 401)};
  std::vector<std::unique_ptr<backend::Session>> together, alone;
  for (const auto& p : prompts) {
    together.push_back(gpu.new_session(256));
    alone.push_back(gpu.new_session(256));
    gpu.eval(*together.back(), p);
    gpu.eval(*alone.back(), p);
  }
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> next(prompts.size());
    std::vector<backend::Part> parts(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      next[i] = argmax(together[i]->logits());
      parts[i].session = together[i].get();
      parts[i].tokens = std::span<const int32_t>(&next[i], 1);
    }
    gpu.eval(parts);
    for (size_t i = 0; i < prompts.size(); ++i) {
      gpu.eval(*alone[i], std::span<const int32_t>(&next[i], 1));
      ASSERT_EQ(std::memcmp(together[i]->logits().data(), alone[i]->logits().data(), n_vocab * 4u), 0)
          << "session " << i << " step " << step;
    }
  }
  // A 12-token prompt in one chunk equals it token by token.
  auto chunk = gpu.new_session(64), single = gpu.new_session(64);
  const std::vector<int32_t> twelve = prompt_tokens(12, n_vocab);
  gpu.eval(*chunk, twelve);
  for (int32_t id : twelve) gpu.eval(*single, std::span<const int32_t>(&id, 1));
  EXPECT_EQ(std::memcmp(chunk->logits().data(), single->logits().data(), n_vocab * 4u), 0);
}

TEST_P(CudaBackendNumerics, SessionsMoveBetweenTheBackendsThroughThePayload) {
  REQUIRE_GPU();
  const Numerics numerics = GetParam();
  const ds4::test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, /*seed=*/23);
  const int n_vocab = static_cast<int>(m.hparams().n_vocab);
  cpu::Forward cpu(m.model(), numerics, nullptr);
  CudaBackend gpu(m.model(), numerics, options(256));
  const std::vector<int32_t> prompt = prompt_tokens(45, n_vocab), more = {5, 77, 301};
  // GPU -> CPU: the CPU continues from the GPU's state as from its own.
  auto gs = gpu.new_session(256);
  gpu.eval(*gs, prompt);
  auto from_gpu = cpu.new_session(256);
  cpu.load_state(gpu.save_state(*gs), *from_gpu);
  EXPECT_EQ(from_gpu->size(), gs->size());
  auto cs = cpu.new_session(256);
  cpu.eval(*cs, prompt);
  cpu.eval(*from_gpu, more);
  cpu.eval(*cs, more);
  EXPECT_LT(relative_max(from_gpu->logits(), cs->logits()), 2e-2);
  // CPU -> GPU, and a session file.
  auto from_cpu = gpu.new_session(256);
  gpu.load_state(cpu.save_state(*cs), *from_cpu);
  gpu.eval(*from_cpu, more);
  cpu.eval(*cs, more);
  EXPECT_LT(relative_max(from_cpu->logits(), cs->logits()), 2e-2);
  const std::string path = ::testing::TempDir() + "/cuda_session.ds4s";
  gpu.save_session_file(path, *from_cpu);
  auto reloaded = gpu.new_session(256);
  gpu.load_session_file(path, *reloaded);
  EXPECT_EQ(reloaded->size(), from_cpu->size());
  gpu.eval(*reloaded, more);
  gpu.eval(*from_cpu, more);
  EXPECT_EQ(std::memcmp(reloaded->logits().data(), from_cpu->logits().data(), n_vocab * 4u), 0);
  // A state of the other numerics loads as the CPU's would: a Quality
  // state's f32 rows are refused by a Default session (not f16 values), the
  // session untouched; a Default state's f16 rows are f32 values too.
  const Numerics other = numerics == Numerics::Quality ? Numerics::Default : Numerics::Quality;
  cpu::Forward other_cpu(m.model(), other, nullptr);
  auto other_session = other_cpu.new_session(256);
  other_cpu.eval(*other_session, prompt);
  const std::vector<uint8_t> other_state = other_cpu.save_state(*other_session);
  const int64_t before = reloaded->size();
  if (numerics == Numerics::Default) {
    EXPECT_THROW(gpu.load_state(other_state, *reloaded), Error);
    EXPECT_EQ(reloaded->size(), before);
  } else {
    gpu.load_state(other_state, *reloaded);
    EXPECT_EQ(reloaded->size(), static_cast<int64_t>(prompt.size()));
  }
}

TEST(CudaBackend, RefusesWhatItCannotRun) {
  REQUIRE_GPU();
  const ds4::test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, /*seed=*/24);
  CudaBackend gpu(m.model(), Numerics::Default, options(64));
  EXPECT_THROW(gpu.new_session(65), Error);
  auto s = gpu.new_session(64);
  EXPECT_THROW(gpu.eval(*s, std::vector<int32_t>{static_cast<int32_t>(m.hparams().n_vocab)}), Error);
  EXPECT_THROW(gpu.eval(*s, prompt_tokens(65, 100)), Error);
  EXPECT_EQ(s->size(), 0);
  CudaBackendOptions tiny_vram = options(64);
  tiny_vram.vram.gib = {0.001};
  EXPECT_THROW(CudaBackend(m.model(), Numerics::Default, tiny_vram), Error);
}

// Logits of a prompt's every row, and the greedy continuation after it.
struct ModelRun {
  std::vector<float> rows;
  std::vector<int32_t> greedy;
};
ModelRun run_model(CudaBackend& gpu, const std::vector<int32_t>& prompt, int n_vocab) {
  ModelRun r;
  r.rows.resize(prompt.size() * static_cast<size_t>(n_vocab));
  auto s = gpu.new_session(256);
  gpu.eval(*s, prompt, r.rows.data());
  r.greedy = gpu.generate_greedy(*s, 12);
  return r;
}

CudaBackendOptions pair_options(std::vector<int> devices) {
  CudaBackendOptions o = options(256);
  o.tensor_parallel = true;
  o.devices = std::move(devices);
  o.one_gpu_pairs = o.devices[0] == o.devices[1];
  return o;
}

// Tensor parallel in a pair (the home routes, each GPU evaluates its half of
// the routed experts, the partner's part added onto the home's): the whole
// model as on one GPU, but for the order the experts' rows are added in.
// Here the pair is one GPU named twice (device copies stand in for NCCL).
TEST(CudaTensorParallel, APairOnOneGpuFollowsOneGpu) {
  REQUIRE_GPU();
  for (model::QuantMix mix : {model::QuantMix::F32, model::QuantMix::Ds4Q2}) {
    SCOPED_TRACE(std::string(model::quant_mix_name(mix)));
    const ds4::test::SyntheticModel m(model::preset_tiny(), mix, /*seed=*/26);
    const int n_vocab = static_cast<int>(m.hparams().n_vocab);
    const std::vector<int32_t> prompt = prompt_tokens(40, n_vocab);
    CudaBackend one(m.model(), Numerics::Default, options(256));
    CudaBackend pair(m.model(), Numerics::Default, pair_options({0, 0}));
    ASSERT_EQ(pair.placement().size(), 2u);
    EXPECT_EQ(pair.placement()[1].partner_of, 0);
    EXPECT_NE(backend::describe(pair.placement()[1]).find("odd routed experts of layers 0-"), std::string::npos);
    const ModelRun a = run_model(one, prompt, n_vocab), b = run_model(pair, prompt, n_vocab);
    int same = 0;
    double worst = 0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      const std::span<const float> x(a.rows.data() + t * n_vocab, static_cast<size_t>(n_vocab));
      const std::span<const float> y(b.rows.data() + t * n_vocab, static_cast<size_t>(n_vocab));
      same += argmax(x) == argmax(y) ? 1 : 0;
      worst = std::max(worst, relative_max(y, x));
    }
    EXPECT_GE(same, static_cast<int>(prompt.size()) * 9 / 10) << same << " of " << prompt.size();
    EXPECT_LT(worst, mix == model::QuantMix::F32 ? 1e-2 : 1e-1);
    // Bit-stable run to run.
    const ModelRun again = run_model(pair, prompt, n_vocab);
    EXPECT_EQ(std::memcmp(again.rows.data(), b.rows.data(), b.rows.size() * 4), 0);
    EXPECT_EQ(again.greedy, b.greedy);
  }
}

// Two GPUs over NCCL give what the one-GPU stand-in gives: the same kernels
// on each part, and a sum of two is the same bits either way. Needs two GPUs
// of one kind (skipped otherwise).
TEST(CudaTensorParallel, APairOverNcclEqualsTheStandIn) {
  REQUIRE_GPU();
  const GpuList list = list_gpus();
  if (list.devices.size() < 2 || list.devices[0].name != list.devices[1].name)
    GTEST_SKIP() << "needs two GPUs of one kind";
  const ds4::test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, /*seed=*/27);
  const int n_vocab = static_cast<int>(m.hparams().n_vocab);
  const std::vector<int32_t> prompt = prompt_tokens(30, n_vocab);
  CudaBackend stand_in(m.model(), Numerics::Default, pair_options({0, 0}));
  CudaBackend nccl(m.model(), Numerics::Default, pair_options({0, 1}));
  EXPECT_EQ(nccl.placement()[1].device, 1);
  const ModelRun a = run_model(stand_in, prompt, n_vocab), b = run_model(nccl, prompt, n_vocab);
  EXPECT_EQ(std::memcmp(a.rows.data(), b.rows.data(), a.rows.size() * 4), 0);
  EXPECT_EQ(a.greedy, b.greedy);
}

}  // namespace
}  // namespace ds4::cuda
