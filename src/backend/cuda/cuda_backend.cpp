#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <string>
#include <utility>

#include "backend/cpu/ops_hc.h"
#include "backend/cpu/session.h"
#include "backend/cpu/session_payload.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_devices.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/stream_scratch.h"
#include "core/error.h"
#include "model/deepseek4_model.h"

namespace ds4::cuda {
namespace {

constexpr int kHcStreams = cpu::kHcStreams;
constexpr int kHcMixes = cpu::kHcMixes;
// Per GPU beyond weights and KV state: the GEMM's weight scratch, the
// chunk's activations and the kernels' temporaries.
constexpr uint64_t kScratchBytes = kGemmWeightScratchBytes + (1ull << 30);

// n floats of one step's activations on the current GPU, from its pool.
DeviceBuffer step_buffer(int64_t n) {
  return DeviceBuffer(static_cast<size_t>(n) * sizeof(float), Allocation::StreamOrdered);
}

}  // namespace

// One GPU of the placement. Work is queued on its legacy default stream, which
// orders it with the synchronous copies that load weights and states.
struct CudaBackend::Gpu {
  int device = 0;
  std::unique_ptr<DeviceProducts> products;
};

// A chunk's activations on one GPU: the HC states (two buffers, post writes
// the other), the sublayer input and output, and the HC mixes.
struct CudaBackend::ChunkBuffers {
  ChunkBuffers(int64_t m, int hc_dim, int n_embd)
      // The HC states are copied to the next GPU at a layer boundary
      // (cudaMemcpyPeer): plain allocations, whatever the pool's peer access.
      : h{DeviceBuffer(static_cast<size_t>(m * hc_dim) * 4), DeviceBuffer(static_cast<size_t>(m * hc_dim) * 4)},
        x(step_buffer(m * n_embd)),
        f(step_buffer(m * n_embd)),
        flat(step_buffer(m * hc_dim)),
        mix(step_buffer(m * kHcMixes)),
        pre(step_buffer(m * kHcStreams)),
        post(step_buffer(m * kHcStreams)),
        comb(step_buffer(m * kHcStreams * kHcStreams)) {}
  float* H() const { return h[cur].as<float>(); }
  float* next_H() const { return h[1 - cur].as<float>(); }
  DeviceBuffer h[2];
  int cur = 0;
  DeviceBuffer x, f, flat, mix, pre, post, comb;
};

// A chunk's exchange buffers for one pair: the routed inputs (normed input,
// weights, ids: all 4-byte values) on both GPUs, the partner's part.
struct CudaBackend::PairBuffers {
  PairBuffers(int64_t m, int n_embd, int k, int home, int partner) : floats(m * n_embd), pairs(m * k) {
    const size_t in_bytes = static_cast<size_t>(floats + 2 * pairs) * 4;
    {
      const ScopedDevice on(home);
      home_in = DeviceBuffer(in_bytes, Allocation::StreamOrdered);
    }
    const ScopedDevice on(partner);
    partner_in = DeviceBuffer(in_bytes, Allocation::StreamOrdered);
    partner_out = step_buffer(floats);
  }
  // The three inputs within one of the in buffers.
  static float* xn(const DeviceBuffer& in) { return in.as<float>(); }
  float* weights(const DeviceBuffer& in) const { return in.as<float>() + floats; }
  int32_t* ids(const DeviceBuffer& in) const { return reinterpret_cast<int32_t*>(in.as<float>() + floats + pairs); }
  int64_t floats, pairs;
  DeviceBuffer home_in, partner_in, partner_out;
};

// ---- sessions ----

CudaSession::CudaSession(const CudaBackend& backend, int64_t n_ctx) : backend_(&backend), n_ctx_(n_ctx) {}

void CudaSession::reset() {
  for (size_t il = 0; il < layers_.size(); ++il) {
    const ScopedDevice scope(backend_->gpu_of_layer(static_cast<int>(il)).device);
    layers_[il].reset(nullptr);
  }
  tokens_.clear();
  logits_.clear();
  consistent_ = true;
}

std::unique_ptr<backend::Session> CudaSession::snapshot() const {
  const cpu::Session state = backend_->to_cpu(*this);
  std::unique_ptr<CudaSession> copy(new CudaSession(*backend_, n_ctx_));
  backend_->fill_layers(*copy);
  backend_->from_cpu(state, *copy);
  return copy;
}

void CudaSession::restore(const backend::Session& snapshot) {
  const auto* other = dynamic_cast<const CudaSession*>(&snapshot);
  if (!other || other->backend_ != backend_ || other->n_ctx_ != n_ctx_)
    throw Error("restore: the snapshot belongs to another backend or context size");
  backend_->from_cpu(backend_->to_cpu(*other), *this);
}

size_t CudaSession::state_bytes() const {
  size_t n = 0;
  for (const DeviceLayerKv& layer : layers_) n += layer.bytes();
  return n;
}

// ---- the backend ----

CudaBackend::CudaBackend(const model::Deepseek4Model& model, backend::Numerics numerics,
                         const CudaBackendOptions& options)
    : model_(&model), numerics_(numerics) {
  const model::Deepseek4HParams& hp = model.hparams();
  const model::Deepseek4Weights& w = model.weights();
  if (hp.hc_count != static_cast<uint32_t>(kHcStreams))
    throw Error("cuda: " + std::to_string(hp.hc_count) + " hyper-connection streams; only 4 are supported");
  n_layer_ = static_cast<int>(hp.n_layer);
  n_embd_ = static_cast<int>(hp.n_embd);
  hc_dim_ = static_cast<int>(hp.hc_dim());
  n_vocab_ = static_cast<int>(hp.n_vocab);
  sinkhorn_iters_ = static_cast<int>(hp.hc_sinkhorn_iters);
  rms_eps_ = hp.rms_eps;
  hc_eps_ = hp.hc_eps;
  max_ctx_ = options.max_ctx;
  if (max_ctx_ < 1) throw Error("cuda: a context of " + std::to_string(max_ctx_) + " tokens");

  // The GPUs asked for, as the placement sees them.
  const GpuList list = list_gpus();
  if (list.devices.empty()) throw Error("--backend cuda: " + list.unavailable);
  const std::vector<int> devices = options.devices.empty() ? std::vector<int>{0} : options.devices;
  std::vector<backend::GpuCapacity> capacities;
  for (int d : devices) {
    const auto it =
        std::find_if(list.devices.begin(), list.devices.end(), [&](const GpuDevice& g) { return g.index == d; });
    if (it == list.devices.end())
      throw Error("--backend cuda: there is no GPU " + std::to_string(d) + " (" + std::to_string(list.devices.size()) +
                  " visible)");
    if (!it->unsupported.empty()) throw Error("--backend cuda: " + describe(*it));
    // A GPU named twice (tests' one-GPU pairs) shares its memory between its two places.
    const auto times = std::count(devices.begin(), devices.end(), d);
    capacities.push_back({d, it->name, it->free_bytes / static_cast<uint64_t>(times)});
  }
  const backend::PlacementRequest request =
      backend::placement_request(w, hp, static_cast<uint64_t>(max_ctx_),
                                 /*kv_elem_bytes=*/numerics == backend::Numerics::Quality ? 4 : 2, kScratchBytes);
  std::vector<backend::GpuShare> homes, partners;
  if (options.tensor_parallel) {
    backend::PairPlacement placed = backend::place_pairs(request, capacities, options.vram, options.one_gpu_pairs);
    homes = std::move(placed.homes);
    partners = std::move(placed.partners);
  } else {
    homes = backend::place_layers(request, capacities, options.vram);
  }
  shares_ = homes;
  shares_.insert(shares_.end(), partners.begin(), partners.end());

  layer_gpu_.assign(static_cast<size_t>(n_layer_), -1);
  layer_pair_.assign(static_cast<size_t>(n_layer_), -1);
  for (size_t i = 0; i < homes.size(); ++i) {
    const backend::GpuShare& share = homes[i];
    if (share.layer_begin == share.layer_end && !share.input && !share.output) continue;
    const ScopedDevice scope(share.device);
    keep_scratch_memory(kScratchBytes);  // the placement reserved it
    auto gpu = std::make_unique<Gpu>();
    gpu->device = share.device;
    gpu->products = std::make_unique<DeviceProducts>(nullptr, numerics, options.prefill);
    gpus_.push_back(std::move(gpu));
    for (int il = share.layer_begin; il < share.layer_end; ++il)
      layer_gpu_[static_cast<size_t>(il)] = static_cast<int>(gpus_.size()) - 1;
    if (share.input) token_embd_ = upload_matrix(w.token_embd);
    if (partners.empty() || share.layer_begin == share.layer_end) continue;
    Pair pair;
    {
      const ScopedDevice on_partner(partners[i].device);
      keep_scratch_memory(kScratchBytes);
      pair.partner = std::make_unique<Gpu>();
      pair.partner->device = partners[i].device;
      pair.partner->products = std::make_unique<DeviceProducts>(nullptr, numerics, options.prefill);
    }
    pair.link = std::make_unique<PairLink>(share.device, partners[i].device);
    pairs_.push_back(std::move(pair));
    for (int il = share.layer_begin; il < share.layer_end; ++il)
      layer_pair_[static_cast<size_t>(il)] = static_cast<int>(pairs_.size()) - 1;
  }
  const uint64_t mixes = hp.hc_mix_dim();
  for (int il = 0; il < n_layer_; ++il) {
    const model::LayerWeights& layer = w.layers[static_cast<size_t>(il)];
    const int pair = layer_pair_[static_cast<size_t>(il)];
    const ScopedDevice scope(gpu_of_layer(il).device);
    attn_.push_back(std::make_unique<DeviceAttentionLayer>(layer, hp, numerics));
    moe_.push_back(std::make_unique<DeviceMoeLayer>(layer, hp, numerics, pair >= 0 ? MoePart::Home : MoePart::Whole));
    if (pair >= 0) {
      const ScopedDevice on_partner(pairs_[static_cast<size_t>(pair)].partner->device);
      partner_moe_.push_back(std::make_unique<DeviceMoeLayer>(layer, hp, numerics, MoePart::Partner));
    } else {
      partner_moe_.push_back(nullptr);
    }
    hc_attn_.push_back(
        {upload_matrix(layer.hc_attn_fn), upload_f32(layer.hc_attn_scale, 3), upload_f32(layer.hc_attn_base, mixes)});
    hc_ffn_.push_back(
        {upload_matrix(layer.hc_ffn_fn), upload_f32(layer.hc_ffn_scale, 3), upload_f32(layer.hc_ffn_base, mixes)});
  }
  const ScopedDevice scope(gpu_of_layer(n_layer_ - 1).device);  // the output head goes with the last layer
  hc_head_ = {upload_matrix(w.output_hc_fn), upload_f32(w.output_hc_scale, 1),
              upload_f32(w.output_hc_base, static_cast<uint64_t>(kHcStreams))};
  output_norm_ = upload_f32(w.output_norm, hp.n_embd);
  output_ = upload_matrix(w.output);
  for (const auto& gpu : gpus_) {
    const ScopedDevice on(gpu->device);
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", gpu->device);
  }
  for (const Pair& pair : pairs_) {
    const ScopedDevice on(pair.partner->device);
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", pair.partner->device);
  }
  for (const auto& gpu : gpus_) devices_.push_back(gpu->device);
  for (const Pair& pair : pairs_) devices_.push_back(pair.partner->device);
}

CudaBackend::~CudaBackend() = default;

CudaBackend::Gpu& CudaBackend::gpu_of_layer(int il) const {
  const int g = layer_gpu_.at(static_cast<size_t>(il));
  if (g < 0) throw Error("cuda: layer " + std::to_string(il) + " was placed on no GPU");
  return *gpus_[static_cast<size_t>(g)];
}

void CudaBackend::fill_layers(CudaSession& session) const {
  session.layers_.clear();
  session.layers_.reserve(static_cast<size_t>(n_layer_));
  for (int il = 0; il < n_layer_; ++il) {
    const ScopedDevice scope(gpu_of_layer(il).device);
    session.layers_.push_back(attn_[static_cast<size_t>(il)]->new_state(session.n_ctx_, nullptr));
  }
}

std::unique_ptr<backend::Session> CudaBackend::new_session(int64_t n_ctx) const {
  if (n_ctx < 1) throw Error("new session: a context of " + std::to_string(n_ctx) + " tokens");
  if (n_ctx > max_ctx_)
    throw Error("new session: a context of " + std::to_string(n_ctx) + " tokens exceeds the " +
                std::to_string(max_ctx_) + " the GPUs were placed for");
  std::unique_ptr<CudaSession> session(new CudaSession(*this, n_ctx));
  fill_layers(*session);
  return session;
}

bool CudaBackend::owns(const backend::Session& session) const {
  const auto* s = dynamic_cast<const CudaSession*>(&session);
  return s && s->backend_ == this;
}

void CudaBackend::set_prefill_chunk(int n) {
  if (n < 1) throw Error("prefill chunk: " + std::to_string(n) + " tokens");
  chunk_ = n;
}

CudaSession& CudaBackend::session_of(const backend::Part& part, size_t index) const {
  if (!part.session) throw Error("eval: part " + std::to_string(index) + " has no session");
  auto* s = dynamic_cast<CudaSession*>(part.session);
  if (!s || s->backend_ != this)
    throw Error("eval: the session of part " + std::to_string(index) + " belongs to another backend");
  return *s;
}

void CudaBackend::check(const CudaSession& session, std::span<const int32_t> tokens) const {
  if (!session.consistent_)
    throw Error("eval: the session was left incomplete by a cancelled evaluation; restore a snapshot first");
  backend::check_tokens(tokens, n_vocab_, static_cast<int64_t>(session.tokens_.size()), session.n_ctx_);
}

void CudaBackend::eval(std::span<const backend::Part> parts, backend::LayerRange range) {
  const int end = backend::check_range(parts, range, n_layer_);
  std::vector<CudaSession*> sessions;
  std::vector<int32_t> tokens;
  std::vector<TokenPlace> places;
  for (size_t p = 0; p < parts.size(); ++p) {
    CudaSession& s = session_of(parts[p], p);
    for (const CudaSession* q : sessions)
      if (q == &s) throw Error("eval: two parts name the same session");
    check(s, parts[p].tokens);
    sessions.push_back(&s);
    // The parts flattened in order: a session's tokens stay together and in
    // position order, which is all the layers need.
    for (size_t i = 0; i < parts[p].tokens.size(); ++i) {
      tokens.push_back(parts[p].tokens[i]);
      places.push_back({p, static_cast<int64_t>(s.tokens_.size() + i), static_cast<int64_t>(i)});
    }
  }
  progress_done_ = 0;
  progress_total_ = static_cast<int64_t>(tokens.size()) * (end - range.begin);
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(chunk_)) {
    const size_t m = std::min(tokens.size() - at, static_cast<size_t>(chunk_));
    eval_chunk(parts, sessions, std::span<const int32_t>(tokens).subspan(at, m),
               std::span<const TokenPlace>(places).subspan(at, m), range.begin, end, range.end < 0);
  }
}

void CudaBackend::eval_chunk(std::span<const backend::Part> parts, std::span<CudaSession* const> sessions,
                             std::span<const int32_t> tokens, std::span<const TokenPlace> places, int begin, int end,
                             bool head) {
  const auto m = static_cast<int64_t>(tokens.size());
  const auto hd = static_cast<size_t>(hc_dim_);
  Gpu* gpu = &gpu_of_layer(begin);
  const ScopedDevice scope(gpu->device);
  profile_.start(devices_);
  auto b = std::make_unique<ChunkBuffers>(m, hc_dim_, n_embd_);
  if (begin == 0) {
    // Every stream starts as the token's embedding row.
    const uint64_t row_bytes = token_embd_.matrix_bytes / static_cast<uint64_t>(token_embd_.rows);
    for (int64_t t = 0; t < m; ++t)
      dequantize(token_embd_.type, token_embd_.data.as<const uint8_t>() + tokens[static_cast<size_t>(t)] * row_bytes,
                 b->H() + t * hc_dim_, DequantTo::F32, n_embd_, nullptr);
    for (int stream = 1; stream < kHcStreams; ++stream)
      cuda_check(cudaMemcpy2DAsync(b->H() + stream * n_embd_, hd * 4, b->H(), hd * 4, static_cast<size_t>(n_embd_) * 4,
                                   static_cast<size_t>(m), cudaMemcpyDeviceToDevice, nullptr),
                 "cudaMemcpy2DAsync", gpu->device);
  } else {
    std::vector<float> hidden(static_cast<size_t>(m) * hd);
    for (int64_t t = 0; t < m; ++t) {
      const TokenPlace& place = places[static_cast<size_t>(t)];
      std::copy_n(parts[place.part].hidden_in + static_cast<size_t>(place.index) * hd, hd,
                  hidden.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(t) * hd));
    }
    b->h[0].upload(hidden.data(), hidden.size() * 4);
  }
  profile_.mark("input", devices_);
  std::vector<DeviceLayerKv*> states(static_cast<size_t>(m));
  std::vector<int64_t> pos(static_cast<size_t>(m));
  std::vector<std::unique_ptr<PairBuffers>> pair_buffers(pairs_.size());
  for (int64_t t = 0; t < m; ++t) pos[static_cast<size_t>(t)] = places[static_cast<size_t>(t)].pos;
  for (int il = begin; il < end; ++il) {
    Gpu& layer_gpu = gpu_of_layer(il);
    if (&layer_gpu != gpu) {
      // The next GPU's layers: the HC states move over.
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", gpu->device);
      const int from = gpu->device;
      gpu = &layer_gpu;
      cuda_check(cudaSetDevice(gpu->device), "cudaSetDevice", gpu->device);
      auto moved = std::make_unique<ChunkBuffers>(m, hc_dim_, n_embd_);
      cuda_check(cudaMemcpyPeer(moved->H(), gpu->device, b->H(), from, static_cast<size_t>(m) * hd * 4),
                 "cudaMemcpyPeer", gpu->device);
      b = std::move(moved);
      profile_.mark("handoff", devices_);
    }
    const size_t l = static_cast<size_t>(il);
    for (int64_t t = 0; t < m; ++t)
      states[static_cast<size_t>(t)] = &sessions[places[static_cast<size_t>(t)].part]->layers_[l];
    hc_pre(*b, m, hc_attn_[l], *gpu);
    profile_.mark("hc", devices_);
    attn_[l]->forward_tokens(b->x.as<float>(), m, states, pos, b->f.as<float>(), *gpu->products);
    profile_.mark("attention", devices_);
    hc_post(*b, m);
    hc_pre(*b, m, hc_ffn_[l], *gpu);
    profile_.mark("hc", devices_);
    moe(il, *b, tokens, *gpu, pair_buffers);
    hc_post(*b, m);
    profile_.mark("hc", devices_);
    if (progress_) {
      progress_done_ += m;
      if (!progress_(progress_done_, progress_total_)) {
        for (CudaSession* s : sessions) s->consistent_ = false;
        throw Cancelled("evaluation cancelled");
      }
    }
  }
  finish_chunk(parts, sessions, tokens, places, *b, head);
  profile_.mark("head", devices_);
}

// A part's tokens are one run of the chunk: the rows that want logits go
// through the head, the sessions take their tokens (and a range short of the
// head hands its hidden states out).
void CudaBackend::finish_chunk(std::span<const backend::Part> parts, std::span<CudaSession* const> sessions,
                               std::span<const int32_t> tokens, std::span<const TokenPlace> places,
                               const ChunkBuffers& b, bool head) {
  const auto hd = static_cast<size_t>(hc_dim_), nv = static_cast<size_t>(n_vocab_);
  const size_t n = tokens.size();
  std::vector<float> hidden;
  if (!head) {
    hidden.resize(n * hd);
    b.h[b.cur].download(hidden.data(), hidden.size() * 4);
  }
  for (size_t a = 0; a < n;) {
    size_t e = a + 1;
    while (e < n && places[e].part == places[a].part) ++e;
    const backend::Part& part = parts[places[a].part];
    CudaSession& s = *sessions[places[a].part];
    const bool holds_last = places[e - 1].index + 1 == static_cast<int64_t>(part.tokens.size());
    if (!head) {
      std::copy_n(hidden.begin() + static_cast<ptrdiff_t>(a * hd), (e - a) * hd,
                  part.hidden_out + static_cast<size_t>(places[a].index) * hd);
      s.logits_.clear();
    } else if (part.all_logits) {
      float* rows = part.all_logits + static_cast<size_t>(places[a].index) * nv;
      head_rows(b.H() + static_cast<int64_t>(a) * hc_dim_, static_cast<int64_t>(e - a), rows);
      if (holds_last) s.logits_.assign(rows + (e - a - 1) * nv, rows + (e - a) * nv);
    } else if (holds_last && part.skip_logits) {
      s.logits_.clear();
    } else if (holds_last) {
      s.logits_.resize(nv);
      head_rows(b.H() + static_cast<int64_t>(e - 1) * hc_dim_, 1, s.logits_.data());
    }
    s.tokens_.insert(s.tokens_.end(), tokens.begin() + static_cast<ptrdiff_t>(a),
                     tokens.begin() + static_cast<ptrdiff_t>(e));
    a = e;
  }
}

void CudaBackend::moe(int il, ChunkBuffers& b, std::span<const int32_t> tokens, Gpu& gpu,
                      std::vector<std::unique_ptr<PairBuffers>>& pair_buffers) {
  const auto l = static_cast<size_t>(il);
  const auto m = static_cast<int64_t>(tokens.size());
  const DeviceMoeLayer& home = *moe_[l];
  const int p = layer_pair_[l];
  if (p < 0) {
    home.forward(b.x.as<float>(), tokens.data(), m, b.f.as<float>(), *gpu.products);
    profile_.mark("moe", devices_);
    return;
  }
  Pair& pair = pairs_[static_cast<size_t>(p)];
  Gpu& partner = *pair.partner;
  auto& buffers = pair_buffers[static_cast<size_t>(p)];
  if (!buffers) buffers = std::make_unique<PairBuffers>(m, n_embd_, home.n_used(), gpu.device, partner.device);
  PairBuffers& pb = *buffers;
  // The home routes; its normed input and routing go to the partner; each
  // evaluates its experts (the home its shared expert too); the partner's
  // part is added onto the home's.
  home.route(b.x.as<float>(), tokens.data(), m, PairBuffers::xn(pb.home_in), pb.ids(pb.home_in), pb.weights(pb.home_in),
             *gpu.products);
  pair.link->to_partner(pb.home_in.data(), pb.partner_in.data(), pb.home_in.size(), gpu.products->stream(),
                        partner.products->stream());
  home.experts(PairBuffers::xn(pb.home_in), pb.ids(pb.home_in), pb.weights(pb.home_in), m, b.f.as<float>(),
               *gpu.products);
  {
    const ScopedDevice on(partner.device);
    partner_moe_[l]->experts(PairBuffers::xn(pb.partner_in), pb.ids(pb.partner_in), pb.weights(pb.partner_in), m,
                             pb.partner_out.as<float>(), *partner.products);
  }
  pair.link->add_partner_part(b.f.as<float>(), pb.partner_out.as<float>(), static_cast<size_t>(pb.floats),
                              gpu.products->stream(), partner.products->stream());
}

void CudaBackend::hc_pre(ChunkBuffers& b, int64_t m, const HcWeights& w, Gpu& gpu) {
  rms_norm_rows(b.H(), nullptr, b.flat.as<float>(), m, hc_dim_, rms_eps_, numerics_, nullptr);
  gpu.products->run(w.fn, 0, b.flat.as<float>(), m, b.mix.as<float>(), kHcMixes);
  hc_split_rows(b.mix.as<float>(), w.scale.as<float>(), w.base.as<float>(), hc_eps_, sinkhorn_iters_, b.pre.as<float>(),
                b.post.as<float>(), b.comb.as<float>(), m, numerics_, nullptr);
  hc_weighted_sum_rows(b.H(), b.pre.as<float>(), b.x.as<float>(), m, n_embd_, numerics_, nullptr);
}

void CudaBackend::hc_post(ChunkBuffers& b, int64_t m) {
  hc_post_rows(b.f.as<float>(), b.H(), b.post.as<float>(), b.comb.as<float>(), b.next_H(), m, n_embd_, numerics_,
               nullptr);
  b.cur = 1 - b.cur;
}

void CudaBackend::head_rows(const float* H, int64_t g, float* logits_host) {
  Gpu& gpu = gpu_of_layer(n_layer_ - 1);
  const ScopedDevice scope(gpu.device);
  const DeviceBuffer flat = step_buffer(g * hc_dim_), mix = step_buffer(g * kHcStreams),
                     weights = step_buffer(g * kHcStreams), x = step_buffer(g * n_embd_),
                     logits = step_buffer(g * n_vocab_);
  const auto numerics = numerics_;
  rms_norm_rows(H, nullptr, flat.as<float>(), g, hc_dim_, rms_eps_, numerics, nullptr);
  gpu.products->run(hc_head_.fn, 0, flat.as<float>(), g, mix.as<float>(), kHcStreams);
  hc_head_weights_rows(mix.as<float>(), hc_head_.scale.as<float>(), hc_head_.base.as<float>(), hc_eps_,
                       weights.as<float>(), g, numerics, nullptr);
  hc_weighted_sum_rows(H, weights.as<float>(), x.as<float>(), g, n_embd_, numerics, nullptr);
  rms_norm_rows(x.as<float>(), output_norm_.as<float>(), x.as<float>(), g, n_embd_, rms_eps_, numerics, nullptr);
  gpu.products->run(output_, 0, x.as<float>(), g, logits.as<float>(), n_vocab_);
  logits.download(logits_host, static_cast<size_t>(g * n_vocab_) * 4);
}

void CudaBackend::eval_head(const float* hidden, int64_t n, float* logits) {
  if (n <= 0) return;
  const ScopedDevice scope(gpu_of_layer(n_layer_ - 1).device);
  DeviceBuffer H(static_cast<size_t>(n) * static_cast<size_t>(hc_dim_) * 4);
  H.upload(hidden, H.size());
  head_rows(H.as<float>(), n, logits);
}

// ---- state through the CPU's format ----

cpu::Session CudaBackend::to_cpu(const CudaSession& session) const {
  if (session.backend_ != this) throw Error("cuda: the session belongs to another backend");
  if (!session.consistent_) throw Error("cuda: the session was left incomplete by a cancelled evaluation");
  cpu::Session out(*model_, numerics_, session.n_ctx_);
  for (int il = 0; il < n_layer_; ++il) {
    const ScopedDevice scope(gpu_of_layer(il).device);
    session.layers_[static_cast<size_t>(il)].save(out.layers()[static_cast<size_t>(il)]);
  }
  out.mutable_tokens() = session.tokens_;
  out.mutable_logits() = session.logits_;
  return out;
}

void CudaBackend::from_cpu(const cpu::Session& in, CudaSession& session) const {
  if (session.backend_ != this) throw Error("cuda: the session belongs to another backend");
  if (&in.model() != model_ || in.numerics() != numerics_)
    throw Error("cuda: the state belongs to another model or numerics");
  if (in.size() > session.n_ctx_)
    throw Error("cuda: " + std::to_string(in.size()) + " tokens do not fit the context of " +
                std::to_string(session.n_ctx_));
  for (int il = 0; il < n_layer_; ++il) {  // checked before anything changes
    const cpu::LayerKvState& layer = in.layers()[static_cast<size_t>(il)];
    const int64_t room = session.layers_[static_cast<size_t>(il)].capacity();
    if (layer.n_compressed() > room || layer.n_index() > room)
      throw Error("cuda: layer " + std::to_string(il) + " holds " + std::to_string(layer.n_compressed()) +
                  " compressed rows, more than this context has room for (" + std::to_string(room) + ")");
  }
  for (int il = 0; il < n_layer_; ++il) {
    const ScopedDevice scope(gpu_of_layer(il).device);
    session.layers_[static_cast<size_t>(il)].load(in.layers()[static_cast<size_t>(il)], nullptr);
  }
  session.tokens_.assign(in.tokens().begin(), in.tokens().end());
  session.logits_.assign(in.logits().begin(), in.logits().end());
  session.consistent_ = true;
}

namespace {
const CudaSession& cuda_session(const backend::Session& session, const char* what) {
  const auto* s = dynamic_cast<const CudaSession*>(&session);
  if (!s) throw Error(std::string(what) + ": the session belongs to another backend");
  return *s;
}
CudaSession& cuda_session(backend::Session& session, const char* what) {
  auto* s = dynamic_cast<CudaSession*>(&session);
  if (!s) throw Error(std::string(what) + ": the session belongs to another backend");
  return *s;
}
}  // namespace

std::vector<uint8_t> CudaBackend::save_state(const backend::Session& session) const {
  return cpu::serialize_payload(to_cpu(cuda_session(session, "save state")), chunk_);
}

void CudaBackend::load_state(std::span<const uint8_t> payload, backend::Session& session) const {
  CudaSession& s = cuda_session(session, "load state");
  cpu::Session state(*model_, numerics_, s.n_ctx_);
  cpu::deserialize_payload(payload, state);
  from_cpu(state, s);
}

std::vector<uint8_t> CudaBackend::save_layers(const backend::Session& session, backend::LayerRange range) const {
  return cpu::serialize_layers(to_cpu(cuda_session(session, "save layers")), range);
}

void CudaBackend::load_layers(std::span<const uint8_t> state, backend::Session& session,
                              backend::LayerRange range) const {
  CudaSession& s = cuda_session(session, "load layers");
  cpu::Session current = to_cpu(s);
  cpu::deserialize_layers(state, current, range);
  from_cpu(current, s);
}

void CudaBackend::save_session_file(const std::string& path, const backend::Session& session) const {
  cpu::save_session_file(path, to_cpu(cuda_session(session, path.c_str())), chunk_);
}

void CudaBackend::load_session_file(const std::string& path, backend::Session& session) const {
  CudaSession& s = cuda_session(session, path.c_str());
  cpu::Session state(*model_, numerics_, s.n_ctx_);
  cpu::load_session_file(path, state);
  from_cpu(state, s);
}

}  // namespace ds4::cuda
