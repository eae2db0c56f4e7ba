// The forward pass's stateful pieces on a GPU against the CPU backend's, on
// the tiny synthetic model: the KV compressor fed in batches of many sizes
// (backend/cuda/compressor.h) against cpu::Compressor fed token by token.
// Needs a GPU: skipped without one, a failure with DS4_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/compressor.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/device_buffer.h"
#include "cuda/gpu_test.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
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
  struct Case {
    int layer;
    cpu::CompressorRole role;
  };
  const Case cases[] = {
      {1, cpu::CompressorRole::Attention}, {1, cpu::CompressorRole::Indexer}, {2, cpu::CompressorRole::Attention}};
  for (const Case& c : cases) {
    for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
      SCOPED_TRACE("layer " + std::to_string(c.layer) + (c.role == cpu::CompressorRole::Indexer ? " indexer" : "") +
                   (numerics == Numerics::Quality ? " quality" : " default"));
      cpu::Compressor ref(model_->layer(c.layer), model_->hparams(), c.role, numerics);
      const DeviceCompressor gpu(model_->layer(c.layer), model_->hparams(), c.role, numerics);
      const int width = ref.state_width(), dim = ref.dim();
      std::mt19937 rng(static_cast<uint32_t>(17 + c.layer));
      std::normal_distribution<float> g(0.0f, 1.0f);
      std::vector<float> kv(static_cast<size_t>(total * width)), score(kv.size());
      for (float& v : kv) v = g(rng);
      for (float& v : score) v = 2.0f * g(rng);
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
            ASSERT_EQ(numerics, Numerics::Default)
                << "window " << w << " dim " << j << ": " << have << " vs " << expect;
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
}

}  // namespace
}  // namespace ds4::cuda
