#include "chat_cli.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/engine_flags.h"
#include "core/error.h"
#include "core/gguf.h"
#include "engine/engine.h"
#include "interactive.h"
#include "logprobs_dump.h"
#include "runtime/chat_session.h"
#include "runtime/sampler.h"
#include "common/terminal.h"
#include "turn_display.h"
#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace ds4::app {

namespace {

std::string read_text_file(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string("cannot read ") + option + " " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(std::string("cannot read ") + option + " " + path);
  return ss.str();
}

std::string prompt_text(const Options& o) { return o.prompt ? *o.prompt : read_text_file(o.prompt_file, "--prompt-file"); }

text::ThinkingMode thinking_mode(Think t) {
  switch (t) {
    case Think::None: return text::ThinkingMode::None;
    case Think::High: return text::ThinkingMode::High;
    case Think::Max: return text::ThinkingMode::Max;
  }
  return text::ThinkingMode::High;
}

uint64_t seed_of(const Options& o) {
  if (o.seed) return *o.seed;
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
}

runtime::SamplingParams sampling_of(const Options& o) {
  runtime::SamplingParams p;
  p.temperature = o.temperature;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.top_k = o.top_k;
  return p;
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  if (std::fputs(out.c_str(), stdout) < 0 || std::fflush(stdout) != 0) throw Error("cannot write to stdout");
}

void print_timing(const runtime::TurnResult& r) {
  const double pf = r.prefill_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prefill_seconds : 0;
  const double gen = r.generate_seconds > 0 ? static_cast<double>(r.generated_tokens) / r.generate_seconds : 0;
  std::fprintf(stderr, "prefill: %.2f t/s (%lld tokens), generation: %.2f t/s (%lld tokens)\n", pf,
               static_cast<long long>(r.prompt_tokens), gen, static_cast<long long>(r.generated_tokens));
}

// What both chat modes load: the engine (model, tokenizer, backend), the
// context and the thinking mode.
struct ChatRuntime {
  engine::Engine engine;
  const text::Tokenizer& tokenizer;
  int64_t n_ctx;
  text::ThinkingMode mode;
  std::string warning;

  explicit ChatRuntime(const Options& o)
      : engine(o.engine),
        tokenizer(engine.tokenizer()),
        n_ctx(choose_ctx(o, engine.facts().n_ctx_train, 0)) {
    wait_for_route(engine, o.dist_wait_seconds);
    mode = text::effective_thinking_mode(thinking_mode(o.think), n_ctx, &warning);
  }

  // The memory accounting and any mode warning, once the inputs are known
  // to be usable (so that an input error is the only line printed).
  void report() const {
    if (!warning.empty()) std::fprintf(stderr, "ds4: warning: %s\n", warning.c_str());
    std::fputs(engine.memory_report(n_ctx).c_str(), stderr);
    std::fflush(stderr);
  }
};

}  // namespace

int run_dump_tokens(const Options& o) {
  const std::string text = prompt_text(o);
  check_model_present(o);
  const gguf::File file = gguf::File::open(o.engine.model_path);
  const text::Tokenizer tokenizer = text::Tokenizer::from_gguf(file);
  print_ids(tokenizer.encode(text, true));
  return 0;
}

int run_one_shot(const Options& o) {
  const std::string prompt = prompt_text(o);
  check_model_present(o);
  ChatRuntime rt(o);
  // A prompt that starts with the BOS literal is an already rendered chat
  // (special tokens parsed, nothing added); anything else is a user message.
  const bool rendered = prompt.rfind(rt.tokenizer.token_bytes(rt.tokenizer.bos()), 0) == 0;
  const std::vector<int32_t> rendered_tokens = rendered ? rt.tokenizer.encode(prompt, true) : std::vector<int32_t>{};
  if (rendered && !o.dump_logprobs.empty())
    throw Error("--dump-logprobs takes a user message, not a rendered prompt starting with the BOS literal");
  {
    const runtime::ChatSession probe(rt.engine.backend(), rt.tokenizer, 1, o.system, rt.mode);
    const int64_t need = rendered ? static_cast<int64_t>(rendered_tokens.size()) + 1 : probe.turn_cost(prompt);
    if (need > rt.n_ctx)
      throw Error("the prompt needs " + std::to_string(need) + " tokens of context (with one generated token) but --ctx is " +
                  std::to_string(rt.n_ctx));
  }
  rt.report();
  const TerminalForeground foreground;
  install_interrupt_handler();

  if (!o.dump_logprobs.empty()) {
    LogprobsRequest req;
    req.prompt = prompt;
    req.system = o.system;
    req.mode = rt.mode;
    req.max_tokens = o.max_tokens;
    req.top_k = o.logprobs_top_k;
    req.out_path = o.dump_logprobs;
    dump_logprobs(rt.engine, rt.n_ctx, req);
    return 0;
  }

  runtime::Sampler sampler(sampling_of(o), seed_of(o));
  runtime::ChatSession chat(rt.engine.backend(), rt.tokenizer, rt.n_ctx, o.system, rt.mode);
  TurnDisplay display(o.color, rt.tokenizer.end_think());
  const runtime::TurnHooks hooks = display.hooks();
  runtime::GenerateLimits limits;
  limits.max_tokens = o.max_tokens;
  limits.ignore_eos = o.ignore_eos;
  limits.stop_strings = o.stop_strings;
  const runtime::TurnResult r =
      rendered ? chat.rendered_turn(rendered_tokens, sampler, limits, hooks) : chat.turn(prompt, sampler, limits, hooks);
  display.finish();
  print_timing(r);
  if (r.reason == runtime::StopReason::Cancelled) std::fputs("ds4: interrupted\n", stderr);
  return r.reason == runtime::StopReason::Cancelled ? 130 : 0;
}

int run_interactive(const Options& o) {
  check_model_present(o);
  ChatRuntime rt(o);
  rt.report();
  const TerminalForeground foreground;
  InteractiveSettings s;
  s.system = o.system;
  s.mode = rt.mode;
  s.requested_mode = thinking_mode(o.think);
  s.n_ctx = rt.n_ctx;
  s.max_tokens = o.max_tokens;
  s.ignore_eos = o.ignore_eos;
  s.stop_strings = o.stop_strings;
  s.sampling = sampling_of(o);
  s.seed = seed_of(o);
  s.color = o.color;
  return interactive_chat(rt.engine, s);
}

}  // namespace ds4::app
