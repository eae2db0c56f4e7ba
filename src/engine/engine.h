// The facade every program uses (DESIGN.md "engine"): load a model file
// into a backend with its tokenizer, open sessions, render and tokenize
// chats, and run prefill + generation jobs with callbacks (progress, cancel,
// each token, done). ds4, ds4-server and ds4-bench go through it; nothing
// above it sees a tensor or a weight. The server's scheduler drives the same
// backend() for batched steps of many sessions.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/collective.h"
#include "backend/hot_list.h"
#include "dist/coordinator.h"
#include "engine/job.h"
#include "engine/scheduler.h"
#include "engine/streaming_stats.h"
#include "runtime/generate.h"
#include "text/chat_render.h"

namespace ds4 {
class ThreadPool;
struct MemoryAvailable;
}
namespace ds4::model {
class Deepseek4Model;
}
namespace ds4::text {
class Tokenizer;
}
namespace ds4::runtime {
class Sampler;
}

namespace ds4::dist {
class MpiRuntime;
}

namespace ds4::cpu {
class ExpertCache;
class Forward;
}

namespace ds4::engine {

inline constexpr int kDefaultPrefillChunk = 4096;

struct EngineOptions {
  std::string model_path;
  // How the weights are readied (model/deepseek4_model.h LoadOptions).
  bool mlock = false;
  bool warm_weights = false;
  bool huge_pages = false;
  backend::Numerics numerics = backend::Numerics::Default;
  int threads = 1;
  int prefill_chunk = kDefaultPrefillChunk;
  // Jobs Engine::submit runs at once (batched); more wait in its queue.
  int max_jobs = 8;
  // SSD expert streaming (--ssd-streaming): the routed experts in a RAM cache
  // filled from the file on demand, everything else resident. The cache holds
  // exactly ssd_cache_slots experts when > 0, else ssd_cache_bytes when > 0,
  // else what the memory available to the process leaves (MemAvailable and the
  // cgroup's limit, less the non-routed weights, with a quarter kept for KV
  // and scratch).
  bool ssd_streaming = false;
  int64_t ssd_cache_slots = 0;
  uint64_t ssd_cache_bytes = 0;
  // A hot list (backend/hot_list.h) read into the cache at start, most
  // selected first, until it is full; ssd_cold: start empty regardless.
  std::string ssd_hotlist;
  bool ssd_cold = false;
  // Pipeline parallel across processes (docs/distributed.md): with
  // dist_listen set this process is the coordinator. It evaluates layers
  // [0, dist_first_remote) and the workers that join with the cluster key
  // in dist_key evaluate the rest; every session's KV is split the same way.
  // The model may be a shard set with shards absent: a pipeline stage's
  // host keeps only the first shard (the metadata) and its own
  // (docs/model-files.md). Set for workers; a coordinator always allows it.
  // What the stage evaluates must be present (require_stage).
  bool partial_shards = false;
  std::string dist_listen;  // HOST:PORT
  std::string dist_key;     // key file (ds4-worker --gen-key)
  int dist_first_remote = 0;
  int64_t dist_ctx = 32768;       // the largest session; workers must hold as many tokens
  int dist_wave_tokens = 256;     // prompt tokens per wave in flight along the route
  int dist_window = 4;            // waves in flight
  int dist_activation_bits = 32;  // hidden states on the wire: 32 (exact) or 16
  bool dist_no_forward = false;   // workers never hand over to each other
  // --dist mpi --tensor-parallel: every rank of dist_mpi evaluates every
  // layer with its share of the weights (docs/distributed.md); rank 0's
  // backend serves, the others run follow_tensor_parallel().
  bool dist_tensor_parallel = false;
  // --dist mpi: rank 0's MPI (must outlive the engine); the coordinator talks
  // to the other ranks over it instead of listening with ZeroMQ.
  const dist::MpiRuntime *dist_mpi = nullptr;
  // --backend cpu | cuda. CUDA (backend/cuda/cuda_backend.h, builds where nvcc
  // was found): the GPUs of --gpu-devices ("0,1", "all"; empty: GPU 0) with
  // --gpu-vram ("auto" or GiB per GPU) each, whole layers per GPU with KV
  // state reserved for gpu_ctx tokens (the longest session then allowed).
  // gpu_tensor_parallel: the GPUs in pairs splitting each layer's routed
  // experts (homes first, then partners; empty gpu_devices: all GPUs).
  std::string backend = "cpu";
  std::string gpu_devices;
  std::string gpu_vram;
  int64_t gpu_ctx = 32768;
  bool gpu_tensor_parallel = false;
  // --gpu-prefill: "int8" (quantized weights' prefill products on the int8
  // tensor cores, exact to the CPU) or "f16" (dequantized, cuBLAS).
  std::string gpu_prefill = "int8";
};


// What programs print and check about the loaded model.
struct ModelFacts {
  std::string name;  // general.name, may be empty
  uint32_t n_vocab = 0;
  uint32_t n_layer = 0;
  int64_t n_ctx_train = 0;
  uint64_t file_bytes = 0;
  uint64_t locked_bytes = 0;     // --mlock
  uint64_t huge_page_bytes = 0;  // weights mapped in 2 MiB pages
  // Weight bytes one decode step reads (non-routed matrices, head, the
  // routed experts one token selects).
  uint64_t decode_weight_bytes_per_token = 0;
  // The file's EOS id (tokenizer.ggml.eos_token_id) when it names a token.
  std::optional<int32_t> eos;
  // Whether plain-text tokenization starts with BOS
  // (tokenizer.ggml.add_bos_token; when absent, llama.cpp's default for the
  // deepseek-v3 BPE tokenizer: no).
  bool add_bos = false;
  // The instruction set the dot kernels run at on this machine.
  std::string kernel_isa;
  // --ssd-streaming: bytes of routed experts (read from the file on demand)
  // and of the rest (resident); 0 / file size without it.
  uint64_t streamed_bytes = 0;
  uint64_t resident_bytes = 0;
};

// A rendered chat prompt: the text (as the official encoder writes it) and
// its tokens (template pieces with special tokens, content as plain text).
struct Prompt {
  std::string text;
  std::vector<int32_t> tokens;
};

class Engine {
 public:
  // Opens and validates the model file and readies the backend. ds4::Error
  // naming the file and the problem. A file without a tokenizer (or with one
  // that does not cover the model's vocabulary) still evaluates token ids;
  // tokenizer() then throws the reason.
  explicit Engine(const EngineOptions &options);
  ~Engine();
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  const EngineOptions &options() const { return options_; }
  const ModelFacts &facts() const { return facts_; }
  const text::Tokenizer &tokenizer() const;
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  backend::Backend &backend() { return *backend_; }
  const backend::Backend &backend() const { return *backend_; }

  // An empty session holding at most n_ctx tokens.
  std::unique_ptr<backend::Session> new_session(int64_t n_ctx) const;

  // Text as written, special-token literals recognised (no BOS added).
  std::vector<int32_t> tokenize(std::string_view text) const;
  // messages / tools as the OpenAI-style JSON the renderer takes.
  Prompt render(const nlohmann::ordered_json &messages, const nlohmann::ordered_json &tools,
                const text::RenderOptions &options) const;

  // Evaluates `tokens` after the session's tokens over every layer, with
  // progress (false cancels: ds4::Cancelled, the session left inconsistent
  // until restore() or reset()).
  void prefill(backend::Session &session, std::span<const int32_t> tokens,
               const std::function<bool(int64_t done, int64_t total)> &progress = {});

  // One job: prefill `prompt` after the session's tokens (may be empty when
  // the session already ends where generation starts), then generate with
  // `sampler` under `limits`, reporting through `callbacks`. A cancelled
  // prefill returns StopReason::Cancelled with nothing generated and the
  // session reset to where it was (restored from a snapshot).
  runtime::GenerateResult run(backend::Session &session, std::span<const int32_t> prompt, runtime::Sampler &sampler,
                              const runtime::GenerateLimits &limits, const JobCallbacks &callbacks);

  // Queues a job like run()'s, run by the engine's scheduler beside the
  // other submitted jobs: every step evaluates the next token of each
  // generating job and pieces of the prompts being prefilled in one batched
  // evaluation (each session ends exactly as running it alone). Callbacks
  // run on the scheduler's thread. The session, sampler and everything the
  // callbacks use must stay alive and untouched until the job is done; a
  // session belongs to one job at a time. While submitted jobs run, the
  // caller must not evaluate on this engine itself (prefill, run). ds4::Error
  // when the queue is full or there is no tokenizer.
  std::shared_ptr<JobHandle> submit(backend::Session &session, std::vector<int32_t> prompt, runtime::Sampler &sampler,
                                    const runtime::GenerateLimits &limits, JobCallbacks callbacks = {});

  // The expert cache's counters so far (--ssd-streaming; zeros without).
  StreamingStats streaming_stats() const;
  // The file's read rate (bytes/s) through the expert cache's own reads (its
  // queue depth and read path): experts not cached, at random, about
  // `bytes` of them; they stay cached. 0 without --ssd-streaming. Not while
  // an evaluation runs.
  double measure_expert_read_rate(uint64_t bytes);
  // Every routed expert's selections so far, most selected first (what
  // `ds4-bench --record-expert-usage` writes as a hot list).
  std::vector<backend::ExpertUse> expert_usage() const;

  // The model file's identity (model/deepseek4_fingerprint.h): what
  // distributed peers compare. Hashes a few MB of the file on each call.
  std::array<uint8_t, 32> fingerprint() const;
  // Throws ds4::Error naming the missing tensor and shard files when the
  // model's present shards lack what a pipeline stage over layers
  // [begin, end) needs (end -1: to the last layer, with the output head).
  void require_stage(int begin, int end) const;

  // The distributed route (with dist_listen): stages, what is missing,
  // per-hop telemetry; nullopt for a single process.
  std::optional<dist::RouteStatus> route() const;
  // Waits until every layer after this process's is served; true at once
  // for a single process, false on timeout.
  bool wait_for_route(std::chrono::milliseconds timeout) const;

  // --tensor-parallel on a rank other than 0: makes rank 0's calls on this
  // rank's share until rank 0's engine is gone. ds4::Error elsewhere.
  void follow_tensor_parallel();

  // Saving and loading a session (docs/session-files.md).
  void save_session(const std::string &path, const backend::Session &session) const;
  void load_session(const std::string &path, backend::Session &session) const;

  // The memory accounting block programs print after loading: file and
  // weight bytes, KV state per token and for n_ctx, settings. Lines end in
  // '\n'.
  std::string memory_report(int64_t n_ctx) const;

 private:
  // The CPU backend (--ssd-streaming's cache, a pipeline's or tensor
  // parallel's local part); then what programs print about the model.
  void start_cpu_backend(const EngineOptions& options, const MemoryAvailable& memory);
  void set_facts(const EngineOptions& options);
  // dist_listen: the coordinator and the pipeline backend over `local`.
  void start_coordinator(std::unique_ptr<cpu::Forward> local);
  // dist_tensor_parallel: this rank's share of `local`; rank 0's backend.
  void start_tensor_parallel(std::unique_ptr<cpu::Forward> local);

  EngineOptions options_;
  std::unique_ptr<model::Deepseek4Model> model_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::string tokenizer_problem_;  // why tokenizer_ is null
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<backend::Collective> collective_;  // --tensor-parallel: the ranks' MPI calls
  std::unique_ptr<cpu::Forward> local_;  // the CPU backend behind a pipeline or tensor parallel rank 0
  std::unique_ptr<dist::Coordinator> coordinator_;
  std::unique_ptr<backend::Backend> backend_;
  const cpu::Forward *cpu_ = nullptr;               // backend_ as the CPU backend
  cpu::ExpertCache *expert_cache_ = nullptr;  // owned by the backend (--ssd-streaming)
  ModelFacts facts_;
  std::mutex scheduler_mutex_;
  std::unique_ptr<Scheduler> scheduler_;  // made at the first submit
};

}  // namespace ds4::engine
