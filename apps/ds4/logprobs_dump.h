// --dump-logprobs OUT.json: the greedy continuation of a one-shot prompt with
// the top-k alternatives and their log-probabilities at every step, for
// comparing our distribution with another engine's (or the official API's)
// token by token.
#pragma once

#include <cstdint>
#include <string>

#include "text/chat_render.h"

namespace ds4::engine {
class Engine;
}

namespace ds4::app {

struct LogprobsRequest {
  std::string prompt;
  std::string system;
  text::ThinkingMode mode = text::ThinkingMode::High;
  int max_tokens = 0;
  int top_k = 20;
  std::string out_path;
};

// Writes (atomically: temporary file, then rename)
//   {"prompt_tokens":[ids], "top_k":K, "finish_reason":"stop"|"length",
//    "steps":[{"id":ID, "text":T, "bytes":HEX, "logprob":L,
//              "top":[{"id":ID, "text":T, "logprob":L}, ...]}, ...]}
// text is the token's bytes as UTF-8 (a partial character becomes U+FFFD;
// bytes has them exactly). Log-probabilities are of the raw logits (T = 1).
void dump_logprobs(engine::Engine& engine, int64_t n_ctx, const LogprobsRequest& req);

}  // namespace ds4::app
