// Memory accounting for deepseek4 shapes, checked against hand computations
// from MODEL.md §6-§7 (KV state) and SYSTEMS.md §2.2 (weight bytes), written
// out here independently of the library's loops.
#include <gtest/gtest.h>

#include <cstdint>

#include "model/deepseek4_hparams.h"
#include "model/deepseek4_memory.h"
#include "model/quant_mix.h"

namespace ds4::model {
namespace {

constexpr uint64_t kMi = 1048576;  // 1M tokens

TEST(ModelMemory, FlashKvBytesPerTokenMatchesModelMd) {
  // MODEL.md §1: layers 0-1 ratio 0, even layers 2..42 ratio 4 (21), odd 3..41 ratio 128 (20).
  uint64_t n4 = 0, n128 = 0;
  for (int il = 0; il < 43; ++il) {
    if (il < 2) continue;
    (il % 2 == 0 ? n4 : n128)++;
  }
  ASSERT_EQ(n4, 21u);
  ASSERT_EQ(n128, 20u);
  // Per token: ratio 4 -> (512 + 128) / 4 values, ratio 128 -> 512 / 128 values.
  const uint64_t values = n4 * (512 + 128) / 4 + n128 * 512 / 128;
  EXPECT_EQ(values, 3440u);
  const Deepseek4HParams flash = preset_flash();
  EXPECT_EQ(kv_values_per_token(flash), 3440.0);
  EXPECT_EQ(kv_bytes_per_token(flash, 4), 13760.0);  // §7: 13,760 B f32
  EXPECT_EQ(kv_bytes_per_token(flash, 2), 6880.0);   // 6,880 B f16
  // 1M is a multiple of 128, so the live rows grow exactly at that rate:
  // 14.43 GB (13.45 GiB), the §7 figure.
  EXPECT_EQ(kv_compressed_bytes(flash, kMi, 4), 13760 * kMi);
  EXPECT_EQ(kv_compressed_bytes(flash, kMi, 4), 14428405760u);
  // Below one window nothing is compressed yet.
  EXPECT_EQ(kv_compressed_bytes(flash, 3, 4), 0u);
  EXPECT_EQ(kv_compressed_bytes(flash, 4, 4), 21u * (512 + 128) * 4);
}

TEST(ModelMemory, FlashStateAtOneMillionTokens) {
  const KvStateBytes k = kv_state_bytes(preset_flash(), kMi, 4);
  // §6: raw windows 43 x 128 x 512 x 4 B = 11.3 MB.
  EXPECT_EQ(k.raw_window, 43u * 128 * 512 * 4);
  // Frontiers: ratio 4 -> 2 x 8 x 1024 (main) + 2 x 8 x 256 (indexer) floats = 80 KiB;
  // ratio 128 -> 2 x 128 x 512 floats = 512 KiB. 21 x 80 KiB + 20 x 512 KiB = 11.6 MiB.
  EXPECT_EQ(k.frontiers, 21u * 80 * 1024 + 20u * 512 * 1024);
  // Capacities ctx/ratio + 2 rows.
  EXPECT_EQ(k.compressed_attn, 21u * (kMi / 4 + 2) * 512 * 4 + 20u * (kMi / 128 + 2) * 512 * 4);
  EXPECT_EQ(k.compressed_index, 21u * (kMi / 4 + 2) * 128 * 4);
  // §7 split: ratio-4 attention 11.27 GB, indexer 2.82 GB, ratio-128 0.34 GB.
  EXPECT_NEAR(static_cast<double>(k.compressed_index) / 1e9, 2.82, 0.01);
  EXPECT_NEAR(static_cast<double>(k.total()) / 1e9, 14.45, 0.01);
  // Small contexts: the raw window is min(n_swa, ctx) rows.
  EXPECT_EQ(kv_state_bytes(preset_flash(), 10, 4).raw_window, 43u * 10 * 512 * 4);
  // f16 rows (the default numerics' storage): every row half, frontiers stay f32: 7.23 GB.
  const KvStateBytes h = kv_state_bytes(preset_flash(), kMi, 2);
  EXPECT_EQ(2 * h.raw_window, k.raw_window);
  EXPECT_EQ(2 * h.compressed_attn, k.compressed_attn);
  EXPECT_EQ(2 * h.compressed_index, k.compressed_index);
  EXPECT_EQ(h.frontiers, k.frontiers);
  EXPECT_EQ(h.total(), 7232139776u);
}

TEST(ModelMemory, ProKvBytesPerToken) {
  // §7: Pro has 30 ratio-4 and 31 ratio-128 layers: 19,696 B/token f32.
  EXPECT_EQ(kv_bytes_per_token(preset_pro(), 4), 4.0 * (30 * 160 + 31 * 4));
  EXPECT_EQ(kv_bytes_per_token(preset_pro(), 4), 19696.0);
}

TEST(ModelMemory, FlashWeightBytesMatchSystemsMd) {
  const WeightBytes q2 = weight_bytes(preset_flash(), QuantMix::Ds4Q2);
  // SYSTEMS.md §2.2: one routed expert (gate + up IQ2_XXS, down Q2_K) is 7,077,888 B;
  // 43 x 256 experts.
  const uint64_t per_expert = 2 * (4096 / 256 * 66) * 2048 + (2048 / 256 * 84) * 4096;
  EXPECT_EQ(per_expert, 7077888u);
  EXPECT_EQ(q2.routed(), 43u * 256 * per_expert);
  // Non-routed about 8.20 GiB; embedding 1.0 GiB (F16), head 0.52 GiB (Q8_0).
  const double gib = 1024.0 * 1024 * 1024;
  EXPECT_NEAR(q2.non_routed() / gib, 8.20, 0.05);
  EXPECT_EQ(q2.of(TensorFamily::Embedding), 4096u * 129280 * 2);
  EXPECT_EQ(q2.of(TensorFamily::OutputHead), 4096u / 32 * 34 * 129280);
  // q4 and MXFP4 experts: 13.5 MiB and 12.75 MiB each.
  EXPECT_EQ(weight_bytes(preset_flash(), QuantMix::Ds4Q4).routed(), uint64_t{43} * 256 * 14155776);
  EXPECT_EQ(weight_bytes(preset_flash(), QuantMix::Mxfp4).routed(), uint64_t{43} * 256 * 13369344);
}

}  // namespace
}  // namespace ds4::model
