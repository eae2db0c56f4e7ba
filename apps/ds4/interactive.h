// The interactive chat: one live conversation, a line per user turn, and the
// slash commands /help /think /think-max /nothink /ctx N /read FILE /quit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "text/chat_render.h"

namespace ds4::engine {
class Engine;
}

namespace ds4::app {

struct InteractiveSettings {
  std::string system;
  text::ThinkingMode mode = text::ThinkingMode::High;            // in effect
  text::ThinkingMode requested_mode = text::ThinkingMode::High;  // as asked (Max may be downgraded)
  int64_t n_ctx = 0;
  int max_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;
  runtime::SamplingParams sampling;
  uint64_t seed = 0;
  bool color = true;
};

// Returns the process exit status.
int interactive_chat(engine::Engine& engine, const InteractiveSettings& s);

}  // namespace ds4::app
