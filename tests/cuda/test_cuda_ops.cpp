// The forward pass's small ops on a GPU against the CPU's (backend/cpu/ops_*):
// bit for bit where the GPU does the same float operations in the same
// order (HC, RoPE, top-k), within a few ulp where a sum's order (RMSNorm)
// or expf (SwiGLU) differs. Needs a GPU: skipped without one, a failure
// with DS4_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_compressor_pool.h"
#include "backend/cpu/ops_hc.h"
#include "backend/cpu/ops_indexer.h"
#include "backend/cpu/ops_moe.h"
#include "backend/cpu/ops_norm.h"
#include "backend/cpu/ops_qat.h"
#include "backend/cpu/ops_rope.h"
#include "backend/cpu/ops_topk.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/compressor_pool.h"
#include "backend/cuda/cuda_devices.h"
#include "cuda/gpu_test.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/qat.h"
#include "backend/cuda/route.h"
#include "core/error.h"
#include "core/fp16.h"
#include "unit/test_quant_util.h"

namespace ds4::cuda {
namespace {


template <typename T>
DeviceBuffer to_device(const std::vector<T>& host) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}
template <typename T>
std::vector<T> from_device(const DeviceBuffer& buffer, size_t count) {
  if (cudaDeviceSynchronize() != cudaSuccess) ADD_FAILURE() << cudaGetErrorString(cudaGetLastError());
  std::vector<T> out(count);
  buffer.download(out.data(), count * sizeof(T));
  return out;
}

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// Largest |a - b| / max(|b|, tiny) over the vectors.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(std::fabs(static_cast<double>(b[i])), 1e-30));
  return worst;
}

const Numerics kBoth[] = {Numerics::Default, Numerics::Quality};

TEST(CudaOps, RmsNormMatchesTheCpuWithinAnUlpOfItsScale) {
  REQUIRE_GPU();
  for (int64_t n : {7168, 1000, 512}) {
    const int64_t rows = 5;
    std::vector<float> x = quant::test::gaussian(static_cast<size_t>(rows * n), 3);
    for (float& v : x) v *= 3.0f;
    const std::vector<float> w = quant::test::gaussian(static_cast<size_t>(n), 4);
    const DeviceBuffer dx = to_device(x), dw = to_device(w);
    for (Numerics numerics : kBoth) {
      for (bool weighted : {true, false}) {
        DeviceBuffer dy(x.size() * 4);
        rms_norm_rows(dx.as<float>(), weighted ? dw.as<float>() : nullptr, dy.as<float>(), rows, n, 1e-6f, numerics,
                      nullptr);
        const std::vector<float> gpu = from_device<float>(dy, x.size());
        std::vector<float> cpu(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          const std::span<const float> xr(x.data() + r * n, static_cast<size_t>(n));
          const std::span<float> yr(cpu.data() + r * n, static_cast<size_t>(n));
          if (weighted)
            cpu::rms_norm(xr, w, yr, 1e-6f, numerics);
          else
            cpu::rms_norm_unweighted(xr, yr, 1e-6f, numerics);
        }
        EXPECT_LT(max_rel(gpu, cpu), 3e-7) << "n " << n << (weighted ? " weighted" : "");
      }
    }
  }
}

TEST(CudaOps, SwigluMatchesTheCpuWithinExpfsError) {
  REQUIRE_GPU();
  const int64_t rows = 6, n = 2048;
  std::vector<float> gate = quant::test::gaussian(static_cast<size_t>(rows * n), 5);
  std::vector<float> up = quant::test::gaussian(static_cast<size_t>(rows * n), 6);
  for (float& v : gate) v *= 8.0f;  // past the clamp and into both sigmoid branches
  for (float& v : up) v *= 8.0f;
  const std::vector<float> weights = {0.5f, 1.0f, 0.125f, 2.0f, 0.3f, 0.7f};
  const DeviceBuffer dg = to_device(gate), du = to_device(up), dwt = to_device(weights);
  for (Numerics numerics : kBoth) {
    for (float limit : {10.0f, 0.0f}) {
      const bool weighted = numerics == Numerics::Default;
      DeviceBuffer dout(gate.size() * 4);
      swiglu_clamp_rows(dg.as<float>(), du.as<float>(), weighted ? dwt.as<float>() : nullptr, dout.as<float>(), rows,
                        n, limit, numerics, nullptr);
      const std::vector<float> gpu = from_device<float>(dout, gate.size());
      std::vector<float> cpu(gate.size());
      for (int64_t r = 0; r < rows; ++r)
        cpu::swiglu_clamp(std::span<const float>(gate.data() + r * n, n), std::span<const float>(up.data() + r * n, n),
                          limit, weighted ? weights[r] : 1.0f, std::span<float>(cpu.data() + r * n, n), numerics);
      EXPECT_LT(max_rel(gpu, cpu), 1e-6) << "limit " << limit;
    }
  }
}

TEST(CudaOps, HyperConnectionSumsEqualTheCpuBitForBit) {
  REQUIRE_GPU();
  const int64_t tokens = 3, n_embd = 1536;
  const std::vector<float> state = quant::test::gaussian(static_cast<size_t>(tokens * 4 * n_embd), 7);
  const std::vector<float> f = quant::test::gaussian(static_cast<size_t>(tokens * n_embd), 8);
  const std::vector<float> weights = quant::test::gaussian(static_cast<size_t>(tokens * 4), 9);
  const std::vector<float> comb = quant::test::gaussian(static_cast<size_t>(tokens * 16), 10);
  const DeviceBuffer ds = to_device(state), df = to_device(f), dw = to_device(weights), dc = to_device(comb);
  for (Numerics numerics : kBoth) {
    DeviceBuffer dsum(static_cast<size_t>(tokens * n_embd) * 4), dpost(state.size() * 4);
    hc_weighted_sum_rows(ds.as<float>(), dw.as<float>(), dsum.as<float>(), tokens, n_embd, numerics, nullptr);
    hc_post_rows(df.as<float>(), ds.as<float>(), dw.as<float>(), dc.as<float>(), dpost.as<float>(), tokens, n_embd,
                 numerics, nullptr);
    const std::vector<float> gpu_sum = from_device<float>(dsum, static_cast<size_t>(tokens * n_embd));
    const std::vector<float> gpu_post = from_device<float>(dpost, state.size());
    int bad = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const std::span<const float> st(state.data() + t * 4 * n_embd, static_cast<size_t>(4 * n_embd));
      std::vector<float> sum(static_cast<size_t>(n_embd)), post(static_cast<size_t>(4 * n_embd));
      cpu::hc_weighted_sum(st, std::span<const float, 4>(weights.data() + 4 * t, 4), sum, numerics);
      cpu::HcSplit split;
      for (int i = 0; i < 4; ++i) split.post[i] = weights[4 * t + i];
      for (int i = 0; i < 16; ++i) split.comb[i] = comb[16 * t + i];
      cpu::hc_post(std::span<const float>(f.data() + t * n_embd, static_cast<size_t>(n_embd)), st, split, post, numerics);
      for (int64_t d = 0; d < n_embd; ++d) bad += bits(sum[d]) != bits(gpu_sum[t * n_embd + d]);
      for (int64_t d = 0; d < 4 * n_embd; ++d) bad += bits(post[d]) != bits(gpu_post[t * 4 * n_embd + d]);
    }
    EXPECT_EQ(bad, 0) << (numerics == Numerics::Quality ? "quality" : "default");
  }
}

TEST(CudaOps, MoeCombineAddsTheSlotsInTheCpusOrderBitForBit) {
  REQUIRE_GPU();
  const int64_t tokens = 3, n_embd = 640;
  const int k = 6;
  const std::vector<float> down = quant::test::gaussian(static_cast<size_t>(tokens * k * n_embd), 18);
  const std::vector<float> weights = quant::test::gaussian(static_cast<size_t>(tokens * k), 19);
  const std::vector<float> shared = quant::test::gaussian(static_cast<size_t>(tokens * n_embd), 20);
  const DeviceBuffer dd = to_device(down), dw = to_device(weights), ds = to_device(shared);
  for (bool weighted : {false, true}) {
    for (bool with_shared : {false, true}) {
      DeviceBuffer dout(static_cast<size_t>(tokens * n_embd) * 4);
      moe_combine_rows(dd.as<float>(), weighted ? dw.as<float>() : nullptr, with_shared ? ds.as<float>() : nullptr,
                       dout.as<float>(), tokens, k, n_embd, nullptr);
      const std::vector<float> gpu = from_device<float>(dout, static_cast<size_t>(tokens * n_embd));
      int bad = 0;
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t d = 0; d < n_embd; ++d) {
          // cpu::MoeLayer's sum: slots in order from 0, then the shared row.
          float acc = 0.0f;
          for (int s = 0; s < k; ++s) {
            const float v = down[(t * k + s) * n_embd + d];
            acc = weighted ? acc + v * weights[t * k + s] : acc + v;
          }
          const float want = with_shared ? acc + shared[t * n_embd + d] : acc;
          bad += bits(want) != bits(gpu[t * n_embd + d]);
        }
      EXPECT_EQ(bad, 0) << (weighted ? "weighted" : "unweighted") << (with_shared ? " with shared" : "");
    }
  }
}

TEST(CudaOps, HyperConnectionSplitAndHeadWeightsMatchTheCpu) {
  REQUIRE_GPU();
  const int64_t tokens = 9;
  const float eps = 1e-6f;
  const std::vector<float> mix = quant::test::gaussian(static_cast<size_t>(tokens * 24), 14);
  const std::vector<float> scale = {0.7f, 1.3f, 2.1f};
  const std::vector<float> base = quant::test::gaussian(24, 15);
  const DeviceBuffer dmix = to_device(mix), dscale = to_device(scale), dbase = to_device(base);
  for (Numerics numerics : kBoth) {
    DeviceBuffer dpre(static_cast<size_t>(tokens * 4) * 4), dpost(static_cast<size_t>(tokens * 4) * 4),
        dcomb(static_cast<size_t>(tokens * 16) * 4), dhead(static_cast<size_t>(tokens * 4) * 4);
    hc_split_rows(dmix.as<float>(), dscale.as<float>(), dbase.as<float>(), eps, cpu::kHcSinkhornIters, dpre.as<float>(),
                  dpost.as<float>(), dcomb.as<float>(), tokens, numerics, nullptr);
    // The head's mixes: the first 4 of each token's 24 (stride 4 here).
    std::vector<float> head_mix(static_cast<size_t>(tokens * 4));
    for (int64_t t = 0; t < tokens; ++t)
      for (int i = 0; i < 4; ++i) head_mix[t * 4 + i] = mix[t * 24 + i];
    const DeviceBuffer dhead_mix = to_device(head_mix);
    hc_head_weights_rows(dhead_mix.as<float>(), dscale.as<float>(), dbase.as<float>(), eps, dhead.as<float>(), tokens,
                         numerics, nullptr);
    const std::vector<float> pre = from_device<float>(dpre, static_cast<size_t>(tokens * 4));
    const std::vector<float> post = from_device<float>(dpost, static_cast<size_t>(tokens * 4));
    const std::vector<float> comb = from_device<float>(dcomb, static_cast<size_t>(tokens * 16));
    const std::vector<float> head = from_device<float>(dhead, static_cast<size_t>(tokens * 4));
    std::vector<float> want_pre, want_post, want_comb, want_head;
    for (int64_t t = 0; t < tokens; ++t) {
      const cpu::HcSplit split = cpu::hc_split_sinkhorn(std::span<const float, 24>(mix.data() + t * 24, 24),
                                                        std::span<const float, 3>(scale.data(), 3),
                                                        std::span<const float, 24>(base.data(), 24), eps, numerics);
      want_pre.insert(want_pre.end(), split.pre.begin(), split.pre.end());
      want_post.insert(want_post.end(), split.post.begin(), split.post.end());
      want_comb.insert(want_comb.end(), split.comb.begin(), split.comb.end());
      const auto w = cpu::hc_head_weights(std::span<const float, 4>(head_mix.data() + t * 4, 4), scale[0],
                                          std::span<const float, 4>(base.data(), 4), eps, numerics);
      want_head.insert(want_head.end(), w.begin(), w.end());
    }
    // expf's last bits, carried through 20 Sinkhorn passes.
    EXPECT_LT(max_rel(pre, want_pre), 1e-6);
    EXPECT_LT(max_rel(post, want_post), 1e-6);
    EXPECT_LT(max_rel(comb, want_comb), 1e-5);
    EXPECT_LT(max_rel(head, want_head), 1e-6);
  }
}

TEST(CudaOps, RopeWithTheCpuCacheEqualsTheCpuBitForBit) {
  REQUIRE_GPU();
  cpu::RopeParams p;  // a compressed layer's YaRN parameters (Flash)
  p.n_rot = 64;
  p.freq_base = 160000.0f;
  p.freq_scale = 1.0f / 16.0f;
  p.ext_factor = 1.0f;
  p.corr_lo = 15.0f;
  p.corr_hi = 25.0f;
  const int n_head = 8, head_dim = 512, n_pairs = 32;
  const std::vector<int64_t> positions = {0, 1, 17, 4095, 65537};
  const int64_t rows = static_cast<int64_t>(positions.size());
  const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(rows * n_head * head_dim), 12);
  for (bool fused : {false, true}) {
    for (bool inverse : {false, true}) {
      p.fused = fused;
      std::vector<float> cos, sin, cpu = x;
      for (int64_t r = 0; r < rows; ++r) {
        const cpu::RopeCache cache = cpu::rope_cache(p, positions[r], inverse);
        cos.insert(cos.end(), cache.cos.begin(), cache.cos.begin() + n_pairs);
        sin.insert(sin.end(), cache.sin.begin(), cache.sin.begin() + n_pairs);
        cpu::rope_heads(std::span<float>(cpu.data() + r * n_head * head_dim, static_cast<size_t>(n_head * head_dim)),
                        n_head, head_dim, cache);
      }
      DeviceBuffer dx = to_device(x);
      const DeviceBuffer dcos = to_device(cos), dsin = to_device(sin);
      rope_heads_rows(dx.as<float>(), dcos.as<float>(), dsin.as<float>(), rows, n_head, head_dim, n_pairs, fused,
                      nullptr);
      const std::vector<float> gpu = from_device<float>(dx, x.size());
      int bad = 0;
      for (size_t i = 0; i < x.size(); ++i) bad += bits(gpu[i]) != bits(cpu[i]);
      EXPECT_EQ(bad, 0) << (fused ? "fused" : "plain") << (inverse ? " inverse" : "");
    }
  }
}

TEST(CudaOps, RoutingChoosesTheCpusExpertsWithItsWeights) {
  REQUIRE_GPU();
  const int64_t tokens = 5;
  const int n_expert = 256, k = 6, n_vocab = 10;
  std::vector<float> logits = quant::test::gaussian(static_cast<size_t>(tokens * n_expert), 16);
  for (float& v : logits) v *= 4.0f;  // both softplus branches of Default
  logits[3] = 30.0f;
  logits[4] = -30.0f;
  std::vector<float> bias = quant::test::gaussian(static_cast<size_t>(n_expert), 17);
  for (float& v : bias) v *= 0.1f;
  std::vector<int32_t> tid2eid(static_cast<size_t>(n_vocab * k));
  for (size_t i = 0; i < tid2eid.size(); ++i) tid2eid[i] = static_cast<int32_t>((i * 37 + 11) % n_expert);
  const std::vector<int32_t> token_ids = {3, 7, 0, 9, 3};
  const DeviceBuffer dlogits = to_device(logits), dbias = to_device(bias), dtable = to_device(tid2eid),
                     dtokens = to_device(token_ids);
  for (Numerics numerics : kBoth) {
    for (bool hash : {false, true}) {
      DeviceBuffer dids(static_cast<size_t>(tokens * k) * 4), dweights(static_cast<size_t>(tokens * k) * 4);
      RouteRows r;
      r.logits = dlogits.as<float>();
      r.bias = hash ? nullptr : dbias.as<float>();
      r.tid2eid = hash ? dtable.as<int32_t>() : nullptr;
      r.tokens = hash ? dtokens.as<int32_t>() : nullptr;
      r.n_tokens = tokens;
      r.n_expert = n_expert;
      r.k = k;
      r.scale = 1.5f;
      r.ids = dids.as<int32_t>();
      r.weights = dweights.as<float>();
      route_rows(r, numerics, nullptr);
      const std::vector<int32_t> ids = from_device<int32_t>(dids, static_cast<size_t>(tokens * k));
      const std::vector<float> weights = from_device<float>(dweights, static_cast<size_t>(tokens * k));
      std::vector<int32_t> want_ids;
      std::vector<float> want_weights;
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<float> scores(static_cast<size_t>(n_expert));
        cpu::router_scores(std::span<const float>(logits.data() + t * n_expert, static_cast<size_t>(n_expert)), scores,
                           numerics);
        std::vector<int32_t> cid(static_cast<size_t>(k));
        std::vector<float> cw(static_cast<size_t>(k));
        if (hash)
          cpu::route_hash(scores, std::span<const int32_t>(tid2eid.data() + token_ids[t] * k, static_cast<size_t>(k)),
                          1.5f, cid, cw, numerics);
        else
          cpu::route_top_k(scores, bias, 1.5f, cid, cw, numerics);
        want_ids.insert(want_ids.end(), cid.begin(), cid.end());
        want_weights.insert(want_weights.end(), cw.begin(), cw.end());
      }
      EXPECT_EQ(ids, want_ids) << (hash ? "hash" : "top-k");
      EXPECT_LT(max_rel(weights, want_weights), 1e-5) << (hash ? "hash" : "top-k");
    }
  }
}

// Stored rows as both numerics keep them: f16 bits (Default) and f32 (Quality).
struct RowPool {
  int dim = 0;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  DeviceBuffer d32, d16;
  const void* row(int r, Numerics numerics) const {
    return numerics == Numerics::Quality ? static_cast<const void*>(d32.as<float>() + r * dim)
                                         : static_cast<const void*>(d16.as<uint16_t>() + r * dim);
  }
};
RowPool make_row_pool(int rows, int dim, uint32_t seed) {
  RowPool p;
  p.dim = dim;
  p.f32 = quant::test::gaussian(static_cast<size_t>(rows * dim), seed);
  p.f16.resize(p.f32.size());
  for (size_t i = 0; i < p.f16.size(); ++i) p.f16[i] = f32_to_f16(p.f32[i]);
  p.d32 = to_device(p.f32);
  p.d16 = to_device(p.f16);
  return p;
}

// Each token's list of pool rows as device pointers in `numerics`' form, and
// attention over them (its output left unset).
struct AttentionLists {
  DeviceBuffer ptrs, counts;
  AttentionRows a;
};
AttentionLists attention_lists(const RowPool& pool, const std::vector<std::vector<int>>& lists, int max_rows,
                               Numerics numerics, const DeviceBuffer& q, const DeviceBuffer& sinks, float scale,
                               int n_head) {
  const auto tokens = static_cast<int64_t>(lists.size());
  std::vector<const void*> ptrs(static_cast<size_t>(tokens * max_rows), nullptr);
  std::vector<int32_t> counts;
  for (int64_t t = 0; t < tokens; ++t) {
    counts.push_back(static_cast<int32_t>(lists[t].size()));
    for (size_t r = 0; r < lists[t].size(); ++r) ptrs[t * max_rows + r] = pool.row(lists[t][r], numerics);
  }
  AttentionLists l{to_device(ptrs), to_device(counts), AttentionRows{}};
  l.a.q = q.as<float>();
  l.a.rows = l.ptrs.as<const void*>();
  l.a.n_rows = l.counts.as<int32_t>();
  l.a.max_rows = max_rows;
  l.a.sinks = sinks.as<float>();
  l.a.scale = scale;
  l.a.n_tokens = tokens;
  l.a.n_head = n_head;
  l.a.dim = pool.dim;
  l.a.numerics = numerics;
  return l;
}

TEST(CudaOps, AttentionWithSinkOverStoredRowsMatchesTheCpu) {
  REQUIRE_GPU();
  // 300 rows of 512 (f16 in Default, f32 in Quality); token 0 attends to 128
  // of them, token 1 to 200 (in a scattered order), token 2 to none (the
  // sink alone).
  const int dim = 512, n_head = 3;
  const RowPool pool = make_row_pool(300, dim, 21);
  const std::vector<std::vector<int>> lists = {
      [] { std::vector<int> v; for (int i = 0; i < 128; ++i) v.push_back(i); return v; }(),
      [] { std::vector<int> v; for (int i = 0; i < 200; ++i) v.push_back((i * 37) % 300); return v; }(), {}};
  const int64_t tokens = static_cast<int64_t>(lists.size());
  const std::vector<float> q = quant::test::gaussian(static_cast<size_t>(tokens * n_head * dim), 22);
  const std::vector<float> sinks = {0.5f, -1.0f, 3.0f};
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const DeviceBuffer dq = to_device(q), dsinks = to_device(sinks);
  for (const Numerics numerics : kBoth) {
    const bool quality = numerics == Numerics::Quality;
    SCOPED_TRACE(quality ? "quality" : "default");
    AttentionLists l = attention_lists(pool, lists, 200, numerics, dq, dsinks, scale, n_head);
    DeviceBuffer dout(q.size() * 4);
    l.a.out = dout.as<float>();
    attention_with_sink_rows(l.a, nullptr);
    const std::vector<float> gpu = from_device<float>(dout, q.size());
    double worst = 0, scale_out = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<const uint16_t*> rows;
      std::vector<const float*> rows_f;
      for (int r : lists[t]) {
        rows.push_back(pool.f16.data() + r * dim);
        rows_f.push_back(pool.f32.data() + r * dim);
      }
      for (int h = 0; h < n_head; ++h) {
        std::vector<float> scores(std::max<size_t>(rows.size(), 1)), out(static_cast<size_t>(dim));
        const std::span<const float> qh(q.data() + (t * n_head + h) * dim, static_cast<size_t>(dim));
        if (quality)
          cpu::attention_with_sink(qh, rows_f, sinks[h], scale, scores, out, Numerics::Quality, {});
        else
          cpu::attention_with_sink_f16(qh, rows, sinks[h], scale, scores, out);
        for (int d = 0; d < dim; ++d) {
          const double g = gpu[(t * n_head + h) * dim + d];
          worst = std::max(worst, std::fabs(g - out[d]));
          scale_out = std::max(scale_out, std::fabs(static_cast<double>(out[d])));
        }
      }
    }
    EXPECT_LT(worst, 2e-5 * std::max(scale_out, 1e-30)) << "worst " << worst << " of " << scale_out;
  }
}

// The head-group kernel (prefill) against the per-head one, bit for bit:
// 64 heads (groups of 8), 6 (groups of 2) and 3 (groups of 1), 20 tokens
// with lists of 0 to 300 rows, both numerics.
TEST(CudaOps, AttentionHeadGroupsEqualPerHeadBitForBit) {
  REQUIRE_GPU();
  const int dim = 512, pool_rows = 400, max_rows = 300;
  const RowPool pool = make_row_pool(pool_rows, dim, 31);
  std::vector<std::vector<int>> lists(20);
  for (size_t t = 0; t < lists.size(); ++t)
    for (size_t r = 0; r < (t * 53) % (max_rows + 1); ++r)
      lists[t].push_back(static_cast<int>((r * 31 + t * 7) % pool_rows));
  const auto tokens = static_cast<int64_t>(lists.size());
  for (int n_head : {64, 6, 3}) {
    const std::vector<float> q = quant::test::gaussian(static_cast<size_t>(tokens * n_head * dim), 32);
    const DeviceBuffer dq = to_device(q), dsinks = to_device(quant::test::gaussian(static_cast<size_t>(n_head), 33));
    for (const Numerics numerics : kBoth) {
      SCOPED_TRACE(std::to_string(n_head) + " heads, " + (numerics == Numerics::Quality ? "quality" : "default"));
      AttentionLists l = attention_lists(pool, lists, max_rows, numerics, dq, dsinks, 0.04f, n_head);
      std::vector<std::vector<float>> outs;
      for (AttentionKernel kernel : {AttentionKernel::PerHead, AttentionKernel::HeadGroups, AttentionKernel::Auto}) {
        DeviceBuffer dout(q.size() * 4);
        l.a.out = dout.as<float>();
        attention_with_sink_rows(l.a, nullptr, kernel);
        outs.push_back(from_device<float>(dout, q.size()));
      }
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), q.size() * 4), 0) << "head groups";
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[2].data(), q.size() * 4), 0) << "auto";
    }
  }
}

TEST(CudaOps, RepeatRowsCopiesEachRowOncePerSlot) {
  REQUIRE_GPU();
  // 3 rows of 1000 (NaN and -0 among them) repeated 6 times: exact copies.
  std::vector<float> src = quant::test::gaussian(3000, 71);
  src[5] = std::numeric_limits<float>::quiet_NaN();
  src[1999] = -0.0f;
  const DeviceBuffer dsrc = to_device(src);
  DeviceBuffer ddst(18 * 1000 * 4);
  repeat_rows(dsrc.as<float>(), ddst.as<float>(), 3, 6, 1000, nullptr);
  const std::vector<float> got = from_device<float>(ddst, 18000);
  for (int r = 0; r < 18; ++r)
    ASSERT_EQ(std::memcmp(got.data() + r * 1000, src.data() + (r / 6) * 1000, 4000), 0) << "row " << r;
}

TEST(CudaOps, TopKEqualsTheCpuWithTiesAndNaNs) {
  REQUIRE_GPU();
  for (auto [n, k] : {std::pair<int64_t, int>{256, 8}, {5000, 512}, {7, 7}}) {
    const int64_t rows = 4;
    std::vector<float> scores = quant::test::gaussian(static_cast<size_t>(rows * n), 13);
    for (int64_t i = 0; i < rows * n; i += 3) scores[i] = 0.0f;  // many ties
    scores[5 % (rows * n)] = std::numeric_limits<float>::quiet_NaN();
    scores[n + 1] = std::numeric_limits<float>::infinity();
    const DeviceBuffer ds = to_device(scores);
    DeviceBuffer dout(static_cast<size_t>(rows * k) * 4);
    top_k_desc_rows(ds.as<float>(), dout.as<int32_t>(), rows, n, k, nullptr);
    const std::vector<int32_t> gpu = from_device<int32_t>(dout, static_cast<size_t>(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int32_t> cpu(static_cast<size_t>(k));
      cpu::top_k_desc(std::span<const float>(scores.data() + r * n, static_cast<size_t>(n)), cpu);
      EXPECT_EQ(std::vector<int32_t>(gpu.begin() + r * k, gpu.begin() + (r + 1) * k), cpu) << "n " << n << " row " << r;
    }
  }
}

// Rows whose 64-value blocks span the scales the round trips meet: tiny
// (subnormal E4M3 codes), ordinary, large (clamped at 448 after scaling),
// an all-zero block and a NaN.
std::vector<float> qat_rows(int64_t n_rows, int64_t width, uint32_t seed) {
  std::vector<float> x = quant::test::gaussian(static_cast<size_t>(n_rows * width), seed);
  const float magnitudes[] = {1e-6f, 0.03f, 1.0f, 7.0f, 300.0f, 2e4f};
  for (size_t i = 0; i < x.size(); ++i) x[i] *= magnitudes[(i / 64) % 6];
  for (int i = 0; i < 64; ++i) x[static_cast<size_t>(64 + i)] = 0.0f;
  x[200] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

TEST(CudaOps, QatRoundTripsEqualTheCpuBitForBit) {
  REQUIRE_GPU();
  // FP8 on the first 448 of 512-wide rows (the KV rows' non-rope dims).
  const int64_t rows = 9, width = 512;
  const int n = 448;
  const std::vector<float> x = qat_rows(rows, width, 31);
  DeviceBuffer dx = to_device(x);
  fp8_e4m3_round_trip_rows(dx.as<float>(), rows, width, n, nullptr);
  const std::vector<float> gpu = from_device<float>(dx, x.size());
  std::vector<float> cpu = x;
  for (int64_t r = 0; r < rows; ++r) cpu::fp8_e4m3_round_trip(std::span<float>(cpu.data() + r * width, n));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits(gpu[i]), bits(cpu[i])) << "fp8 at " << i << " of " << x[i];

  // Hadamard-128 and the indexer's QAT on query rows (4 heads) and row tails.
  for (bool with_fp4 : {false, true}) {
    for (auto [n_chunks, stride] : {std::pair<int, int64_t>{4, 512}, {1, 640}}) {
      const std::vector<float> h = qat_rows(rows, stride, 32);
      DeviceBuffer dh = to_device(h);
      hadamard128_rows(dh.as<float>(), rows, stride, n_chunks, with_fp4, nullptr);
      const std::vector<float> gh = from_device<float>(dh, h.size());
      std::vector<float> ch = h;
      for (int64_t r = 0; r < rows; ++r) {
        for (int c = 0; c < n_chunks; ++c) {
          std::span<float, cpu::kHadamardSize> chunk(ch.data() + r * stride + c * cpu::kHadamardSize,
                                                     cpu::kHadamardSize);
          if (with_fp4)
            cpu::indexer_qat(chunk);
          else
            cpu::hadamard128(chunk);
        }
      }
      for (size_t i = 0; i < h.size(); ++i)
        ASSERT_EQ(bits(gh[i]), bits(ch[i])) << "fp4 " << with_fp4 << " chunks " << n_chunks << " at " << i;
    }
  }
}

TEST(CudaOps, CompressorPoolMatchesTheCpu) {
  REQUIRE_GPU();
  // Ratio 4 (a previous and a current lane of 4, D 512) and ratio 128 (128
  // rows, D 128), 3 pooled rows each: some candidates empty, one column
  // with none at all (pools to 0).
  for (auto [n_cand, n_prev, dim] : {std::tuple<int, int, int>{8, 4, 512}, {128, 0, 128}}) {
    const int64_t n_out = 3;
    const size_t slice = static_cast<size_t>(dim);
    std::vector<float> scores = quant::test::gaussian(static_cast<size_t>(n_out * n_cand) * slice, 41);
    const std::vector<float> kv = quant::test::gaussian(scores.size(), 42);
    for (float& s : scores) s *= 4.0f;
    for (size_t j = 0; j < slice; ++j) scores[j] = cpu::kPoolEmptyScore;  // row 0's first candidate empty
    for (int c = 0; c < n_cand; ++c) scores[static_cast<size_t>(n_cand + c) * slice + 5] = cpu::kPoolEmptyScore;
    const DeviceBuffer ds = to_device(scores), dkv = to_device(kv);
    std::vector<const float*> sp, vp;
    for (size_t c = 0; c < static_cast<size_t>(n_out * n_cand); ++c) {
      sp.push_back(ds.as<float>() + c * slice);
      vp.push_back(dkv.as<float>() + c * slice);
    }
    const DeviceBuffer dsp = to_device(sp), dvp = to_device(vp);
    for (Numerics numerics : kBoth) {
      DeviceBuffer dout(static_cast<size_t>(n_out) * slice * 4);
      PoolRows p;
      p.score_rows = dsp.as<const float*>();
      p.kv_rows = dvp.as<const float*>();
      p.n_cand = n_cand;
      p.n_prev = n_prev;
      p.n_out = n_out;
      p.dim = dim;
      p.out = dout.as<float>();
      compressor_pool_rows(p, numerics, nullptr);
      const std::vector<float> gpu = from_device<float>(dout, static_cast<size_t>(n_out) * slice);
      for (int64_t o = 0; o < n_out; ++o) {
        std::vector<const float*> hs, hv;
        for (int c = 0; c < n_cand; ++c) {
          hs.push_back(scores.data() + static_cast<size_t>(o * n_cand + c) * slice);
          hv.push_back(kv.data() + static_cast<size_t>(o * n_cand + c) * slice);
        }
        std::vector<float> cpu(slice);
        cpu::compressor_pool(hs, hv, n_prev, cpu, numerics);
        for (size_t j = 0; j < slice; ++j) {
          EXPECT_NEAR(gpu[o * slice + j], cpu[j], 2e-6 * std::max(1.0f, std::fabs(cpu[j])))
              << "cand " << n_cand << " row " << o << " col " << j;
        }
      }
      EXPECT_EQ(gpu[slice + 5], 0.0f);  // row 1, column 5: no candidate
    }
  }
  PoolRows bad;
  bad.n_cand = 8;
  bad.n_prev = 3;
  EXPECT_THROW(compressor_pool_rows(bad, Numerics::Default, nullptr), Error);
}

TEST(CudaOps, IndexerScoresMatchTheCpuAndSelectTheCpusRows) {
  REQUIRE_GPU();
  // 64 heads of 128 (V4 Flash), top-k 512; token 0 sees the cache's first
  // 40 rows (all allowed), token 1 700, token 2 1000.
  const int n_head = 64, dim = 128, top_k = 512, pool_rows = 1000;
  const std::vector<float> pool_f = quant::test::gaussian(static_cast<size_t>(pool_rows * dim), 51);
  std::vector<uint16_t> pool(pool_f.size());
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = f32_to_f16(pool_f[i]);
  const std::vector<int> sizes = {40, 700, 1000};
  const int64_t tokens = static_cast<int64_t>(sizes.size());
  const int max_rows = pool_rows;
  const std::vector<float> q = quant::test::gaussian(static_cast<size_t>(tokens * n_head * dim), 52);
  std::vector<float> w = quant::test::gaussian(static_cast<size_t>(tokens * n_head), 53);
  for (float& v : w) v = std::fabs(v) * 0.01f;
  const DeviceBuffer dpool = to_device(pool), dq = to_device(q), dw = to_device(w);
  const std::vector<int32_t> counts(sizes.begin(), sizes.end());
  const DeviceBuffer dcounts = to_device(counts);
  DeviceBuffer dscores(static_cast<size_t>(tokens * max_rows) * 4), dallowed(static_cast<size_t>(tokens * top_k) * 4),
      dn(static_cast<size_t>(tokens) * 4);
  IndexerRows a;
  a.q = dq.as<float>();
  a.weights = dw.as<float>();
  a.rows = dpool.as<uint16_t>();
  a.row_stride = dim;
  a.n_rows = dcounts.as<int32_t>();
  a.max_rows = max_rows;
  a.n_tokens = tokens;
  a.n_head = n_head;
  a.dim = dim;
  a.scores = dscores.as<float>();
  indexer_scores_rows(a, nullptr);
  indexer_select_rows(dscores.as<float>(), dcounts.as<int32_t>(), tokens, max_rows, top_k, dallowed.as<int32_t>(),
                      dn.as<int32_t>(), nullptr);
  const std::vector<float> gpu = from_device<float>(dscores, static_cast<size_t>(tokens * max_rows));
  const std::vector<int32_t> allowed = from_device<int32_t>(dallowed, static_cast<size_t>(tokens * top_k));
  const std::vector<int32_t> n_allowed = from_device<int32_t>(dn, static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<const uint16_t*> rows;
    for (int r = 0; r < sizes[t]; ++r) rows.push_back(pool.data() + r * dim);
    std::vector<float> cpu(rows.size());
    cpu::indexer_scores(std::span<const float>(q.data() + t * n_head * dim, static_cast<size_t>(n_head * dim)),
                        std::span<const float>(w.data() + t * n_head, static_cast<size_t>(n_head)), dim, rows, cpu,
                        Numerics::Quality);
    const std::vector<float> mine(gpu.begin() + t * max_rows, gpu.begin() + t * max_rows + sizes[t]);
    double scale = 0;
    for (float v : cpu) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    for (size_t r = 0; r < cpu.size(); ++r) EXPECT_NEAR(mine[r], cpu[r], 1e-5 * scale) << "token " << t << " row " << r;
    // The selection is the CPU's on the GPU's scores, exactly.
    const std::vector<int32_t> want = cpu::indexer_select(mine, top_k, Numerics::Default);
    ASSERT_EQ(n_allowed[t], static_cast<int32_t>(want.size())) << "token " << t;
    EXPECT_EQ(std::vector<int32_t>(allowed.begin() + t * top_k, allowed.begin() + t * top_k + n_allowed[t]), want)
        << "token " << t;
  }
  // Quality's f32 rows: the same scores over the f32 values.
  const DeviceBuffer dpool_f = to_device(pool_f);
  a.rows = dpool_f.as<float>();
  a.f32_rows = true;
  indexer_scores_rows(a, nullptr);
  const std::vector<float> gpu_f = from_device<float>(dscores, static_cast<size_t>(tokens * max_rows));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<const float*> rows;
    for (int r = 0; r < sizes[t]; ++r) rows.push_back(pool_f.data() + r * dim);
    std::vector<float> cpu(rows.size());
    cpu::indexer_scores(std::span<const float>(q.data() + t * n_head * dim, static_cast<size_t>(n_head * dim)),
                        std::span<const float>(w.data() + t * n_head, static_cast<size_t>(n_head)), dim, rows, cpu,
                        Numerics::Quality);
    double scale = 0;
    for (float v : cpu) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    for (size_t r = 0; r < cpu.size(); ++r)
      EXPECT_NEAR(gpu_f[static_cast<size_t>(t * max_rows) + r], cpu[r], 1e-5 * scale)
          << "f32 token " << t << " row " << r;
  }
}

TEST(CudaOps, IndexerSelectionBreaksTiesAsTheCpu) {
  REQUIRE_GPU();
  // Scores with many exact ties (-0 and +0 among them), NaNs and an
  // infinity; 2 tokens of 600 and 300 rows, top-k 256; then a third token
  // whose NaNs must fill the last places.
  const int max_rows = 600, top_k = 256;
  std::vector<float> scores = quant::test::gaussian(static_cast<size_t>(3 * max_rows), 61);
  for (size_t i = 0; i < scores.size(); i += 2) scores[i] = std::round(scores[i]);
  for (size_t i = 1; i < scores.size(); i += 9) scores[i] = (i / 9) % 2 ? -0.0f : 0.0f;
  scores[7] = std::numeric_limits<float>::quiet_NaN();
  scores[max_rows + 3] = std::numeric_limits<float>::infinity();
  for (int i = 0; i < max_rows; i += 2)
    scores[static_cast<size_t>(2 * max_rows + i)] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int32_t> counts = {600, 300, 600};
  const DeviceBuffer ds = to_device(scores), dcounts = to_device(counts);
  DeviceBuffer dallowed(static_cast<size_t>(3 * top_k) * 4), dn(12);
  indexer_select_rows(ds.as<float>(), dcounts.as<int32_t>(), 3, max_rows, top_k, dallowed.as<int32_t>(),
                      dn.as<int32_t>(), nullptr);
  const std::vector<int32_t> allowed = from_device<int32_t>(dallowed, static_cast<size_t>(3 * top_k));
  for (int t = 0; t < 3; ++t) {
    const std::span<const float> row(scores.data() + t * max_rows, static_cast<size_t>(counts[t]));
    const std::vector<int32_t> want = cpu::indexer_select(row, top_k, Numerics::Default);
    EXPECT_EQ(std::vector<int32_t>(allowed.begin() + t * top_k, allowed.begin() + (t + 1) * top_k), want) << t;
  }
  EXPECT_THROW(indexer_select_rows(ds.as<float>(), dcounts.as<int32_t>(), 2, max_rows, 0, dallowed.as<int32_t>(),
                                   dn.as<int32_t>(), nullptr),
               Error);
}

}  // namespace
}  // namespace ds4::cuda
