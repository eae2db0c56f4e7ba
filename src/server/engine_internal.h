// What engine.cpp (requests in, slots, prefix reuse, the disk cache) and
// engine_requests.cpp (a request as a scheduler task) share: a resident slot,
// a reuse decision and a request in flight. Not for use outside the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "server/engine.h"
#include "server/reply_assembler.h"

namespace ds4::server {

using EngineClock = std::chrono::steady_clock;

inline double seconds_since(EngineClock::time_point t0) {
  return std::chrono::duration<double>(EngineClock::now() - t0).count();
}

const char* mode_name(text::ThinkingMode m);
const char* finish_name(FinishReason f);
RequestError context_overflow(Api api, int64_t prompt, int64_t n_ctx);

// A resident session and what the engine knows about it.
struct Engine::Slot {
  Slot(std::unique_ptr<backend::Session> s, int index) : state(std::move(s)), session(*state), index(index) {}
  std::unique_ptr<backend::Session> state;
  backend::Session& session;  // *state
  int index;
  // The client-visible transcript at the live frontier (the last reply as
  // the client will send it back: hidden reasoning dropped), and the tokens
  // after session.tokens() that it already covers (EOS, an unevaluated
  // last token). Empty text = no binding.
  std::string visible_text;
  std::vector<int32_t> visible_pending;
  uint8_t visible_flags = 0;
  int64_t last_frontier = 0;  // position of the last continued save
  uint64_t last_used = 0;
  bool busy = false;  // a request runs on it
  // Per-slot figures for /metrics.
  uint64_t requests = 0;
  uint64_t generated = 0;
};

// What a request reuses: its effective prompt tokens and how many of them the
// slot's session already holds.
struct Engine::Prefix {
  std::vector<int32_t> tokens;
  int64_t cached = 0;
  std::string source;  // memory-token | visible | memory-text | ram | disk | cold
};

// A request from admission to its last event: its slot, the prompt still to
// evaluate (with the positions where disk checkpoints are due), then the
// generation stepped one token per batched step. As an engine::Task it is
// driven by the scheduler; its hooks are the server engine's. Holds what the
// Generation refers to, so it never moves (owned through shared_ptr).
struct Engine::Active final : engine::Task {
  Active(Engine& server, std::shared_ptr<Job> job) : server(server), job(std::move(job)) {}
  Engine& server;
  std::shared_ptr<Job> job;
  Slot* slot = nullptr;
  EngineClock::time_point t_start;
  EngineClock::time_point t_prefill;
  double queue_seconds = 0;
  std::string trace;
  std::unique_ptr<ReplyStream> stream;
  Prefix prefix;

  // Prefill: evaluate prefix.tokens up to each stop in turn (checkpoint
  // positions, then the prompt's end).
  std::vector<int64_t> stops;
  size_t next_stop_index = 0;
  int64_t cold_at = 0;
  int64_t head_at = 0;  // the shared head's end (a RAM prefix cache entry)
  double prefill_seconds = 0;

  // Generation (once the prompt is in).
  std::optional<runtime::Sampler> sampler;
  runtime::GenerateLimits limits;
  runtime::GenerateHooks hooks;
  std::unique_ptr<ReplyAssembler> assembler;
  std::optional<runtime::Generation> generation_;

  int64_t prompt_size() const { return static_cast<int64_t>(prefix.tokens.size()); }
  void close() { end(); }

  // engine::Task
  bool start(double waited) override { return server.start(*this, waited); }
  backend::Session& session() override { return slot->session; }
  std::span<const int32_t> prompt() const override { return prefix.tokens; }
  int64_t next_stop() const override {
    return next_stop_index < stops.size() ? stops[next_stop_index] : prompt_size();
  }
  void stop_reached() override { server.prefill_advanced(*this); }
  runtime::Generation* generation() override { return generation_ ? &*generation_ : nullptr; }
  void finished() override { server.finish_generation(*this); }
  void failed(engine::TaskFailure why, const std::string& message) override;
  bool cancelled() const override { return job->channel->cancelled(); }
  void token_evaluated() override { ++slot->generated; }
};

}  // namespace ds4::server
