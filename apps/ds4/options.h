// The ds4 command line: what was asked for, the checks that need no model,
// the mode the options select and the context size rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ds4::app {

inline constexpr int64_t kDefaultCtxCap = 32768;
inline constexpr const char* kDefaultModel = "ds4flash.gguf";
inline constexpr const char* kDefaultSystem = "You are a helpful assistant";
inline constexpr int kDefaultMaxTokens = 50000;
inline constexpr int kDefaultLogprobsTopK = 20;

enum class Think { None, High, Max };

struct Options {
  // -m, -t, --quality, --prefill-chunk, --mlock, --warm-weights, --huge-pages:
  // how every mode opens the model (apps/common/engine_flags.h).
  engine::EngineOptions engine = default_engine_options();
  bool model_given = false;  // -m on the command line (else the default file)

  // Token-id mode.
  std::string tokens_file;   // "" = none
  std::string dump_logits;   // "" = none
  std::string save_session;  // "" = none
  std::string load_session;  // "" = none
  std::optional<int> greedy;

  // Text modes.
  std::optional<std::string> prompt;  // -p
  std::string prompt_file;            // "" = none
  bool dump_tokens = false;
  std::string dump_logprobs;  // "" = none
  int logprobs_top_k = kDefaultLogprobsTopK;
  std::string system = kDefaultSystem;
  int max_tokens = kDefaultMaxTokens;
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;  // --stop, repeatable
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.05f;
  int top_k = 0;
  std::optional<uint64_t> seed;
  Think think = Think::High;
  bool color = true;  // grey reasoning and the progress bar, only on a terminal

  std::optional<int64_t> ctx;
  // --dist-listen ... --layers 0:N (apps/common/engine_flags.h): this process
  // coordinates a pipeline; it waits at most dist_wait_seconds for workers.
  std::string dist_layers;
  double dist_wait_seconds = 120;

  static engine::EngineOptions default_engine_options() {
    engine::EngineOptions e;
    e.model_path = kDefaultModel;
    return e;
  }
};

enum class Mode {
  Tokens,       // --tokens-file / --dump-logits / --greedy / sessions: ids in, logits or ids out
  DumpTokens,   // --dump-tokens: the ids of the prompt text, nothing evaluated
  OneShot,      // -p / --prompt-file: one chat turn
  Interactive,  // no prompt: multi-turn chat
};
Mode mode_of(const Options& o);

// ds4::Error for combinations and values no model can make valid.
void validate(const Options& o);

// Tokens the session must hold: loaded + evaluated + generated ids that are
// fed back (greedy n evaluates n - 1 of them).
int64_t tokens_needed(int64_t loaded, int64_t evaluated, const std::optional<int>& greedy);

// --ctx when given, else min(n_ctx_train, kDefaultCtxCap) raised to `needed`.
int64_t choose_ctx(const Options& o, int64_t n_ctx_train, int64_t needed);

// ds4::Error "N tokens do not fit --ctx M (...)" when needed > n_ctx.
void check_fits(int64_t needed, int64_t n_ctx, const std::string& detail);

// ds4::Error when the model file is missing: names it, and for the default
// file says how to get one (download_model.sh) or pass -m.
void check_model_present(const Options& o);

}  // namespace ds4::app
