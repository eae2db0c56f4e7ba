// The ds4-bench command line (SYSTEMS.md 6.1): what was asked for, the checks
// that need no model, and the frontier walk ctx-start, +step-incr (or
// *step-mul) ... ctx-max.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ds4::bench {

inline constexpr int64_t kDefaultCtxStart = 2048;
inline constexpr int64_t kDefaultCtxMax = 32768;
inline constexpr int64_t kDefaultStepIncr = 2048;
inline constexpr int kDefaultGenTokens = 128;
inline constexpr int kMaxSessions = 256;

struct Options {
  // -m, -t, --quality, --prefill-chunk, --mlock, --warm-weights, --huge-pages
  // (apps/common/engine_flags.h).
  engine::EngineOptions engine;

  // Exactly one input.
  std::string prompt_file;            // plain text: BOS + its tokens
  std::string chat_prompt_file;       // one user message, thinking off
  std::string tokens_file;            // JSON array of ids, used as is
  std::optional<std::string> system;  // -sys/--system, with --chat-prompt-file only

  int64_t ctx_start = kDefaultCtxStart;
  int64_t ctx_max = kDefaultCtxMax;
  std::optional<int64_t> ctx_alloc;  // default ctx_max + gen_tokens + 1
  int64_t step_incr = kDefaultStepIncr;
  std::optional<double> step_mul;
  int gen_tokens = kDefaultGenTokens;
  // --sessions N: at each frontier N copies of the session decode together,
  // one batched step for all (issue 23); session i starts from the (i+1)-th
  // likeliest token, then greedy, so their routed experts differ.
  int sessions = 1;

  std::string csv;                // "" = stdout only
  bool warmup = false;            // one untimed prefill of the first frontier before the walk
  bool print_gen_tokens = false;  // diagnostics: each frontier's ids on stderr
  // --record-expert-usage: every routed expert's selections over the run,
  // written at the end as a hot list for --ssd-streaming-hotlist; "" = none.
  std::string record_expert_usage;
  // --read-bandwidth: a buffer of this many bytes (k/m/g suffix allowed) read
  // by -t threads between decode steps (core/read_bandwidth.h); "" = none.
  std::string read_bandwidth;
  // --dist-listen ... --layers 0:N (apps/common/engine_flags.h): this process
  // coordinates a pipeline; the walk starts once workers serve every other
  // layer, waiting at most dist_wait_seconds.
  std::string dist_layers;
  double dist_wait_seconds = 120;
  // --tensor-parallel (under mpirun): every rank evaluates every layer with
  // its share of the weights; rank 0 walks and prints, the others follow.
  bool tensor_parallel = false;
};

// ds4::Error naming the flag for values no model can make valid: counts below
// 1, --ctx-start > --ctx-max, --step-mul <= 1, not exactly one input, -sys
// without --chat-prompt-file, missing input files, a --read-bandwidth that is no byte count or below 1 KiB per thread.
void validate(const Options& o);

// The --read-bandwidth buffer size (0 without the flag); needs validate(o).
uint64_t read_bandwidth_bytes(const Options& o);

// Read-bandwidth passes per decode probe, spread over its steps.
inline constexpr int kReadPassesPerProbe = 8;

// ctx_start, then prev + step_incr (or round(prev * step_mul), at least
// prev + 1) while below ctx_max; the last frontier is ctx_max itself. Needs
// 1 <= ctx_start <= ctx_max.
std::vector<int64_t> frontiers(int64_t ctx_start, int64_t ctx_max, int64_t step_incr, std::optional<double> step_mul);

// Tokens the session must hold: the prompt up to ctx_max, then gen_tokens
// generated ids, each evaluated (so every probe step is a timed decode).
inline int64_t ctx_needed(int64_t ctx_max, int gen_tokens) { return ctx_max + gen_tokens; }

}  // namespace ds4::bench
