// The compressor's batch plan (backend/compressor_plan.h): a hand-worked
// ratio-4 batch that starts mid-window, and, on the tiny synthetic model,
// batches of many sizes run through the plan (pooling and finishing with the
// CPU's ops, the frontier rebuilt from the plan's sources) against the CPU
// compressor fed token by token: the same compressed rows and the same
// frontier after every batch, bit for bit, in both roles and numerics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/compressor_plan.h"
#include "backend/numerics.h"
#include "backend/cpu/compressor.h"
#include "backend/cpu/ops_compressor_pool.h"
#include "core/error.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "support/compressor_cases.h"
#include "support/synthetic_model.h"

namespace ds4::backend {
namespace {

PlanRow F(int32_t r) { return {false, r}; }
PlanRow B(int32_t i) { return {true, i}; }

TEST(CompressorPlan, RatioFourBatchStartingMidWindow) {
  // Positions 2..8: token 1 (pos 3) closes window 0 (positions 0..3), token 5
  // (pos 7) window 1 (4..7); token 6 (pos 8) opens window 2.
  const CompressorPlan plan = plan_compressor_batch(4, 16, 2, 7);
  EXPECT_EQ(plan.n_cand(), 8);
  EXPECT_EQ(plan.n_prev(), 4);
  EXPECT_EQ(plan.width(), 32);
  EXPECT_EQ(plan.closing_token, (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(plan.window_start, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(plan.ape_row, (std::vector<int32_t>{2, 3, 0, 1, 2, 3, 0}));
  const std::vector<PlanRow> window0 = {F(0), F(1), F(2), F(3), F(4), F(5), B(0), B(1)};
  const std::vector<PlanRow> window1 = {F(4), F(5), B(0), B(1), B(2), B(3), B(4), B(5)};
  ASSERT_EQ(plan.candidates.size(), 16u);
  EXPECT_EQ(std::vector<PlanRow>(plan.candidates.begin(), plan.candidates.begin() + 8), window0);
  EXPECT_EQ(std::vector<PlanRow>(plan.candidates.begin() + 8, plan.candidates.end()), window1);
  // Rows 0..3: window 1 (the previous window of the next); row 4: token 6;
  // rows 5..7 keep what window 1 wrote there.
  EXPECT_EQ(plan.frontier_after, (std::vector<PlanRow>{B(2), B(3), B(4), B(5), B(6), B(3), B(4), B(5)}));
  EXPECT_EQ(plan.lane_offset(3), 0);
  EXPECT_EQ(plan.lane_offset(4), 16);

  // Addresses: frontier row r at r * 32, batch row i at 1000 + i * 32 floats.
  std::vector<float> space(2000);
  const float* frontier = space.data();
  const float* batch = space.data() + 1000;
  const PlanAddresses a = plan_addresses(plan, frontier, frontier, batch, batch);
  EXPECT_EQ(a.kv[0], frontier);                 // F(0), lane A
  EXPECT_EQ(a.kv[5], frontier + 5 * 32 + 16);   // F(5), lane B
  EXPECT_EQ(a.score[7], batch + 1 * 32 + 16);   // B(1), lane B
  EXPECT_EQ(a.frontier_kv[4], batch + 6 * 32);  // whole rows, no lane offset
}

TEST(CompressorPlan, RatioOneTwentyEightAndEmptyBatches) {
  const CompressorPlan plan = plan_compressor_batch(128, 8, 120, 140);
  EXPECT_EQ(plan.coff, 1);
  EXPECT_EQ(plan.n_prev(), 0);
  EXPECT_EQ(plan.closing_token, (std::vector<int32_t>{7, 135}));
  EXPECT_EQ(plan.window_start, (std::vector<int64_t>{0, 128}));
  for (int c = 0; c < 120; ++c) EXPECT_EQ(plan.candidates[static_cast<size_t>(c)], F(c));
  for (int c = 120; c < 128; ++c) EXPECT_EQ(plan.candidates[static_cast<size_t>(c)], B(c - 120));
  for (int c = 0; c < 128; ++c) EXPECT_EQ(plan.candidates[static_cast<size_t>(128 + c)], B(c + 8));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(plan.frontier_after[static_cast<size_t>(r)], B(r + 136));
  for (int r = 4; r < 128; ++r) EXPECT_EQ(plan.frontier_after[static_cast<size_t>(r)], B(r + 8));

  const CompressorPlan none = plan_compressor_batch(4, 8, 5, 0);
  EXPECT_EQ(none.n_windows(), 0);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(none.frontier_after[static_cast<size_t>(r)], F(r));
  EXPECT_THROW(plan_compressor_batch(16, 8, 0, 4), Error);
  EXPECT_THROW(plan_compressor_batch(4, 0, 0, 4), Error);
  EXPECT_THROW(plan_compressor_batch(4, 8, -1, 4), Error);
}

// ---- Against the CPU compressor ----

class CompressorPlanModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/11);
  }
  static void TearDownTestSuite() { delete model_; }
  static test::SyntheticModel* model_;
};
test::SyntheticModel* CompressorPlanModel::model_ = nullptr;

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One batch through the plan on host arrays: scores + ape, each closed
// window pooled and finished as the CPU does, the frontier rebuilt. Returns
// the compressed rows.
std::vector<std::vector<float>> run_plan(const cpu::Compressor& comp, Numerics numerics, int64_t first_pos,
                                         const std::vector<float>& kv, std::vector<float> score,
                                         std::vector<float>& frontier_kv, std::vector<float>& frontier_score) {
  const int width = comp.state_width();
  const auto n = static_cast<int64_t>(kv.size()) / width;
  const CompressorPlan plan = plan_compressor_batch(comp.ratio(), comp.dim(), first_pos, n);
  for (int64_t i = 0; i < n; ++i) {
    const std::span<const float> ape = comp.ape().subspan(static_cast<size_t>(plan.ape_row[i] * width), width);
    for (int j = 0; j < width; ++j) score[static_cast<size_t>(i * width + j)] += ape[static_cast<size_t>(j)];
  }
  const PlanAddresses a = plan_addresses(plan, frontier_kv.data(), frontier_score.data(), kv.data(), score.data());
  std::vector<std::vector<float>> rows;
  const auto n_cand = static_cast<size_t>(plan.n_cand());
  for (int64_t w = 0; w < plan.n_windows(); ++w) {
    std::vector<float> y(static_cast<size_t>(comp.dim()));
    cpu::compressor_pool(std::span<const float* const>(a.score).subspan(static_cast<size_t>(w) * n_cand, n_cand),
                         std::span<const float* const>(a.kv).subspan(static_cast<size_t>(w) * n_cand, n_cand),
                         plan.n_prev(), y, numerics);
    comp.finish(y, plan.window_start[static_cast<size_t>(w)]);
    rows.push_back(std::move(y));
  }
  std::vector<float> new_kv(frontier_kv.size()), new_score(frontier_score.size());
  for (size_t r = 0; r < n_cand; ++r) {
    std::copy(a.frontier_kv[r], a.frontier_kv[r] + width, new_kv.begin() + static_cast<ptrdiff_t>(r * width));
    std::copy(a.frontier_score[r], a.frontier_score[r] + width, new_score.begin() + static_cast<ptrdiff_t>(r * width));
  }
  frontier_kv = std::move(new_kv);
  frontier_score = std::move(new_score);
  return rows;
}

TEST_F(CompressorPlanModel, BatchesGiveTheCpuCompressorsRowsAndFrontierBitForBit) {
  const std::vector<int> batch_sizes = {1, 2, 4, 5, 3, 130, 7, 64, 1, 255, 9, 128};
  int total = 0;
  for (int s : batch_sizes) total += s;
  for (const ds4::test::CompressorCase& c : ds4::test::tiny_compressor_cases()) {
    const Numerics numerics = c.numerics;
    SCOPED_TRACE(c.name());
    cpu::Compressor ref(model_->layer(c.layer), model_->hparams(), c.role, numerics);
    const cpu::Compressor comp(model_->layer(c.layer), model_->hparams(), c.role, numerics);
    const int width = ref.state_width();
    const auto [kv, score] = ds4::test::random_compressor_projections(total, width, static_cast<uint32_t>(7 + c.layer));
    std::vector<float> frontier_kv(ref.state_kv().begin(), ref.state_kv().end());
    std::vector<float> frontier_score(ref.state_score().begin(), ref.state_score().end());
    int64_t pos = 0;
    int windows = 0;
    for (int size : batch_sizes) {
      std::vector<std::vector<float>> want;
      for (int64_t p = pos; p < pos + size; ++p) {
        const size_t at = static_cast<size_t>(p * width);
        if (auto row = ref.push(kv.data() + at, score.data() + at, p)) want.push_back(std::move(*row));
      }
      const auto first = kv.begin() + pos * width, last = kv.begin() + (pos + size) * width;
      const std::vector<std::vector<float>> got =
          run_plan(comp, numerics, pos, std::vector<float>(first, last),
                   std::vector<float>(score.begin() + pos * width, score.begin() + (pos + size) * width), frontier_kv,
                   frontier_score);
      ASSERT_EQ(got.size(), want.size()) << "batch of " << size << " at " << pos;
      for (size_t w = 0; w < got.size(); ++w)
        ASSERT_TRUE(same_bits(got[w], want[w])) << "window " << w << " at " << pos;
      ASSERT_TRUE(same_bits(frontier_kv, ref.state_kv())) << "batch at " << pos;
      ASSERT_TRUE(same_bits(frontier_score, ref.state_score())) << "batch at " << pos;
      windows += static_cast<int>(want.size());
      pos += size;
    }
    EXPECT_EQ(windows, total / ref.ratio());
  }
}

}  // namespace
}  // namespace ds4::backend
