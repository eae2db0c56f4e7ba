// backend/cuda/attention_layer.h. The CPU layer's steps (attention_layer.cpp
// forward_pass and token_core) as batch-wide launches: where the CPU stores
// and attends token by token, the plan (backend/attention_batch_plan.h) says
// which stored rows each token sees, so all rows are stored first and every
// token attends in one launch.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/attention_batch_plan.h"
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_layer.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/qat.h"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/stream_scratch.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;
// Tokens per launch of the indexer's scores and of the row lists, so that
// a long context's tables stay within this many bytes.
constexpr size_t kTableBytes = 256ull << 20;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// The cache's rounding: f16 bits, nearest even (core/fp16.h's).
__global__ void to_f16_kernel(const float* x, uint16_t* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < n) y[i] = dev::f32_to_f16(x[i]);
}

__global__ void scale_kernel(float* x, int64_t n, float factor) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < n) x[i] *= factor;
}

__global__ void gather_u16_rows_kernel(const uint16_t* const* src, uint16_t* dst, int rows, int width) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < static_cast<int64_t>(rows) * width) dst[i] = src[i / width][i % width];
}

// Token t's attention rows: its window rows (window[t * n_swa + i], i <
// window_count[t]), then rows of its session's compressed cache
// (compressed[t], row_bytes apart): allowed[t * top_k + j] for j <
// n_allowed[t] when allowed is given, else rows 0 .. n_allowed[t] - 1.
struct RowListArgs {
  const void* const* window;
  const int32_t* window_count;
  int n_swa;
  const char* const* compressed;  // each token's session's compressed rows
  int64_t row_bytes;
  const int32_t* allowed;
  const int32_t* n_allowed;
  int top_k;
  const void** rows;
  int32_t* n_rows;
  int max_rows;
  int64_t n_tokens;
};

__global__ void row_list_kernel(RowListArgs a) {
  const int64_t t = blockIdx.x;
  if (t >= a.n_tokens) return;
  const int w = a.window_count[t];
  const int c = a.n_allowed ? a.n_allowed[t] : 0;
  const void** rows = a.rows + t * a.max_rows;
  for (int i = threadIdx.x; i < w + c; i += kThreads) {
    if (i < w) {
      rows[i] = a.window[t * a.n_swa + i];
    } else {
      const int j = i - w;
      const int64_t row = a.allowed ? a.allowed[t * a.top_k + j] : j;
      rows[i] = a.compressed[t] + row * a.row_bytes;
    }
  }
  if (threadIdx.x == 0) a.n_rows[t] = w + c;
}

// n f32 values into the cache's form: f16 bits (Default) or f32 (Quality).
void store_rows(const float* x, void* y, int64_t n, backend::Numerics numerics, cudaStream_t stream) {
  if (n == 0) return;
  if (numerics == backend::Numerics::Quality) {
    cuda_check(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync", current_device());
    return;
  }
  to_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<uint16_t*>(y), n);
  cuda_check_launch("to_f16", current_device());
}

}  // namespace

// cos and sin per token (n x n_pairs each, device), forward and inverse.
struct DeviceAttentionLayer::RopeTables {
  StreamScratch data;
  int n_pairs;
  bool fused;
  const float* cos() const { return data.as<float>(); }
  const float* sin(int64_t n) const { return data.as<float>(static_cast<size_t>(n * n_pairs) * sizeof(float)); }
  const float* inverse_sin(int64_t n) const {
    return data.as<float>(static_cast<size_t>(2 * n * n_pairs) * sizeof(float));
  }
};

DeviceAttentionLayer::DeviceAttentionLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp,
                                           backend::Numerics numerics)
    : AttentionDims(layer, hp),
      w_(&layer),
      hp_(hp),
      numerics_(numerics),
      rope_(cpu::rope_params(hp, layer.compress_ratio, numerics)) {
  const std::string where = "GPU attention layer " + std::to_string(layer.index) + ": ";
  attn_norm_ = upload_f32(layer.attn_norm, hp.n_embd);
  q_a_norm_ = upload_f32(layer.attn_q_a_norm, hp.q_lora_rank);
  kv_norm_ = upload_f32(layer.attn_kv_norm, hp.head_dim);
  sinks_ = upload_f32(layer.attn_sinks, hp.n_head);
  q_a_ = upload_matrix(layer.attn_q_a);
  q_b_ = upload_matrix(layer.attn_q_b);
  kv_ = upload_matrix(layer.attn_kv);
  // attn_output_a {H*hd/G, o_lora*G}: group g's o_lora rows are matrix g.
  if (layer.attn_output_a.ne[0] != hp.o_group_in())
    throw Error(where + "attn_output_a rows are not " + std::to_string(hp.o_group_in()) + " wide");
  out_a_ = upload_tensor(layer.attn_output_a, o_lora_, o_groups_);
  std::vector<int32_t> groups(static_cast<size_t>(o_groups_));
  for (int g = 0; g < o_groups_; ++g) groups[static_cast<size_t>(g)] = g;
  group_ids_ = DeviceBuffer(groups.size() * sizeof(int32_t));
  group_ids_.upload(groups.data(), groups.size() * sizeof(int32_t));
  out_b_ = upload_matrix(layer.attn_output_b);
  if (ratio_ != 0) {
    attn_comp_ = std::make_unique<DeviceCompressor>(layer, hp, cpu::CompressorRole::Attention, numerics);
    comp_kv_ = upload_matrix(layer.attn_compressor.kv);
    comp_gate_ = upload_matrix(layer.attn_compressor.gate);
  }
  if (ratio_ == 4) {
    index_comp_ = std::make_unique<DeviceCompressor>(layer, hp, cpu::CompressorRole::Indexer, numerics);
    index_kv_ = upload_matrix(layer.indexer_compressor.kv);
    index_gate_ = upload_matrix(layer.indexer_compressor.gate);
    index_q_b_ = upload_matrix(layer.indexer_q_b);
    index_proj_ = upload_matrix(layer.indexer_proj);
    index_heads_ = static_cast<int>(hp.indexer_n_head);
    index_dim_ = static_cast<int>(hp.indexer_head_dim);
    top_k_ = static_cast<int>(hp.indexer_top_k);
  }
}

DeviceLayerKv DeviceAttentionLayer::new_state(int64_t n_ctx, cudaStream_t stream) const {
  return DeviceLayerKv(*w_, hp_, numerics_, n_ctx, attn_comp_.get(), index_comp_.get(), stream);
}

void DeviceAttentionLayer::forward(const float* X, int64_t n, int64_t pos0, DeviceLayerKv& st, float* OUT,
                                   DeviceProducts& P) const {
  std::vector<DeviceLayerKv*> states(static_cast<size_t>(std::max<int64_t>(n, 0)), &st);
  std::vector<int64_t> pos(states.size());
  for (size_t t = 0; t < pos.size(); ++t) pos[t] = pos0 + static_cast<int64_t>(t);
  forward_tokens(X, n, states, pos, OUT, P);
}

std::vector<DeviceAttentionLayer::Run> DeviceAttentionLayer::runs_of(std::span<DeviceLayerKv* const> states,
                                                                     std::span<const int64_t> pos) const {
  std::vector<Run> runs;
  for (size_t t = 0; t < states.size(); ++t) {
    DeviceLayerKv* st = states[t];
    if (!runs.empty() && runs.back().state == st) {
      if (pos[t] != pos[t - 1] + 1) throw Error("GPU attention forward: a session's positions do not follow each other");
      runs.back().t1 = static_cast<int64_t>(t) + 1;
      continue;
    }
    for (const Run& r : runs)
      if (r.state == st) throw Error("GPU attention forward: a session's tokens are not together in the batch");
    if (st->ratio() != ratio_ || st->head_dim() != head_dim_ || st->n_swa() != n_swa_)
      throw Error("GPU attention forward: the state belongs to another kind of layer");
    Run r;
    r.t0 = static_cast<int64_t>(t);
    r.t1 = r.t0 + 1;
    r.state = st;
    r.pos0 = pos[t];
    runs.push_back(r);
  }
  for (const Run& r : runs) {
    const int64_t windows = ratio_ == 0 ? 0 : (r.pos0 + r.t1 - r.t0) / ratio_ - r.pos0 / ratio_;
    if (ratio_ != 0 && r.state->n_compressed + windows > r.state->capacity())
      throw Error("GPU attention forward: " + std::to_string(r.state->n_compressed + windows) +
                  " compressed rows exceed the state's room for " + std::to_string(r.state->capacity()));
  }
  return runs;
}

void DeviceAttentionLayer::forward_tokens(const float* X, int64_t n, std::span<DeviceLayerKv* const> states,
                                          std::span<const int64_t> pos, float* OUT, DeviceProducts& P) const {
  if (n <= 0) return;
  if (states.size() != static_cast<size_t>(n) || pos.size() != static_cast<size_t>(n))
    throw Error("GPU attention forward: one state and one position per token");
  const std::vector<Run> runs = runs_of(states, pos);  // everything checked before any work
  const cudaStream_t stream = P.stream();
  const int device = current_device();
  const backend::Numerics numerics = numerics_;
  const int64_t hq = static_cast<int64_t>(n_head_) * head_dim_;
  const int64_t low_width = static_cast<int64_t>(o_groups_) * o_lora_;
  const int64_t group_in = hq / o_groups_;

  // The pass's f32 rows, one scratch: xn, qa, qr, q, kv, heads, low, one group's heads.
  const int64_t floats = n * (n_embd_ + 2 * q_lora_ + 2 * hq + head_dim_ + low_width + group_in);
  const StreamScratch pass(static_cast<size_t>(floats) * sizeof(float), stream);
  float* xn = pass.as<float>();
  float* qa = xn + n * n_embd_;
  float* qr = qa + n * q_lora_;
  float* q = qr + n * q_lora_;
  float* kv = q + n * hq;
  float* heads = kv + n * head_dim_;
  float* low = heads + n * hq;
  float* group_x = low + n * low_width;

  rms_norm_rows(X, attn_norm_.as<float>(), xn, n, n_embd_, eps_, numerics, stream);
  P.run(q_a_, 0, xn, n, qa, q_lora_);
  P.run(kv_, 0, xn, n, kv, head_dim_);
  rms_norm_rows(qa, q_a_norm_.as<float>(), qr, n, q_lora_, eps_, numerics, stream);
  P.run(q_b_, 0, qr, n, q, hq);

  // RoPE tables for the tokens' positions (the CPU's caches).
  const int n_pairs = rope_.n_rot / 2;
  std::vector<float> tables(static_cast<size_t>(3 * n * n_pairs));
  bool fused = false;
  for (int64_t t = 0; t < n; ++t) {
    const cpu::RopeCache fwd = cpu::rope_cache(rope_, pos[static_cast<size_t>(t)], false);
    const cpu::RopeCache inv = cpu::rope_cache(rope_, pos[static_cast<size_t>(t)], true);
    fused = fwd.fused;
    for (int k = 0; k < n_pairs; ++k) {
      tables[static_cast<size_t>(t * n_pairs + k)] = fwd.cos[static_cast<size_t>(k)];
      tables[static_cast<size_t>((n + t) * n_pairs + k)] = fwd.sin[static_cast<size_t>(k)];
      tables[static_cast<size_t>((2 * n + t) * n_pairs + k)] = inv.sin[static_cast<size_t>(k)];
    }
  }
  const RopeTables rope{StreamScratch(tables.size() * sizeof(float), stream), n_pairs, fused};
  rope.data.upload(0, tables.data(), tables.size() * sizeof(float));

  // Queries: each head normed (unweighted) and roped; the KV row normed,
  // roped and (Default) FP8-rounded on its non-rope dims.
  rms_norm_rows(q, nullptr, q, n * n_head_, head_dim_, eps_, numerics, stream);
  rms_norm_rows(kv, kv_norm_.as<float>(), kv, n, head_dim_, eps_, numerics, stream);
  rope_heads_rows(q, rope.cos(), rope.sin(n), n, n_head_, head_dim_, n_pairs, fused, stream);
  rope_heads_rows(kv, rope.cos(), rope.sin(n), n, 1, head_dim_, n_pairs, fused, stream);
  if (numerics == backend::Numerics::Default) fp8_e4m3_round_trip_rows(kv, n, head_dim_, head_dim_ - n_rot_, stream);

  // Store: the tokens' raw rows, then the rows each session's closed windows
  // compress (the projections for all tokens at once, the frontiers run by run).
  const int64_t row_bytes = static_cast<int64_t>(head_dim_) * (numerics == backend::Numerics::Quality ? 4 : 2);
  const StreamScratch raw(static_cast<size_t>(n * row_bytes), stream);
  store_rows(kv, raw.as<char>(), n * head_dim_, numerics, stream);
  const auto raw_row = [&](int64_t t) { return raw.as<const char>() + t * row_bytes; };
  std::vector<int64_t> compressed_before, index_before;
  for (const Run& r : runs) {
    compressed_before.push_back(r.state->n_compressed);
    index_before.push_back(r.state->n_index);
  }
  const auto compress = [&](const DeviceCompressor& comp, const DeviceTensor& kv_w, const DeviceTensor& gate_w,
                            bool index) {
    const int64_t width = comp.state_width();
    const StreamScratch proj(static_cast<size_t>(2 * n * width + (n / ratio_ + 2 * static_cast<int64_t>(runs.size())) *
                                                                     comp.dim()) *
                                 sizeof(float),
                             stream);
    float* pkv = proj.as<float>();
    float* pscore = pkv + n * width;
    float* rows = pscore + n * width;
    P.run(kv_w, 0, xn, n, pkv, width);
    P.run(gate_w, 0, xn, n, pscore, width);
    for (const Run& r : runs) {
      DeviceLayerKv& st = *r.state;
      const backend::CompressorPlan plan =
          comp.push_batch(index ? *st.index_frontier : *st.attn_frontier, pkv + r.t0 * width, pscore + r.t0 * width,
                          r.pos0, r.t1 - r.t0, rows, stream);
      int64_t& count = index ? st.n_index : st.n_compressed;
      store_rows(rows, index ? st.index_row(count) : st.compressed_row(count), plan.n_windows() * comp.dim(), numerics,
                 stream);
      count += plan.n_windows();
      rows += plan.n_windows() * comp.dim();
    }
  };
  if (attn_comp_) compress(*attn_comp_, comp_kv_, comp_gate_, false);
  if (index_comp_) compress(*index_comp_, index_kv_, index_gate_, true);

  // Which rows each token sees: per token its window's rows, its session's
  // compressed rows and the counts (window, compressed seen, index seen).
  std::vector<const void*> window(static_cast<size_t>(n * n_swa_), nullptr);
  std::vector<const char*> compressed(static_cast<size_t>(n));
  std::vector<int32_t> counts(static_cast<size_t>(3 * n));
  std::vector<backend::AttentionBatchPlan> plans;
  int64_t max_compressed = 0, max_index = 0;
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const Run& r = runs[ri];
    DeviceLayerKv& st = *r.state;
    plans.push_back(backend::plan_attention_batch(n_swa_, st.ring_count, st.ring_next, r.pos0, r.t1 - r.t0, ratio_,
                                                  compressed_before[ri], index_before[ri]));
    const backend::AttentionBatchPlan& plan = plans.back();
    for (int64_t i = 0; i < r.t1 - r.t0; ++i) {
      const int64_t t = r.t0 + i;
      const int64_t b = plan.window_begin[static_cast<size_t>(i)], e = plan.window_begin[static_cast<size_t>(i + 1)];
      for (int64_t j = b; j < e; ++j) {
        const backend::WindowRow& w = plan.window[static_cast<size_t>(j)];
        window[static_cast<size_t>(t * n_swa_ + j - b)] =
            w.from_batch ? raw_row(r.t0 + w.index) : st.ring_row(w.index);
      }
      compressed[static_cast<size_t>(t)] = st.compressed_row(0);
      counts[static_cast<size_t>(t)] = static_cast<int32_t>(e - b);
      counts[static_cast<size_t>(n + t)] = static_cast<int32_t>(plan.compressed_visible[static_cast<size_t>(i)]);
      counts[static_cast<size_t>(2 * n + t)] = static_cast<int32_t>(plan.index_visible[static_cast<size_t>(i)]);
      max_compressed = std::max(max_compressed, plan.compressed_visible[static_cast<size_t>(i)]);
      max_index = std::max(max_index, plan.index_visible[static_cast<size_t>(i)]);
    }
  }
  const size_t window_bytes = window.size() * sizeof(const void*);
  const size_t compressed_bytes = compressed.size() * sizeof(const char*);
  const StreamScratch lists(window_bytes + compressed_bytes + counts.size() * sizeof(int32_t), stream);
  lists.upload(0, window.data(), window_bytes);
  lists.upload(window_bytes, compressed.data(), compressed_bytes);
  lists.upload(window_bytes + compressed_bytes, counts.data(), counts.size() * sizeof(int32_t));
  const int32_t* window_count = lists.as<int32_t>(window_bytes + compressed_bytes);
  const int32_t* compressed_seen = window_count + n;
  const int32_t* index_seen = window_count + 2 * n;

  // Ratio 4: the indexer's allowed rows once a token sees more than top_k;
  // until then, and on ratio 128, every compressed row the token sees.
  const bool scoring = ratio_ == 4 && max_index > top_k_;
  const StreamScratch allowed(scoring ? static_cast<size_t>(n * (top_k_ + 1)) * sizeof(int32_t) : 0, stream);
  if (scoring) {
    std::vector<IndexRun> index_runs;
    for (const Run& r : runs) index_runs.push_back({r.t0, r.t1, r.state->index_row(0)});
    select_rows(xn, qr, n, rope, index_runs, index_seen, max_index, allowed.as<int32_t>(),
                allowed.as<int32_t>() + n * top_k_, P);
  }

  // Attention, in token blocks whose row lists fit the table budget.
  const int max_rows = n_swa_ + static_cast<int>(scoring ? top_k_ : max_compressed);
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(kTableBytes / (static_cast<size_t>(max_rows) * 8 + 4)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t m = std::min(block, n - t0);
    const StreamScratch rows(static_cast<size_t>(m) * (static_cast<size_t>(max_rows) * 8 + 4), stream);
    RowListArgs a;
    a.window = lists.as<const void* const>() + t0 * n_swa_;
    a.window_count = window_count + t0;
    a.n_swa = n_swa_;
    a.compressed = lists.as<const char* const>(window_bytes) + t0;
    a.row_bytes = row_bytes;
    a.allowed = scoring ? allowed.as<int32_t>() + t0 * top_k_ : nullptr;
    a.n_allowed = scoring ? allowed.as<int32_t>() + n * top_k_ + t0 : (ratio_ == 0 ? nullptr : compressed_seen + t0);
    a.top_k = top_k_;
    a.rows = rows.as<const void*>();
    a.n_rows = rows.as<int32_t>(static_cast<size_t>(m * max_rows) * 8);
    a.max_rows = max_rows;
    a.n_tokens = m;
    row_list_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(a);
    cuda_check_launch("attention row lists", device);
    AttentionRows att;
    att.q = q + t0 * hq;
    att.rows = a.rows;
    att.n_rows = a.n_rows;
    att.numerics = numerics;
    att.max_rows = max_rows;
    att.sinks = sinks_.as<float>();
    att.scale = scale;
    att.n_tokens = m;
    att.n_head = n_head_;
    att.dim = head_dim_;
    att.out = heads + t0 * hq;
    attention_with_sink_rows(att, stream);
  }
  rope_heads_rows(heads, rope.cos(), rope.inverse_sin(n), n, n_head_, head_dim_, n_pairs, fused, stream);

  // Grouped output LoRA: group g's heads (columns g * group_in ..) through
  // matrix g of attn_output_a into columns g * o_lora of low; then attn_output_b.
  ActQuant form;
  if (n == 1 && activation_quant(out_a_.type, numerics, form)) {
    // One token (decode): the groups' heads are consecutive rows of group_in
    // and their outputs consecutive rows of o_lora, so all groups go in one
    // routed-expert launch (group g as matrix g); each result as the group's
    // own product (matvec_experts equals matvec's fast order), so equal to
    // the loop below bit for bit.
    const StreamScratch acts(static_cast<size_t>(o_groups_ * activation_row_bytes(form, group_in)), stream);
    quantize_activations(form, heads, acts.as<void>(), o_groups_, group_in, stream);
    matvec_experts(out_a_.type, out_a_.data.data(), o_lora_, group_in, group_ids_.as<int32_t>(), o_groups_,
                   acts.as<void>(), low, o_lora_, stream);
  } else {
    for (int g = 0; g < o_groups_; ++g) {
      cuda_check(cudaMemcpy2DAsync(group_x, static_cast<size_t>(group_in) * sizeof(float), heads + g * group_in,
                                   static_cast<size_t>(hq) * sizeof(float),
                                   static_cast<size_t>(group_in) * sizeof(float), static_cast<size_t>(n),
                                   cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpy2DAsync", device);
      P.run(out_a_, g, group_x, n, low + static_cast<int64_t>(g) * o_lora_, low_width);
    }
  }
  P.run(out_b_, 0, low, n, OUT, n_embd_);

  // Each session's ring after its tokens, gathered into its other buffer.
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const Run& r = runs[ri];
    DeviceLayerKv& st = *r.state;
    const backend::AttentionBatchPlan& plan = plans[ri];
    std::vector<const void*> sources;
    sources.reserve(static_cast<size_t>(n_swa_));
    for (const backend::WindowRow& w : plan.ring_after)
      sources.push_back(w.from_batch ? raw_row(r.t0 + w.index) : st.ring_row(w.index));
    const StreamScratch ring_table(sources.size() * sizeof(const void*), stream);
    ring_table.upload(0, sources.data(), sources.size() * sizeof(const void*));
    // Rows copied as 16-bit words (an f32 row is twice as many).
    const int words = static_cast<int>(row_bytes / 2);
    gather_u16_rows_kernel<<<blocks_for(static_cast<int64_t>(n_swa_) * words), kThreads, 0, stream>>>(
        ring_table.as<const uint16_t* const>(), reinterpret_cast<uint16_t*>(st.next_ring()), n_swa_, words);
    cuda_check_launch("attention ring", device);
    st.swap_ring();
    for (size_t s = 0; s < plan.ring_after.size(); ++s)
      if (plan.ring_after[s].from_batch) st.ring_pos[s] = r.pos0 + plan.ring_after[s].index;
    st.ring_count = plan.ring_count_after;
    st.ring_next = plan.ring_next_after;
  }
}

void DeviceAttentionLayer::select_rows(const float* xn, const float* qr, int64_t n, const RopeTables& rope,
                                       std::span<const IndexRun> index_runs, const int32_t* index_visible,
                                       int64_t max_visible, int32_t* allowed, int32_t* n_allowed,
                                       DeviceProducts& P) const {
  const cudaStream_t stream = P.stream();
  const int64_t iq = static_cast<int64_t>(index_heads_) * index_dim_;
  const StreamScratch proj(static_cast<size_t>(n * (iq + index_heads_)) * sizeof(float), stream);
  float* q = proj.as<float>();
  float* w = q + n * iq;
  // Queries: roped at the token's position, rotated (+ FP4); weights scaled
  // by 1 / sqrt(heads x dim) (cpu::Indexer::finish_query / finish_weights).
  P.run(index_q_b_, 0, qr, n, q, iq);
  P.run(index_proj_, 0, xn, n, w, index_heads_);
  rope_heads_rows(q, rope.cos(), rope.sin(n), n, index_heads_, index_dim_, rope.n_pairs, rope.fused, stream);
  // Quality: llama.cpp rotates but does not round (cpu::Indexer::finish_query).
  hadamard128_rows(q, n, iq, index_heads_, /*with_fp4=*/numerics_ == backend::Numerics::Default, stream);
  scale_kernel<<<blocks_for(n * index_heads_), kThreads, 0, stream>>>(
      w, n * index_heads_, 1.0f / std::sqrt(static_cast<float>(index_heads_ * index_dim_)));
  cuda_check_launch("indexer weights", current_device());
  // Each session's tokens over its own index cache, in token blocks whose
  // score rows fit the budget.
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(kTableBytes / (static_cast<size_t>(max_visible) * 4)));
  for (const IndexRun& r : index_runs) {
    for (int64_t t0 = r.t0; t0 < r.t1; t0 += block) {
      const int64_t m = std::min(block, r.t1 - t0);
      const StreamScratch scores(static_cast<size_t>(m * max_visible) * sizeof(float), stream);
      IndexerRows a;
      a.q = q + t0 * iq;
      a.weights = w + t0 * index_heads_;
      a.rows = r.rows;
      a.f32_rows = numerics_ == backend::Numerics::Quality;
      a.row_stride = index_dim_;
      a.n_rows = index_visible + t0;
      a.max_rows = static_cast<int>(max_visible);
      a.n_tokens = m;
      a.n_head = index_heads_;
      a.dim = index_dim_;
      a.scores = scores.as<float>();
      indexer_scores_rows(a, stream);
      indexer_select_rows(a.scores, a.n_rows, m, a.max_rows, top_k_, allowed + t0 * top_k_, n_allowed + t0, stream);
    }
  }
}

}  // namespace ds4::cuda
