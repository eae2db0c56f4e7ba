// The text modes of ds4: --dump-tokens, one-shot (-p / --prompt-file) with
// optional --dump-logprobs, and the interactive chat.
#pragma once

#include "options.h"

namespace ds4::app {

int run_dump_tokens(const Options& o);
int run_one_shot(const Options& o);
int run_interactive(const Options& o);

}  // namespace ds4::app
