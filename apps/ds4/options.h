// The ds4 command line: what was asked for, the checks that need no model,
// and the context size rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ds4::app {

inline constexpr int64_t kDefaultCtxCap = 32768;

struct Options {
  std::string model;
  std::string tokens_file;   // "" = none
  std::string dump_logits;   // "" = none
  std::string save_session;  // "" = none
  std::string load_session;  // "" = none
  std::optional<int> greedy;
  bool quality = false;
  int threads = 1;
  std::optional<int64_t> ctx;
  int prefill_chunk = 4096;
};

// ds4::Error for combinations and values no model can make valid.
void validate(const Options& o);

// Tokens the session must hold: loaded + evaluated + generated ids that are
// fed back (greedy n evaluates n - 1 of them).
int64_t tokens_needed(int64_t loaded, int64_t evaluated, const std::optional<int>& greedy);

// --ctx when given, else min(n_ctx_train, kDefaultCtxCap) raised to `needed`.
int64_t choose_ctx(const Options& o, uint32_t n_ctx_train, int64_t needed);

// ds4::Error "N tokens do not fit --ctx M (...)" when needed > n_ctx.
void check_fits(int64_t needed, int64_t n_ctx, const std::string& detail);

}  // namespace ds4::app
