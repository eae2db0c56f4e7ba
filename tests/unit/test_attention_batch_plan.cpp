// The attention batch plan (backend/attention_batch_plan.h): a hand-worked
// batch that wraps the ring, and, on the tiny synthetic model's layers,
// batches of many sizes against the CPU's cache fed token by token (its raw
// window after every token, and the rows its compressors emit): the plan
// names the same rows in the same order and the same visible counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/attention_batch_plan.h"
#include "backend/cpu/layer_kv_state.h"
#include "backend/numerics.h"
#include "core/error.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "support/synthetic_model.h"

namespace ds4::backend {
namespace {

WindowRow R(int32_t slot) { return {false, slot}; }
WindowRow B(int32_t token) { return {true, token}; }

TEST(AttentionBatchPlan, WrapsTheRingAndCountsTheRowsEachTokenSees) {
  // A ring of 4 slots holding 3 rows (slots 0..2, next 3); tokens at
  // positions 3..6 on a ratio-4 layer with 2 compressed and 2 index rows:
  // position 3 closes a window, so every token sees one more row.
  const AttentionBatchPlan plan = plan_attention_batch(4, 3, 3, 3, 4, 4, 2, 2);
  EXPECT_EQ(plan.window_begin, (std::vector<int64_t>{0, 4, 8, 12, 16}));
  const std::vector<WindowRow> want = {R(0), R(1), R(2), B(0),  // slot 3
                                       R(1), R(2), B(0), B(1),  // slot 0 overwritten
                                       R(2), B(0), B(1), B(2),  //
                                       B(0), B(1), B(2), B(3)};
  EXPECT_EQ(plan.window, want);
  EXPECT_EQ(plan.compressed_visible, (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(plan.index_visible, (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(plan.ring_after, (std::vector<WindowRow>{B(1), B(2), B(3), B(0)}));
  EXPECT_EQ(plan.ring_count_after, 4);
  EXPECT_EQ(plan.ring_next_after, 3);

  // Ratio 128: no index rows; ratio 0: no compressed rows either.
  const AttentionBatchPlan wide = plan_attention_batch(8, 0, 0, 126, 3, 128, 0, 0);
  EXPECT_EQ(wide.compressed_visible, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(wide.index_visible, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(plan_attention_batch(8, 0, 0, 126, 3, 0, 0, 0).compressed_visible, (std::vector<int64_t>{0, 0, 0}));
  const AttentionBatchPlan empty = plan_attention_batch(8, 5, 2, 10, 0, 4, 2, 2);
  EXPECT_EQ(empty.window_rows(), 0);
  EXPECT_EQ(empty.ring_count_after, 5);
  EXPECT_EQ(empty.ring_next_after, 2);

  EXPECT_THROW(plan_attention_batch(0, 0, 0, 0, 1, 4, 0, 0), Error);
  EXPECT_THROW(plan_attention_batch(4, 5, 0, 0, 1, 4, 0, 0), Error);
  EXPECT_THROW(plan_attention_batch(4, 2, 4, 0, 1, 4, 0, 0), Error);
  EXPECT_THROW(plan_attention_batch(4, 0, 0, 0, 1, 16, 0, 0), Error);
  EXPECT_THROW(plan_attention_batch(4, 0, 0, -1, 1, 4, 0, 0), Error);
}

class AttentionBatchPlanModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new ds4::test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/11);
  }
  static void TearDownTestSuite() { delete model_; }
  static ds4::test::SyntheticModel* model_;
};
ds4::test::SyntheticModel* AttentionBatchPlanModel::model_ = nullptr;

TEST_F(AttentionBatchPlanModel, BatchesNameTheCpuCachesRowsTokenByToken) {
  // Each pushed row carries its position + 1 in value 0 (exact in f16 below
  // 2048), so a row of the CPU's window says which token pushed it.
  const std::vector<int> batch_sizes = {1, 5, 2, 13, 3, 130, 1, 7, 600};
  const model::Deepseek4HParams& hp = model_->hparams();
  const int head_dim = static_cast<int>(hp.head_dim);
  for (int il = 0; il < static_cast<int>(hp.n_layer); ++il) {
    const model::LayerWeights& layer = model_->layer(il);
    const int ratio = static_cast<int>(layer.compress_ratio);
    SCOPED_TRACE("layer " + std::to_string(il) + " ratio " + std::to_string(ratio));
    cpu::LayerKvState state(layer, hp, Numerics::Default);
    std::mt19937 rng(static_cast<uint32_t>(3 + il));
    std::normal_distribution<float> g(0.0f, 1.0f);
    const int width = state.attn_compressor() ? state.attn_compressor()->state_width() : 0;
    const int index_width = state.index_compressor() ? state.index_compressor()->state_width() : 0;
    std::vector<float> row(static_cast<size_t>(head_dim)), scratch(row.size());
    std::vector<float> kv(static_cast<size_t>(std::max(width, index_width))), score(kv.size());
    int64_t pos = 0;
    for (int size : batch_sizes) {
      // The ring as the batch finds it: slot s holds the row of age i with
      // s = (next - count + i) mod n_swa, next = pushes mod n_swa.
      const int count = state.raw_count(), next = static_cast<int>(pos % state.n_swa());
      std::vector<float> slot_id(static_cast<size_t>(state.n_swa()), -1.0f);
      for (int i = 0; i < count; ++i)
        slot_id[static_cast<size_t>((next - count + i + state.n_swa()) % state.n_swa())] =
            state.raw_row(i, scratch.data())[0];
      const AttentionBatchPlan plan =
          plan_attention_batch(state.n_swa(), count, next, pos, size, ratio, state.n_compressed(), state.n_index());
      const auto id = [&](const WindowRow& r) {
        return r.from_batch ? static_cast<float>(pos + r.index + 1) : slot_id[static_cast<size_t>(r.index)];
      };
      for (int t = 0; t < size; ++t) {
        const int64_t p = pos + t;
        for (float& v : row) v = g(rng);
        row[0] = static_cast<float>(p + 1);
        state.push_raw(row, p);
        for (float& v : kv) v = g(rng);
        for (float& v : score) v = g(rng);
        if (cpu::Compressor* c = state.attn_compressor())
          if (auto r = c->push(kv.data(), score.data(), p)) state.append_compressed(*r);
        if (cpu::Compressor* c = state.index_compressor())
          if (auto r = c->push(kv.data(), score.data(), p)) state.append_index(*r);
        const int64_t begin = plan.window_begin[static_cast<size_t>(t)],
                      end = plan.window_begin[static_cast<size_t>(t + 1)];
        ASSERT_EQ(end - begin, state.raw_count()) << "position " << p;
        for (int i = 0; i < state.raw_count(); ++i)
          ASSERT_EQ(id(plan.window[static_cast<size_t>(begin + i)]), state.raw_row(i, scratch.data())[0])
              << "position " << p << " row " << i;
        ASSERT_EQ(plan.compressed_visible[static_cast<size_t>(t)], state.n_compressed()) << "position " << p;
        ASSERT_EQ(plan.index_visible[static_cast<size_t>(t)], state.n_index()) << "position " << p;
      }
      // The ring after: the same rows in the same slots, as the next batch finds them.
      ASSERT_EQ(plan.ring_count_after, state.raw_count());
      ASSERT_EQ(plan.ring_next_after, static_cast<int>((pos + size) % state.n_swa()));
      for (int i = 0; i < state.raw_count(); ++i) {
        const int s = (plan.ring_next_after - plan.ring_count_after + i + state.n_swa()) % state.n_swa();
        ASSERT_EQ(id(plan.ring_after[static_cast<size_t>(s)]), state.raw_row(i, scratch.data())[0]) << "age " << i;
      }
      pos += size;
    }
  }
}

}  // namespace
}  // namespace ds4::backend
