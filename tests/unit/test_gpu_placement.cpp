// Layer placement on GPUs (backend/gpu_placement): the option parsers, the
// proportional whole-layer split, and the refusals that name the GPU and
// the shortfall. Known answers worked out by hand in GiB.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend/gpu_placement.h"
#include "core/error.h"
#include "model/deepseek4_memory.h"
#include "support/synthetic_model.h"

namespace ds4::backend {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ds4::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GpuDevicesOption, ListsAllAndRefusesBadNumbers) {
  EXPECT_EQ(parse_gpu_devices("0,2", 3), (std::vector<int>{0, 2}));
  EXPECT_EQ(parse_gpu_devices("1,0", 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(parse_gpu_devices("all", 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(error_of([] { parse_gpu_devices("3", 2); }), "--gpu-devices: GPU 3 does not exist (2 visible: 0-1)");
  EXPECT_EQ(error_of([] { parse_gpu_devices("0", 0); }), "--gpu-devices: GPU 0 does not exist (0 visible)");
  EXPECT_EQ(error_of([] { parse_gpu_devices("0,0", 2); }), "--gpu-devices: GPU 0 is listed twice");
  EXPECT_EQ(error_of([] { parse_gpu_devices("0,,1", 2); }),
            "--gpu-devices: '' in '0,,1' is not a GPU number (expected a list such as 0,1 or all)");
  EXPECT_EQ(error_of([] { parse_gpu_devices("-1", 2); }),
            "--gpu-devices: '-1' in '-1' is not a GPU number (expected a list such as 0,1 or all)");
  EXPECT_EQ(error_of([] { parse_gpu_devices("all", 0); }), "--gpu-devices all: no CUDA GPU is visible");
}

TEST(GpuVramOption, AutoOrOneSizePerGpu) {
  EXPECT_TRUE(parse_gpu_vram("auto").gib.empty());
  EXPECT_EQ(parse_gpu_vram("24,70.5").gib, (std::vector<double>{24.0, 70.5}));
  for (const char* bad : {"0", "x", "-2", "24,", "inf", ""})
    EXPECT_NE(error_of([&] { parse_gpu_vram(bad); }).find("is not a size in GiB"), std::string::npos) << bad;
}

PlacementRequest ten_layers(uint64_t layer, uint64_t in_out) {
  PlacementRequest r;
  r.layer_bytes.assign(10, layer);
  r.input_bytes = in_out;
  r.output_bytes = in_out;
  r.scratch_bytes = kGiB / 2;
  return r;
}

TEST(GpuPlacement, TwoEqualGpusTakeHalfTheLayersEach) {
  // Free 10 GiB each: 9.5 after the auto reserve, 9 after scratch. Need 11
  // (ten 1 GiB layers, 0.5 embedding, 0.5 head): 5.5 per GPU.
  const std::vector<GpuCapacity> gpus = {{0, "A", 10 * kGiB}, {1, "B", 10 * kGiB}};
  const auto shares = place_layers(ten_layers(kGiB, kGiB / 2), gpus, {});
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].layer_begin, 0);
  EXPECT_EQ(shares[0].layer_end, 5);
  EXPECT_TRUE(shares[0].input);
  EXPECT_FALSE(shares[0].output);
  EXPECT_EQ(shares[1].layer_begin, 5);
  EXPECT_EQ(shares[1].layer_end, 10);
  EXPECT_TRUE(shares[1].output);
  EXPECT_EQ(shares[0].bytes, 6 * kGiB);  // 5.5 + 0.5 scratch
  EXPECT_EQ(shares[0].budget, 10 * kGiB - kAutoVramReserve);
  EXPECT_EQ(describe(shares[0]), "GPU 0 (A): layers 0-4, token embedding, 6.00 GiB of 9.50 GiB");
  EXPECT_EQ(describe(shares[1]), "GPU 1 (B): layers 5-9, output head, 6.00 GiB of 9.50 GiB");
}

TEST(GpuPlacement, ExplicitBudgetsSplitInProportion) {
  // --gpu-vram 4.5,13.5: rooms 4 and 13 after scratch; need 11 -> shares
  // 2.59 and 8.41: GPU 0 takes the embedding and layers 0-1 (2.5).
  const std::vector<GpuCapacity> gpus = {{0, "A", 16 * kGiB}, {1, "B", 16 * kGiB}};
  const auto shares = place_layers(ten_layers(kGiB, kGiB / 2), gpus, parse_gpu_vram("4.5,13.5"));
  EXPECT_EQ(shares[0].layer_end, 2);
  EXPECT_EQ(shares[1].layer_begin, 2);
  EXPECT_EQ(shares[1].layer_end, 10);
  EXPECT_EQ(shares[0].budget, 9 * kGiB / 2);
  EXPECT_EQ(error_of([&] { place_layers(ten_layers(kGiB, 0), gpus, parse_gpu_vram("20,4")); }),
            "--gpu-vram asks 20.00 GiB of GPU 0 (A), which has 16.00 GiB free");
  EXPECT_EQ(error_of([&] { place_layers(ten_layers(kGiB, 0), gpus, parse_gpu_vram("4")); }),
            "--gpu-vram gives 1 sizes for 2 GPUs");
}

TEST(GpuPlacement, OneGpuHoldsEverything) {
  const auto shares = place_layers(ten_layers(kGiB, kGiB / 2), {{3, "Only", 20 * kGiB}}, {});
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_EQ(shares[0].device, 3);
  EXPECT_EQ(shares[0].layer_end, 10);
  EXPECT_TRUE(shares[0].input && shares[0].output);
}

TEST(GpuPlacement, TooLittleMemoryInAllIsRefusedWithTheShortfall) {
  // 8 GiB free: 7.5 budget, 7 after scratch; need 11 -> short by 4.
  EXPECT_EQ(error_of([] { place_layers(ten_layers(kGiB, kGiB / 2), {{0, "Small", 8 * kGiB}}, {}); }),
            "the model does not fit on the GPUs: its layers, embedding and output head need 11.00 GiB with this "
            "context, the GPUs hold 7.00 GiB after 512.00 MiB of scratch each (GPU 0 (Small) 7.00 GiB): short by "
            "4.00 GiB");
}

TEST(GpuPlacement, WholeLayersThatDoNotDivideAreRefusedNamingTheGpu) {
  // Seven 1.5 GiB layers (10.5) on two GPUs with 5.5 GiB room each (11):
  // whole layers put 3 on GPU 0 and leave 4 (6 GiB) for GPU 1.
  PlacementRequest r;
  r.layer_bytes.assign(7, 3 * kGiB / 2);
  r.scratch_bytes = kGiB / 2;
  const std::vector<GpuCapacity> gpus = {{0, "A", 6 * kGiB + kAutoVramReserve}, {1, "B", 6 * kGiB + kAutoVramReserve}};
  EXPECT_EQ(error_of([&] { place_layers(r, gpus, {}); }),
            "the model does not fit on the GPUs as whole layers: GPU 1 (B) would need 6.00 GiB for layers 3-6 and "
            "the output head, it holds 5.50 GiB after scratch: short by 512.00 MiB");
}

TEST(GpuPlacement, ASmallGpuTakesFewerLayers) {
  // Rooms 3, 9 and 9 GiB (21); need 11: shares 1.57, 4.71, 4.71.
  const std::vector<GpuCapacity> gpus = {{0, "S", 4 * kGiB}, {1, "L", 10 * kGiB}, {2, "L", 10 * kGiB}};
  const auto shares = place_layers(ten_layers(kGiB, kGiB / 2), gpus, {});
  EXPECT_EQ(shares[0].layer_end, 1);
  EXPECT_EQ(shares[1].layer_begin, 1);
  EXPECT_EQ(shares[1].layer_end, 6);
  EXPECT_EQ(shares[2].layer_begin, 6);
  EXPECT_EQ(shares[2].layer_end, 10);
  EXPECT_TRUE(shares[2].output);
  EXPECT_EQ(shares[1].bytes, 5 * kGiB + kMiB * 512);
}

// Ten 1 GiB layers whose odd experts take half a GiB each.
PlacementRequest ten_layers_with_experts() {
  PlacementRequest r = ten_layers(kGiB, kGiB / 2);
  r.layer_partner_bytes.assign(10, kGiB / 2);
  return r;
}

TEST(GpuPairPlacement, HomesTakeTheLayersLessTheOddExpertsAndPartnersHoldThem) {
  // Four GPUs, 9 GiB room each after the reserve and scratch. The homes
  // (0, 1) need 6 GiB (ten 0.5 GiB layer halves, embedding, head): 3 each,
  // layers 0-4 and 5-9; the partners (2, 3) hold 5 x 0.5 GiB + scratch.
  const std::vector<GpuCapacity> gpus = {
      {0, "A", 10 * kGiB}, {1, "B", 10 * kGiB}, {2, "C", 10 * kGiB}, {3, "D", 10 * kGiB}};
  const PairPlacement p = place_pairs(ten_layers_with_experts(), gpus, {});
  ASSERT_EQ(p.homes.size(), 2u);
  ASSERT_EQ(p.partners.size(), 2u);
  EXPECT_EQ(p.homes[0].layer_end, 5);
  EXPECT_EQ(p.homes[1].layer_begin, 5);
  EXPECT_TRUE(p.homes[0].input);
  EXPECT_TRUE(p.homes[1].output);
  EXPECT_EQ(p.homes[0].bytes, 7 * kGiB / 2);  // 3 + scratch
  EXPECT_EQ(p.partners[0].device, 2);
  EXPECT_EQ(p.partners[0].partner_of, 0);
  EXPECT_EQ(p.partners[1].partner_of, 1);
  EXPECT_EQ(p.partners[1].layer_begin, 5);
  EXPECT_EQ(p.partners[1].layer_end, 10);
  EXPECT_FALSE(p.partners[0].input || p.partners[1].output);
  EXPECT_EQ(p.partners[0].bytes, 3 * kGiB);  // 2.5 + scratch
  EXPECT_EQ(describe(p.homes[0]), "GPU 0 (A): layers 0-4, token embedding, 3.50 GiB of 9.50 GiB");
  EXPECT_EQ(describe(p.partners[0]),
            "GPU 2 (C): odd routed experts of layers 0-4 (partner of GPU 0), 3.00 GiB of 9.50 GiB");
  // One pair holds everything: the partner all ten layers' odd experts.
  const PairPlacement one = place_pairs(ten_layers_with_experts(), {{0, "A", 10 * kGiB}, {1, "B", 10 * kGiB}}, {});
  EXPECT_EQ(one.homes[0].layer_end, 10);
  EXPECT_EQ(one.partners[0].bytes, 11 * kGiB / 2);
}

TEST(GpuPairPlacement, RefusalsNameTheGpus) {
  const PlacementRequest r = ten_layers_with_experts();
  EXPECT_EQ(error_of([&] {
              place_pairs(r, {{0, "A", 10 * kGiB}, {1, "B", 10 * kGiB}, {2, "C", 10 * kGiB}}, {});
            }),
            "--gpu-tensor-parallel needs an even number of GPUs (homes first, then their partners in the same order), "
            "not 3");
  EXPECT_EQ(error_of([&] {
              place_pairs(r, {{0, "A", 10 * kGiB}, {0, "A", 10 * kGiB}}, {});
            }),
            "--gpu-tensor-parallel: GPU 0 (A) is paired with itself");
  // The partner's 1.5 GiB budget cannot hold 5.5 GiB of experts and scratch.
  EXPECT_EQ(
      error_of([&] {
        place_pairs(r, {{0, "A", 10 * kGiB}, {1, "B", 2 * kGiB}}, {});
      }),
      "GPU 1 (B), the partner of GPU 0, would hold the odd routed experts of layers 0-9 and scratch, 5.50 GiB; it "
      "holds 1.50 GiB: short by 4.00 GiB");
  EXPECT_EQ(error_of([&] {
              place_pairs(r, {{0, "A", 10 * kGiB}, {1, "B", 10 * kGiB}}, parse_gpu_vram("8"));
            }),
            "--gpu-vram gives 1 sizes for 2 GPUs");
  // --gpu-vram sizes: homes first, then partners.
  const PairPlacement p = place_pairs(r, {{0, "A", 10 * kGiB}, {1, "B", 10 * kGiB}}, parse_gpu_vram("8,6"));
  EXPECT_EQ(p.homes[0].budget, 8 * kGiB);
  EXPECT_EQ(p.partners[0].budget, 6 * kGiB);
}

TEST(GpuPlacement, RequestFromAModelCountsEveryTensorAndTheKvStateOnce) {
  const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 41);
  const model::Deepseek4Weights& w = m.model().weights();
  const uint64_t n_ctx = 4096;
  const PlacementRequest r = placement_request(w, m.hparams(), n_ctx, 4, kMiB);
  ASSERT_EQ(r.layer_bytes.size(), m.hparams().n_layer);
  uint64_t tensors = 0;
  for (const model::TensorView* t : w.all()) tensors += t->nbytes;
  uint64_t placed = r.input_bytes + r.output_bytes;
  for (uint64_t b : r.layer_bytes) placed += b;
  EXPECT_EQ(placed, tensors + model::kv_state_bytes(m.hparams(), n_ctx, 4).total());
  EXPECT_EQ(r.input_bytes, w.token_embd.nbytes);
  EXPECT_GT(r.output_bytes, w.output.nbytes);  // the HC head and norm too
  // A partner's share: half of each routed-expert tensor (an even count of experts).
  ASSERT_EQ(m.hparams().n_expert % 2, 0u);
  ASSERT_EQ(r.layer_partner_bytes.size(), r.layer_bytes.size());
  for (size_t l = 0; l < r.layer_bytes.size(); ++l) {
    const model::LayerWeights& layer = w.layers[l];
    EXPECT_EQ(r.layer_partner_bytes[l],
              (layer.ffn_gate_exps.nbytes + layer.ffn_up_exps.nbytes + layer.ffn_down_exps.nbytes) / 2);
    EXPECT_LT(r.layer_partner_bytes[l], r.layer_bytes[l]);
  }

  // One GPU with exactly enough (scratch and the auto reserve on top) fits;
  // a byte less is refused by that byte.
  const uint64_t exact = placed + kMiB + kAutoVramReserve;
  const auto shares = place_layers(r, {{0, "Exact", exact}}, {});
  EXPECT_EQ(shares[0].layer_end, static_cast<int>(m.hparams().n_layer));
  EXPECT_EQ(shares[0].bytes, placed + kMiB);
  const std::string refusal = error_of([&] { place_layers(r, {{0, "Exact", exact - 1}}, {}); });
  EXPECT_NE(refusal.find("short by 1 bytes"), std::string::npos) << refusal;
}

}  // namespace
}  // namespace ds4::backend
