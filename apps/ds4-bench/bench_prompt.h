// The token ids ds4-bench walks through, from one of its three inputs, and
// the EOS id its greedy probes exclude.
//   --prompt-file F       BOS + F tokenized as plain text (no chat template;
//                         special-token literals in F stay text)
//   --chat-prompt-file F  F rendered as one user message (thinking off, the
//                         -sys text as system message when given), BOS first
//   --tokens-file T.json  a JSON array of ids, used as is
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench_options.h"

namespace ds4::engine {
class Engine;
}

namespace ds4::bench {

struct PromptTokens {
  std::vector<int32_t> ids;
  std::optional<int32_t> eos;  // none: the probes take the argmax over every id
  std::string source;          // "--prompt-file F", for messages
};

// ds4::Error naming the flag for an unreadable file, an empty prompt, ids
// that are not integers or are outside [0, n_vocab), and a text input with a
// model that has no tokenizer (or one whose size is not n_vocab).
PromptTokens load_prompt(const Options& o, const engine::Engine& engine);

}  // namespace ds4::bench
