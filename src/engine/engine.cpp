#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "backend/cpu/expert_cache.h"
#include "backend/cpu/forward.h"
#include "backend/cpu/kv_rows.h"
#include "backend/gpu_placement.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/memory_available.h"
#include "core/thread_pool.h"
#include "dist/curve_key.h"
#include "dist/mpi_collective.h"
#include "dist/mpi_transport.h"
#include "dist/pipeline_backend.h"
#include "dist/tensor_parallel.h"
#include "dist/zmq_transport.h"
#include "model/deepseek4_fingerprint.h"
#include "model/deepseek4_memory.h"
#include "model/deepseek4_model.h"
#include "quant/dot.h"
#include "runtime/sampler.h"
#include "text/chat_tokens.h"
#include "text/tokenizer.h"

#if DS4_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_devices.h"
#endif

namespace ds4::engine {

namespace {

// The cache's size: the slots or bytes asked for, else what the memory
// available to this process (`mem`, read before the model was opened) leaves
// after the resident weights, with a quarter
// of it kept for KV, scratch and the page cache of the resident weights'
// first reads. ds4::Error when that leaves no expert.
cpu::ExpertCacheOptions expert_cache_options(const EngineOptions &o, const model::Deepseek4Model &model,
                                             const MemoryAvailable &mem) {
  cpu::ExpertCacheOptions c;
  if (o.ssd_cache_slots > 0) {
    c.slots = o.ssd_cache_slots;
    return c;
  }
  if (o.ssd_cache_bytes > 0) {
    c.budget_bytes = o.ssd_cache_bytes;
    return c;
  }
  const uint64_t resident = model.file().file_size() - model.routed_expert_bytes();
  const uint64_t available = mem.bytes();
  const uint64_t left = available > resident ? (available - resident) / 4 * 3 : 0;
  const uint64_t slot = cpu::ExpertCache::slot_bytes(model);
  if (left < slot) {
    throw Error("--ssd-streaming: no memory left for the expert cache: " + format_size(available) + " available" +
                (mem.cgroup.empty() ? std::string() : " (cgroup " + mem.cgroup + ")") + ", the resident weights take " +
                format_size(resident) + ", one expert " + format_size(slot) +
                "; free memory or give --ssd-streaming-cache-experts N");
  }
  c.budget_bytes = left;
  return c;
}

// --backend cuda: the GPUs named, placed and loaded (ds4::Error naming
// what stands in the way: a build without CUDA, options only the CPU
// backend has, no usable GPU, a layout that does not fit).
std::unique_ptr<backend::Backend> cuda_backend(const EngineOptions& options, const model::Deepseek4Model& model) {
  const char* cpu_only = options.ssd_streaming          ? "--ssd-streaming"
                         : !options.dist_listen.empty() ? "--dist-listen"
                         : options.dist_mpi != nullptr  ? "--dist mpi"
                                                        : nullptr;
  if (cpu_only) throw Error(std::string("--backend cuda: ") + cpu_only + " runs on the CPU backend only");
#if DS4_WITH_CUDA
  cuda::CudaBackendOptions o;
  const cuda::GpuList gpus = cuda::list_gpus();
  if (gpus.devices.empty()) throw Error("--backend cuda: " + gpus.unavailable);
  if (!options.gpu_devices.empty() || options.gpu_tensor_parallel)
    o.devices = backend::parse_gpu_devices(options.gpu_devices.empty() ? "all" : options.gpu_devices,
                                           static_cast<int>(gpus.devices.size()));
  o.tensor_parallel = options.gpu_tensor_parallel;
  if (options.gpu_prefill != "int8" && options.gpu_prefill != "f16")
    throw Error("--gpu-prefill: \"" + options.gpu_prefill + "\" is neither int8 nor f16");
  o.prefill = options.gpu_prefill == "int8" ? cuda::PrefillProducts::Int8TensorCores : cuda::PrefillProducts::Cublas;
  if (!options.gpu_vram.empty()) o.vram = backend::parse_gpu_vram(options.gpu_vram);
  o.max_ctx = options.gpu_ctx;
  auto cuda = std::make_unique<cuda::CudaBackend>(model, options.numerics, o);
  cuda->set_prefill_chunk(options.prefill_chunk);
  for (const backend::GpuShare& share : cuda->placement())
    std::fprintf(stderr, "cuda: %s\n", backend::describe(share).c_str());
  return cuda;
#else
  (void)model;
  throw Error("--backend cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
#endif
}

}  // namespace

Engine::Engine(const EngineOptions &options) : options_(options) {
  if (options.dist_tensor_parallel && (options.mlock || options.warm_weights || options.huge_pages))
    throw Error(std::string(options.mlock ? "--mlock" : options.warm_weights ? "--warm-weights" : "--huge-pages") +
                " with --tensor-parallel: every rank would read the whole file, and each needs only its share of "
                "the experts (the pages it touches)");
  // Before the model is opened: the resident weights it locks are charged
  // to the cgroup, and the budget subtracts them itself.
  const MemoryAvailable memory = options.ssd_streaming ? memory_available() : MemoryAvailable{};
  model::LoadOptions load;
  load.mlock = options.mlock;
  load.warm = options.warm_weights;
  load.huge_pages = options.huge_pages;
  load.stream_routed_experts = options.ssd_streaming;
  const bool coordinator = !options.dist_listen.empty() || (options.dist_mpi != nullptr && !options.dist_tensor_parallel);
  load.partial_shards = options.partial_shards || coordinator;
  model_ = std::make_unique<model::Deepseek4Model>(model::Deepseek4Model::open(options.model_path, load));
  if (options.ssd_streaming && !model_->file().missing_shards().empty())
    throw Error("--ssd-streaming: " + options.model_path + " lacks shards of its set; stream from a whole shard set");
  const model::Deepseek4HParams &hp = model_->hparams();
  if (!model_->file().find("tokenizer.ggml.tokens")) {
    tokenizer_problem_ = options.model_path + " has no tokenizer (token ids only)";
  } else {
    auto tokenizer = std::make_unique<text::Tokenizer>(text::Tokenizer::from_gguf(model_->file()));
    if (tokenizer->vocab_size() == hp.n_vocab)
      tokenizer_ = std::move(tokenizer);
    else
      tokenizer_problem_ = options.model_path + ": the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                           " tokens but the model " + std::to_string(hp.n_vocab);
  }
  pool_ = std::make_unique<ThreadPool>(options.threads);
  if (options.backend == "cuda") {
    backend_ = cuda_backend(options, *model_);
  } else if (options.backend != "cpu") {
    throw Error("--backend " + options.backend + ": the backends are cpu and cuda");
  } else {
    start_cpu_backend(options, memory);
  }
  set_facts(options);
}

void Engine::start_cpu_backend(const EngineOptions& options, const MemoryAvailable& memory) {
  auto cpu = std::make_unique<cpu::Forward>(*model_, options.numerics, pool_.get());
  cpu->set_prefill_chunk(options.prefill_chunk);
  if (options.ssd_streaming) {
    auto cache = std::make_unique<cpu::ExpertCache>(*model_, expert_cache_options(options, *model_, memory));
    if (!options.ssd_hotlist.empty() && !options.ssd_cold) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<backend::ExpertUse> hot = backend::read_hot_list(options.ssd_hotlist);
      const size_t n = cache->preload(hot);
      std::fprintf(stderr, "expert streaming: %zu experts of %zu in %s read into the cache in %.2f s\n", n, hot.size(),
                   options.ssd_hotlist.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    expert_cache_ = cache.get();
    cpu->set_expert_source(std::move(cache));
  }
  cpu_ = cpu.get();
  if (options.dist_tensor_parallel) {
    start_tensor_parallel(std::move(cpu));
  } else if (options.dist_listen.empty() && options.dist_mpi == nullptr) {
    backend_ = std::move(cpu);
  } else {
    start_coordinator(std::move(cpu));
  }
}

void Engine::set_facts(const EngineOptions& options) {
  const model::Deepseek4HParams& hp = model_->hparams();
  facts_.name = hp.name;
  facts_.n_vocab = hp.n_vocab;
  facts_.n_layer = hp.n_layer;
  facts_.n_ctx_train = static_cast<int64_t>(hp.n_ctx_train);
  facts_.file_bytes = model_->file().file_size();
  facts_.locked_bytes = model_->locked_bytes();
  facts_.huge_page_bytes = model_->huge_page_bytes();
  facts_.decode_weight_bytes_per_token = model::decode_weight_bytes_per_token(model_->weights(), hp);
  if (const auto eos = model_->file().find_u32("tokenizer.ggml.eos_token_id"); eos && *eos < hp.n_vocab)
    facts_.eos = static_cast<int32_t>(*eos);
  facts_.add_bos = model_->file().find_bool("tokenizer.ggml.add_bos_token").value_or(false);
  facts_.kernel_isa = quant::dot_kernels().isa;
  facts_.streamed_bytes = options.ssd_streaming ? model_->routed_expert_bytes() : 0;
  facts_.resident_bytes = facts_.file_bytes - facts_.streamed_bytes;
}

void Engine::start_coordinator(std::unique_ptr<cpu::Forward> local) {
  const EngineOptions &o = options_;
  if (o.dist_mpi == nullptr && o.dist_key.empty())
    throw Error("--dist-listen needs --dist-key FILE (make one with ds4-worker --gen-key FILE)");
  const int n_layer = static_cast<int>(model_->hparams().n_layer);
  if (o.dist_first_remote < 1 || o.dist_first_remote >= n_layer)
    throw Error("--layers 0:" + std::to_string(o.dist_first_remote) + ": the coordinator keeps layers 0:N with 1 <= N < " +
                std::to_string(n_layer) + " (the workers serve N:output)");
  if (o.dist_activation_bits != 32 && o.dist_activation_bits != 16)
    throw Error("--dist-activation-bits must be 32 or 16, not " + std::to_string(o.dist_activation_bits));
  model::require_present(model_->weights(), model_->file(), 0, static_cast<uint32_t>(o.dist_first_remote), true, false,
                         "the coordinator (layers 0:" + std::to_string(o.dist_first_remote) + ")");
  dist::CoordinatorOptions co;
  co.log = [](const std::string &line) { std::fprintf(stderr, "dist: %s\n", line.c_str()); };
  co.forward_between_workers = !o.dist_no_forward;
  std::unique_ptr<dist::Hub> hub = o.dist_mpi != nullptr
                                       ? dist::make_mpi_hub(*o.dist_mpi)
                                       : dist::make_zmq_hub(dist::zmq_endpoint(o.dist_listen), dist::read_curve_key(o.dist_key));
  std::fprintf(stderr, "dist: coordinator on %s; layers 0:%d here, workers serve %d:output\n", hub->describe().c_str(),
               o.dist_first_remote, o.dist_first_remote);
  coordinator_ = std::make_unique<dist::Coordinator>(
      std::move(hub), dist::expectation_for(*local, model::fingerprint(*model_), o.dist_ctx, o.dist_first_remote),
      std::move(co));
  dist::PipelineOptions po;
  po.first_remote = o.dist_first_remote;
  po.wave_tokens = o.dist_wave_tokens;
  po.window = o.dist_window;
  po.bits = o.dist_activation_bits == 16 ? dist::HiddenBits::F16 : dist::HiddenBits::F32;
  local_ = std::move(local);
  backend_ = std::make_unique<dist::PipelineBackend>(*local_, *coordinator_, po);
}

void Engine::start_tensor_parallel(std::unique_ptr<cpu::Forward> local) {
  const EngineOptions &o = options_;
  if (o.dist_mpi == nullptr) throw Error("--tensor-parallel runs under mpirun with --dist mpi");
  collective_ = dist::make_mpi_collective(*o.dist_mpi);
  local->set_tensor_split(collective_.get());
  local_ = std::move(local);
  if (collective_->rank() == 0) backend_ = std::make_unique<dist::TensorParallelBackend>(*local_, *collective_);
}

void Engine::follow_tensor_parallel() {
  if (!collective_ || collective_->rank() == 0)
    throw Error("follow_tensor_parallel: only the ranks after 0 of --tensor-parallel follow");
  dist::follow_tensor_parallel(*local_, *collective_);
}

std::array<uint8_t, 32> Engine::fingerprint() const { return model::fingerprint(*model_); }

void Engine::require_stage(int begin, int end) const {
  const auto n_layer = model_->hparams().n_layer;
  const uint32_t last = end < 0 ? n_layer : static_cast<uint32_t>(end);
  model::require_present(model_->weights(), model_->file(), static_cast<uint32_t>(begin), last, false, end < 0,
                         "--layers " + std::to_string(begin) + ":" + (end < 0 ? "output" : std::to_string(end)));
}

std::optional<dist::RouteStatus> Engine::route() const {
  if (!coordinator_) return std::nullopt;
  return coordinator_->route();
}

bool Engine::wait_for_route(std::chrono::milliseconds timeout) const {
  return !coordinator_ || coordinator_->wait_for_route(timeout);
}

std::vector<backend::ExpertUse> Engine::expert_usage() const {
  if (!cpu_)
    throw Error("expert usage: counted by the CPU backend only (this engine runs on --backend " + options_.backend +
                ")");
  return backend::rank_expert_usage(cpu_->expert_usage());
}

StreamingStats Engine::streaming_stats() const {
  StreamingStats out;
  if (expert_cache_ == nullptr) return out;
  const cpu::ExpertCacheStats st = expert_cache_->stats();
  out.slots = st.slots;
  out.slot_bytes = st.slot_bytes;
  out.locked_bytes = st.locked_bytes;
  out.hits = st.hits;
  out.misses = st.misses;
  out.prefetched = st.prefetched;
  out.prefetch_hits = st.prefetch_hits;
  out.prefetch_unused = st.prefetch_unused;
  out.bytes_read = st.bytes_read;
  out.read_seconds = st.read_seconds;
  out.direct_io = st.direct_io;
  out.io_uring = st.io_uring;
  return out;
}

double Engine::measure_expert_read_rate(uint64_t bytes) {
  if (expert_cache_ == nullptr) return 0;
  const uint64_t slot = expert_cache_->stats().slot_bytes;
  const auto n = static_cast<int64_t>(std::max<uint64_t>(8, bytes / std::max<uint64_t>(1, slot)));
  return expert_cache_->measure_read_rate(n, 0x5eed);
}

const text::Tokenizer &Engine::tokenizer() const {
  if (!tokenizer_) throw Error(tokenizer_problem_);
  return *tokenizer_;
}

Engine::~Engine() = default;

std::unique_ptr<backend::Session> Engine::new_session(int64_t n_ctx) const { return backend_->new_session(n_ctx); }

std::vector<int32_t> Engine::tokenize(std::string_view text) const { return tokenizer().encode(text, true); }

Prompt Engine::render(const nlohmann::ordered_json &messages, const nlohmann::ordered_json &tools,
                      const text::RenderOptions &options) const {
  const text::RenderedChat chat = text::render_chat(messages, tools, options);
  Prompt p;
  p.text = chat.text();
  p.tokens = text::tokenize_segments(chat, tokenizer());
  return p;
}

void Engine::prefill(backend::Session &session, std::span<const int32_t> tokens,
                     const std::function<bool(int64_t done, int64_t total)> &progress) {
  if (progress) {
    // The backend counts token-layers; the caller sees prompt tokens.
    const int64_t layers = std::max<int64_t>(1, facts_.n_layer);
    const auto n = static_cast<int64_t>(tokens.size());
    backend_->set_progress([progress, layers, n](int64_t done, int64_t) { return progress(done / layers, n); });
  }
  try {
    backend_->eval(session, tokens);
  } catch (...) {
    backend_->set_progress(nullptr);
    throw;
  }
  backend_->set_progress(nullptr);
}

runtime::GenerateResult Engine::run(backend::Session &session, std::span<const int32_t> prompt,
                                    runtime::Sampler &sampler, const runtime::GenerateLimits &limits,
                                    const JobCallbacks &callbacks) {
  if (!prompt.empty()) {
    const std::unique_ptr<backend::Session> before = session.snapshot();
    try {
      prefill(session, prompt, callbacks.progress);
    } catch (const Cancelled &) {
      session.restore(*before);
      runtime::GenerateResult r;
      r.reason = runtime::StopReason::Cancelled;
      if (callbacks.done) callbacks.done(r);
      return r;
    }
  }
  runtime::GenerateHooks hooks;
  hooks.cancelled = callbacks.cancelled;
  hooks.on_token = callbacks.on_token;
  runtime::GenerateResult r = runtime::generate(*backend_, session, tokenizer(), sampler, limits, hooks);
  if (callbacks.done) callbacks.done(r);
  return r;
}

std::shared_ptr<JobHandle> Engine::submit(backend::Session &session, std::vector<int32_t> prompt,
                                          runtime::Sampler &sampler, const runtime::GenerateLimits &limits,
                                          JobCallbacks callbacks) {
  const text::Tokenizer &tok = tokenizer();
  Scheduler *scheduler = nullptr;
  {
    std::lock_guard lock(scheduler_mutex_);
    if (!scheduler_) {
      if (options_.max_jobs < 1) throw Error("engine: max_jobs must be at least 1");
      SchedulerOptions so;
      so.max_running = static_cast<size_t>(options_.max_jobs);
      so.queue_max = 1024;
      scheduler_ = std::make_unique<Scheduler>(*backend_, std::move(so));
    }
    scheduler = scheduler_.get();
  }
  auto handle = std::make_shared<JobHandle>();
  auto job = std::make_shared<SubmittedJob>(session, std::move(prompt), tok, sampler, limits, std::move(callbacks),
                                            handle);
  switch (scheduler->submit(std::move(job))) {
    case Scheduler::Submitted::Queued: return handle;
    case Scheduler::Submitted::Full: throw Error("engine: 1024 jobs wait already; submit later");
    case Scheduler::Submitted::Stopping: break;
  }
  throw Error("engine: shutting down");
}

void Engine::save_session(const std::string &path, const backend::Session &session) const {
  backend_->save_session_file(path, session);
}

void Engine::load_session(const std::string &path, backend::Session &session) const {
  backend_->load_session_file(path, session);
}

std::string Engine::memory_report(int64_t n_ctx) const {
  const model::Deepseek4HParams &hp = model_->hparams();
  const model::WeightBytes w = model::weight_bytes(model_->weights());
  const uint32_t elem = cpu::kv_elem_bytes(options_.numerics);
  const model::KvStateBytes kv = model::kv_state_bytes(hp, static_cast<uint64_t>(n_ctx), elem);
  const double per_token = model::kv_bytes_per_token(hp, elem);

  std::string out = "memory:\n";
  out += "  model file           " + format_bytes(facts_.file_bytes) + "\n";
  if (facts_.locked_bytes > 0) {
    out += "  locked in RAM        " + format_bytes(facts_.locked_bytes) +
           (options_.ssd_streaming ? " (the resident weights, --ssd-streaming)\n" : " (--mlock)\n");
  }
  // The kernels stream weights faster from 2 MiB pages (--huge-pages).
  if (const uint64_t huge = model_->huge_page_bytes(); huge > 0)
    out += "  in 2 MiB pages       " + format_bytes(huge) + "\n";
  out += "  weights              " + format_bytes(w.total()) + " (routed experts " + format_bytes(w.routed()) +
         ", other " + format_bytes(w.non_routed()) + ")\n";
  if (expert_cache_ != nullptr) {
    const StreamingStats st = streaming_stats();
    out += "  expert cache         " + std::to_string(st.slots) + " experts of " + format_size(st.slot_bytes) + " = " +
           format_bytes(static_cast<uint64_t>(st.slots) * st.slot_bytes) +
           " (--ssd-streaming: routed experts read from the file on demand; " +
           (st.locked_bytes > 0 ? format_bytes(st.locked_bytes) + " locked in RAM)\n"
                                : std::string("in RAM, not locked: the locked-memory limit is too low)\n"));
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "  kv state per token   %.1f bytes (%s, compressed + indexer rows)\n", per_token,
                elem == 2 ? "f16" : "f32");
  out += buf;
  out += "  kv state for ctx " + std::to_string(n_ctx) + ": " + format_bytes(kv.total()) + "\n";
  out += "    raw window         " + format_bytes(kv.raw_window) + "\n";
  out += "    compressed         " + format_bytes(kv.compressed_attn) + "\n";
  out += "    indexer            " + format_bytes(kv.compressed_index) + "\n";
  out += "    frontiers          " + format_bytes(kv.frontiers) + "\n";
  out += "  weights + kv state   " + format_bytes(w.total() + kv.total()) + "\n";
  out += "threads " + std::to_string(options_.threads) + ", numerics " +
         (options_.numerics == backend::Numerics::Quality ? "quality" : "default") + ", ctx " + std::to_string(n_ctx) +
         " (n_ctx_train " + std::to_string(hp.n_ctx_train) + "), prefill chunk " +
         std::to_string(backend_->prefill_chunk()) + "\n";
  return out;
}

}  // namespace ds4::engine
