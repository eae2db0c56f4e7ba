// The forward pass's stateful pieces on a GPU against the CPU backend's, on
// the tiny synthetic model: the KV compressor fed in batches of many sizes
// (backend/cuda/compressor.h) against cpu::Compressor fed token by token, and
// the attention sublayer with its KV state (backend/cuda/attention_layer.h,
// layer_kv.h) against cpu::AttentionLayer and cpu::LayerKvState on every kind
// of layer in both numerics, including a state saved from and loaded into the CPU's, and the
// MoE sublayer (backend/cuda/moe_layer.h) against cpu::MoeLayer, hash and
// top-k layers, decode and prefill, f32 and ds4-q2 experts.
// Needs a GPU: skipped without one, a failure with DS4_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention_layer.h"
#include "backend/cpu/compressor.h"
#include "backend/cpu/layer_kv_state.h"
#include "backend/cpu/moe_layer.h"
#include "backend/cuda/attention_layer.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/moe_layer.h"
#include "core/error.h"
#include "cuda/gpu_test.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "support/compressor_cases.h"
#include "support/synthetic_model.h"

namespace ds4::cuda {
namespace {

using backend::Numerics;

class CudaLayers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new ds4::test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/11);
  }
  static void TearDownTestSuite() { delete model_; }
  static ds4::test::SyntheticModel* model_;
};
ds4::test::SyntheticModel* CudaLayers::model_ = nullptr;

TEST_F(CudaLayers, CompressorBatchesMatchTheCpuCompressorTokenByToken) {
  REQUIRE_GPU();
  const std::vector<int> batch_sizes = {1, 3, 4, 130, 7, 255, 2, 198};
  int total = 0;
  for (int s : batch_sizes) total += s;
  for (const ds4::test::CompressorCase& c : ds4::test::tiny_compressor_cases()) {
    const Numerics numerics = c.numerics;
    SCOPED_TRACE(c.name());
    cpu::Compressor ref(model_->layer(c.layer), model_->hparams(), c.role, numerics);
    const DeviceCompressor gpu(model_->layer(c.layer), model_->hparams(), c.role, numerics);
    const int width = ref.state_width(), dim = ref.dim();
    const auto [kv, score] =
        ds4::test::random_compressor_projections(total, width, static_cast<uint32_t>(17 + c.layer));
    DeviceCompressor::Frontier frontier = gpu.new_frontier(nullptr);
    int64_t pos = 0;
    int elements = 0, flips = 0;
    for (int size : batch_sizes) {
      std::vector<std::vector<float>> want;
      for (int64_t p = pos; p < pos + size; ++p) {
        const size_t at = static_cast<size_t>(p * width);
        if (auto row = ref.push(kv.data() + at, score.data() + at, p)) want.push_back(std::move(*row));
      }
      const size_t bytes = static_cast<size_t>(size * width) * sizeof(float);
      DeviceBuffer dkv(bytes), dscore(bytes), dout(static_cast<size_t>(size / ref.ratio() + 1) * dim * 4);
      dkv.upload(kv.data() + pos * width, bytes);
      dscore.upload(score.data() + pos * width, bytes);
      const backend::CompressorPlan plan =
          gpu.push_batch(frontier, dkv.as<float>(), dscore.as<float>(), pos, size, dout.as<float>(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(plan.n_windows(), static_cast<int64_t>(want.size())) << "batch at " << pos;
      std::vector<float> got(static_cast<size_t>(plan.n_windows() * dim));
      dout.download(got.data(), got.size() * sizeof(float));
      for (size_t w = 0; w < want.size(); ++w) {
        double rms = 0;
        for (float v : want[w]) rms += static_cast<double>(v) * v;
        rms = std::sqrt(rms / dim);
        for (int j = 0; j < dim; ++j) {
          const double have = got[w * dim + static_cast<size_t>(j)], expect = want[w][static_cast<size_t>(j)];
          ++elements;
          if (std::fabs(have - expect) <= 1e-5 * std::max(1.0, rms)) continue;
          // Default's FP8 / FP4 grids: a value an ulp from a rounding
          // boundary may land one grid step away; rarely.
          ASSERT_EQ(numerics, Numerics::Default) << "window " << w << " dim " << j << ": " << have << " vs " << expect;
          EXPECT_LE(std::fabs(have - expect), 0.5 * std::fabs(expect) + 1e-3) << "window " << w << " dim " << j;
          ++flips;
        }
      }
      // The frontier is copies and one add per score: exactly the CPU's.
      std::vector<float> fkv(ref.state_kv().size()), fscore(fkv.size());
      gpu.download(frontier, fkv, fscore);
      ASSERT_EQ(std::memcmp(fkv.data(), ref.state_kv().data(), fkv.size() * 4), 0) << "batch at " << pos;
      ASSERT_EQ(std::memcmp(fscore.data(), ref.state_score().data(), fscore.size() * 4), 0) << "batch at " << pos;
      pos += size;
    }
    EXPECT_LE(flips, elements / 1000) << flips << " of " << elements;
  }
}

// |a - b| over |b|, both as rows of `width`: the worst row's relative RMS
// error, and the fraction of rows above `good`.
struct RowErrors {
  double worst = 0;
  double above_good = 0;
};
RowErrors row_errors(const std::vector<float>& a, const std::vector<float>& b, int64_t width, double good) {
  RowErrors e;
  const int64_t rows = static_cast<int64_t>(b.size()) / width;
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < width; ++j) {
      const double d =
          static_cast<double>(a[static_cast<size_t>(r * width + j)]) - b[static_cast<size_t>(r * width + j)];
      num += d * d;
      den += static_cast<double>(b[static_cast<size_t>(r * width + j)]) * b[static_cast<size_t>(r * width + j)];
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    e.worst = std::max(e.worst, rel);
    if (rel > good) ++bad;
  }
  e.above_good = rows > 0 ? static_cast<double>(bad) / static_cast<double>(rows) : 0.0;
  return e;
}

// A CPU state's rows as f32: the window (oldest first), compressed, index.
std::vector<float> state_rows(const cpu::LayerKvState& s) {
  std::vector<float> v, scratch(static_cast<size_t>(std::max(s.head_dim(), s.index_dim())));
  for (int i = 0; i < s.raw_count(); ++i) {
    const float* r = s.raw_row(i, scratch.data());
    v.insert(v.end(), r, r + s.head_dim());
  }
  for (int64_t c = 0; c < s.n_compressed(); ++c) {
    const float* r = s.compressed_row(c, scratch.data());
    v.insert(v.end(), r, r + s.head_dim());
  }
  for (int64_t c = 0; c < s.n_index(); ++c) {
    const float* r = s.index_row(c, scratch.data());
    v.insert(v.end(), r, r + s.index_dim());
  }
  return v;
}

TEST_F(CudaLayers, AttentionLayerMatchesTheCpuLayerAndItsState) {
  REQUIRE_GPU();
  // 154 tokens: the ratio-4 layer's indexer scores from token 16 on (top-k
  // 4), the ratio-128 layer closes one window; the window (8 rows) wraps.
  const std::vector<int> batch_sizes = {1, 3, 17, 1, 40, 2, 90};
  const model::Deepseek4HParams& hp = model_->hparams();
  const int64_t n_embd = hp.n_embd, n_ctx = 512;
  for (const Numerics numerics : {Numerics::Default, Numerics::Quality})
    for (int il : {0, 1, 2}) {
      const model::LayerWeights& layer = model_->layer(il);
      SCOPED_TRACE("layer " + std::to_string(il) + " ratio " + std::to_string(layer.compress_ratio) +
                   (numerics == Numerics::Quality ? " quality" : " default"));
      cpu::AttentionLayer cpu_layer(layer, hp, numerics);
      cpu::LayerKvState cpu_state(layer, hp, numerics, n_ctx);
      const DeviceAttentionLayer gpu_layer(layer, hp, numerics);
      DeviceLayerKv gpu_state = gpu_layer.new_state(n_ctx, nullptr);
      EXPECT_EQ(gpu_state.f32_rows(), numerics == Numerics::Quality);
      DeviceProducts products(nullptr, numerics);
      std::mt19937 rng(static_cast<uint32_t>(29 + il));
      std::normal_distribution<float> g(0.0f, 1.0f);
      int64_t pos = 0;
      const auto step = [&](int size, cpu::AttentionLayer& cl, cpu::LayerKvState& cs, DeviceLayerKv& gs) {
        std::vector<float> x(static_cast<size_t>(size * n_embd));
        for (float& v : x) v = g(rng);
        std::vector<float> want(x.size()), got(x.size());
        cl.forward_batch(x.data(), size, pos, cs, want.data());
        DeviceBuffer dx(x.size() * 4), dout(x.size() * 4);
        dx.upload(x.data(), x.size() * 4);
        gpu_layer.forward(dx.as<float>(), size, pos, gs, dout.as<float>(), products);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        dout.download(got.data(), got.size() * 4);
        // Sums in other orders and CUDA's expf; a value an ulp from an FP8 /
        // FP4 boundary lands a grid step away, and the indexer may then swap
        // two near-equal rows: most tokens within 1e-3, none far off.
        const RowErrors e = row_errors(got, want, n_embd, 1e-3);
        EXPECT_LT(e.worst, 5e-2) << "batch of " << size << " at " << pos;
        EXPECT_LE(e.above_good, 0.1) << "batch of " << size << " at " << pos;
        pos += size;
      };
      for (int size : batch_sizes) {
        step(size, cpu_layer, cpu_state, gpu_state);
        // The GPU state as a CPU state: the same rows (f16 / f32), counts and ring.
        cpu::LayerKvState saved(layer, hp, numerics, n_ctx);
        gpu_state.save(saved);
        ASSERT_EQ(saved.raw_count(), cpu_state.raw_count());
        ASSERT_EQ(saved.n_compressed(), cpu_state.n_compressed());
        ASSERT_EQ(saved.n_index(), cpu_state.n_index());
        for (int i = 0; i < saved.raw_count(); ++i) ASSERT_EQ(saved.raw_pos(i), cpu_state.raw_pos(i));
        const RowErrors e = row_errors(state_rows(saved), state_rows(cpu_state), hp.head_dim, 1e-3);
        EXPECT_LT(e.worst, 5e-2) << "state at " << pos;
      }
      // The CPU's state loaded onto the GPU continues as the CPU does.
      DeviceLayerKv loaded = gpu_layer.new_state(n_ctx, nullptr);
      loaded.load(cpu_state, nullptr);
      step(9, cpu_layer, cpu_state, loaded);
    }
}

TEST_F(CudaLayers, MoeLayerMatchesTheCpuLayer) {
  REQUIRE_GPU();
  // ds4-q2 experts (IQ2_XXS / Q2_K) take the decode kernels for one token;
  // f32 experts go through cuBLAS either way.
  const ds4::test::SyntheticModel q2(model::preset_tiny(), model::QuantMix::Ds4Q2, /*seed=*/12);
  for (const ds4::test::SyntheticModel* m : {static_cast<const ds4::test::SyntheticModel*>(model_), &q2}) {
    const model::Deepseek4HParams& hp = m->hparams();
    const int64_t d = hp.n_embd, k = hp.n_expert_used;
    for (int il : {0, 3}) {  // a hash layer, a top-k layer
      for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
        SCOPED_TRACE("layer " + std::to_string(il) + (m == model_ ? " f32" : " ds4-q2") +
                     (numerics == Numerics::Quality ? " quality" : " default"));
        cpu::MoeLayer cpu_layer(m->layer(il), hp, numerics);
        const DeviceMoeLayer gpu_layer(m->layer(il), hp, numerics);
        DeviceProducts products(nullptr, numerics);
        std::mt19937 rng(static_cast<uint32_t>(41 + il));
        std::normal_distribution<float> g(0.0f, 1.0f);
        for (int n : {1, 37}) {
          std::vector<float> x(static_cast<size_t>(n * d));
          for (float& v : x) v = g(rng);
          std::vector<int32_t> tokens(static_cast<size_t>(n));
          for (int t = 0; t < n; ++t) tokens[static_cast<size_t>(t)] = (t * 97 + 5) % static_cast<int>(hp.n_vocab);
          std::vector<float> want(x.size()), got(x.size());
          std::vector<int32_t> want_ids;
          for (int t = 0; t < n; ++t) {  // token by token: the selections too
            cpu_layer.forward(std::span<const float>(x.data() + t * d, static_cast<size_t>(d)),
                              tokens[static_cast<size_t>(t)],
                              std::span<float>(want.data() + t * d, static_cast<size_t>(d)), nullptr);
            want_ids.insert(want_ids.end(), cpu_layer.selected_ids().begin(), cpu_layer.selected_ids().end());
          }
          DeviceBuffer dx(x.size() * 4), dout(x.size() * 4), dids(static_cast<size_t>(n * k) * 4);
          dx.upload(x.data(), x.size() * 4);
          gpu_layer.forward(dx.as<float>(), tokens.data(), n, dout.as<float>(), products, dids.as<int32_t>());
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          dout.download(got.data(), got.size() * 4);
          std::vector<int32_t> got_ids(want_ids.size());
          dids.download(got_ids.data(), got_ids.size() * 4);
          // The same experts unless two biased scores sit within expf's error.
          int differing = 0;
          for (size_t p = 0; p < got_ids.size(); ++p) differing += got_ids[p] != want_ids[p] ? 1 : 0;
          EXPECT_LE(differing, static_cast<int>(got_ids.size()) / 50) << n << " tokens";
          // cuBLAS on f16-dequantized experts (f32 experts: f32): most rows
          // within 1e-2, none far off where the experts agree.
          const RowErrors e = row_errors(got, want, d, m == model_ ? 1e-4 : 1e-2);
          if (differing == 0) {
            EXPECT_LT(e.worst, m == model_ ? 1e-3 : 5e-2) << n << " tokens";
          }
          EXPECT_LE(e.above_good, 0.1) << n << " tokens";
        }
      }
    }
  }
  std::vector<float> x(static_cast<size_t>(model_->hparams().n_embd), 0.0f);
  const DeviceMoeLayer hash_layer(model_->layer(0), model_->hparams(), Numerics::Default);
  DeviceProducts products(nullptr, Numerics::Default);
  DeviceBuffer dx(x.size() * 4);
  const int32_t bad = static_cast<int32_t>(model_->hparams().n_vocab);
  EXPECT_THROW(hash_layer.forward(dx.as<float>(), &bad, 1, dx.as<float>(), products), Error);
}

// Tensor parallel's split of a MoE sublayer (MoePart): the home routes and
// evaluates the even experts and the shared one, the partner the odd
// experts from the home's routing; their parts add up to the whole layer's
// output (but for the order the rows are added in), decode and prefill.
TEST_F(CudaLayers, MoeLayerPartsAddUpToTheWholeLayer) {
  REQUIRE_GPU();
  const ds4::test::SyntheticModel q2(model::preset_tiny(), model::QuantMix::Ds4Q2, /*seed=*/13);
  bool partner_held = false;
  for (const ds4::test::SyntheticModel* m : {static_cast<const ds4::test::SyntheticModel*>(model_), &q2}) {
    const model::Deepseek4HParams& hp = m->hparams();
    const int64_t d = hp.n_embd, k = hp.n_expert_used;
    for (int il : {0, 3}) {
      SCOPED_TRACE("layer " + std::to_string(il) + (m == model_ ? " f32" : " ds4-q2"));
      const DeviceMoeLayer whole(m->layer(il), hp, Numerics::Default);
      const DeviceMoeLayer home(m->layer(il), hp, Numerics::Default, MoePart::Home);
      const DeviceMoeLayer partner(m->layer(il), hp, Numerics::Default, MoePart::Partner);
      DeviceProducts products(nullptr, Numerics::Default);
      std::mt19937 rng(static_cast<uint32_t>(51 + il));
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (int n : {1, 5, 37}) {
        std::vector<float> x(static_cast<size_t>(n * d));
        for (float& v : x) v = g(rng);
        std::vector<int32_t> tokens(static_cast<size_t>(n));
        for (int t = 0; t < n; ++t) tokens[static_cast<size_t>(t)] = (t * 89 + 3) % static_cast<int>(hp.n_vocab);
        DeviceBuffer dx(x.size() * 4), dwhole(x.size() * 4), dxn(x.size() * 4), dhome(x.size() * 4),
            dpart(x.size() * 4), dids(static_cast<size_t>(n * k) * 4), dw(static_cast<size_t>(n * k) * 4);
        dx.upload(x.data(), x.size() * 4);
        whole.forward(dx.as<float>(), tokens.data(), n, dwhole.as<float>(), products);
        home.route(dx.as<float>(), tokens.data(), n, dxn.as<float>(), dids.as<int32_t>(), dw.as<float>(), products);
        home.experts(dxn.as<float>(), dids.as<int32_t>(), dw.as<float>(), n, dhome.as<float>(), products);
        partner.experts(dxn.as<float>(), dids.as<int32_t>(), dw.as<float>(), n, dpart.as<float>(), products);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> want(x.size()), a(x.size()), b(x.size()), sum(x.size());
        dwhole.download(want.data(), want.size() * 4);
        dhome.download(a.data(), a.size() * 4);
        dpart.download(b.data(), b.size() * 4);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = a[i] + b[i];
        const RowErrors e = row_errors(sum, want, d, 1e-5);
        EXPECT_LT(e.worst, 1e-4) << n << " tokens";
        // The partner's part is a real share (some token routed to an odd expert).
        for (float v : b) partner_held |= v != 0.0f;
      }
      EXPECT_THROW(partner.route(nullptr, nullptr, 1, nullptr, nullptr, nullptr, products), Error);
    }
  }
  EXPECT_TRUE(partner_held);
}

}  // namespace
}  // namespace ds4::cuda
