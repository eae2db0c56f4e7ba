// The server's engine: owns the model's resident sessions (slots) and runs
// requests on them, several at once, from one worker thread (PROTOCOL.md
// §5.10, §6).
//
// A request goes through two stages. prepare() runs on the client's HTTP
// thread: it renders the chat (exact tool-call replay from the tool memory,
// §3.7), tokenizes it and refuses what can never run (prompt over the
// context). submit() queues it; a bounded queue answers 503 when full. The
// worker admits queued requests to free slots: it picks the free slot with
// the longest reusable prefix, decides what the prompt can reuse (live
// tokens, the live text, the client-visible transcript of the last turn, a
// disk KV file; §6.2) and then advances every admitted request by batched
// steps (continuous batching, engine::Scheduler): one step evaluates the
// next token of every generating request and bounded pieces of the prompts
// still prefilling (oldest first), in one backend::Backend::eval, so every
// matrix is read once for all of them. The prompt tokens of a step are
// bounded so that a step beside decoding streams stays within
// max_decode_stall of a decode-only step (engine::StepPlanner). Cold
// and continued checkpoints are saved on the way (§6.6); each request samples
// with its own settings (greedy on DSML syntax when tools are active, §3.6),
// turns its text into API events through the DSML stream parser and the
// API's formatter, and leaves the sampled tool blocks and the visible
// transcript for the next request. A cancelled or disconnected request
// frees its slot at the next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "engine/streaming_stats.h"
#include "server/chat_request.h"
#include "server/reply.h"
#include "server/reply_channel.h"
#include "server/tool_memory.h"
#include "text/chat_render.h"

namespace ds4::backend {
class Backend;
}
namespace ds4::text {
class Tokenizer;
}
namespace ds4::runtime {
class KvDiskCache;
struct KvCacheConfig;
class ToolCallConstraint;
class VocabTrie;
}  // namespace ds4::runtime

namespace ds4::server {

class Metrics;
class TraceLog;

struct EngineConfig {
  int64_t n_ctx = 32768;
  int64_t max_tokens = 393216;   // -n: default and cap of a reply's length
  int batched_sessions = 1;      // resident sessions (slots): requests run at once
  size_t queue_max = 64;         // requests waiting for a free slot
  // A step that carries a prompt's piece beside decoding streams may take at
  // most this many times a decode-only step (estimated from measured steps;
  // at least one prompt token per step whatever the estimate).
  double max_decode_stall = 2.0;
  // The RAM prefix cache (--cache-ram MiB; 0: off): session states kept at
  // prompt heads (system + tools), prompt ends and evicted slots' live
  // states, reused by any later prompt that begins with their tokens.
  size_t cache_ram_bytes = size_t{4096} << 20;
  int64_t cache_ram_min_tokens = 32;
  bool exact_tool_replay = true;
  size_t tool_memory_max_ids = 100000;
  size_t tool_memory_max_bytes = size_t{512} << 20;
  std::string model_name = "deepseek-v4-flash";
  // The SSD expert cache's figures, read after every batched step on the
  // thread that evaluates (for /metrics); none without --ssd-streaming.
  std::function<engine::StreamingStats()> streaming_stats;
};

// One request ready to run.
struct Job {
  ChatRequest request;
  std::string raw_body;                // for the trace
  text::ThinkingMode mode = text::ThinkingMode::High;
  bool tools_active = false;
  std::string prompt_text;             // rendered (+ response prefix)
  std::vector<int32_t> prompt_tokens;  // the whole text tokenized
  ReplyIds ids;
  int64_t number = 0;                  // request counter (ids, trace, log)
  std::string tool_replay_stats;       // exact/canonical counts, for the trace
  // tool_choice required / named: the DSML grammar generation must follow.
  std::shared_ptr<const runtime::ToolCallConstraint> constraint;
  std::shared_ptr<ReplyChannel> channel = std::make_shared<ReplyChannel>();
};

class Engine {
 public:
  // The tokenizer and backend (and so its model) must outlive the engine. `disk`
  // (may be null) enables the disk KV cache; `trace` (may be null) the
  // trace file. Starts the worker thread.
  Engine(const text::Tokenizer& tokenizer, backend::Backend& backend, EngineConfig config,
         std::unique_ptr<runtime::KvDiskCache> disk, Metrics& metrics, TraceLog* trace);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Client thread: render + tokenize. RequestError for what cannot run.
  std::shared_ptr<Job> prepare(ChatRequest request, std::string raw_body);
  // Prompt tokens the request renders to (Anthropic count_tokens); no
  // context check. RequestError when it cannot be rendered.
  int64_t count_prompt_tokens(const ChatRequest& request);
  // Queues the job; RequestError 503 when the queue is full or the engine
  // is shutting down.
  void submit(const std::shared_ptr<Job>& job);

  // Stops taking jobs, cancels the queued ones (503), lets the running ones
  // finish, saves the live sessions to the disk cache (shutdown) and joins
  // the worker. Idempotent.
  void shutdown();

  const EngineConfig& config() const { return config_; }
  int64_t n_ctx() const { return config_.n_ctx; }
  ToolMemory& tool_memory() { return tool_memory_; }

 private:
  struct Slot;
  struct Prefix;
  struct Active;
  void shutdown_now();
  // The prompt text (exact tool replay where possible, + response prefix);
  // replay_stats (may be null) gets the exact/canonical counts.
  std::string render_prompt(const ChatRequest& request, text::ThinkingMode mode, std::string* replay_stats);
  Slot& choose_slot(const Job& job);
  Prefix reuse(Slot& slot, Job& job, std::string& trace);
  // The slot's live state is about to be replaced: keep it (RAM, disk).
  void evict_live(Slot& slot, std::string& trace);
  void store_in_ram(const Slot& slot);
  void save_to_disk(Slot& slot, int reason, const std::string& key, uint8_t key_flags);
  std::string live_key(Slot& slot, uint8_t* key_flags);

  // A request's way through the scheduler (engine_requests.cpp): its
  // engine::Task hooks.
  // Admits it to a free slot; false when it ended at once (an error).
  bool start(Active& a, double queue_seconds);
  void plan_prefill(Active& a);
  void prefill_advanced(Active& a);
  void begin_generation(Active& a);
  void finish_generation(Active& a);
  void fail(Active& a, const RequestError& e);
  void release(Active& a);
  void publish_metrics(size_t queued, size_t running);

  const text::Tokenizer& tokenizer_;
  backend::Backend& backend_;
  EngineConfig config_;
  std::unique_ptr<runtime::KvDiskCache> disk_;
  std::mutex disk_mutex_;
  Metrics& metrics_;
  TraceLog* trace_;
  ToolMemory tool_memory_;
  // The vocabulary as a byte trie for constrained tool calls, built once.
  std::once_flag vocab_once_;
  std::shared_ptr<const runtime::VocabTrie> vocab_trie_;

  // Touched by the scheduler's worker only.
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t slot_clock_ = 0;
  engine::PrefixCache ram_;

  std::atomic<int64_t> counter_{0};
  std::once_flag shutdown_once_;
  // Last: its worker calls into everything above.
  std::unique_ptr<engine::Scheduler> scheduler_;
};

}  // namespace ds4::server
