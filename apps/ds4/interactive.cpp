#include "interactive.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "core/error.h"
#include "common/line_reader.h"
#include "runtime/chat_session.h"
#include "common/terminal.h"
#include "turn_display.h"
#include "text/tokenizer.h"

namespace ds4::app {

namespace {

constexpr const char* kHelp =
    "Type a message and press Enter to send it; end a line with \\ to continue on the next. Commands:\n"
    "  /help         this text\n"
    "  /think        think before answering (default)\n"
    "  /think-max    maximum reasoning effort (needs a context of at least 393216 tokens)\n"
    "  /nothink      answer directly, no reasoning\n"
    "  /ctx N        start a new conversation with a context of N tokens\n"
    "  /read FILE    send the contents of FILE as the next message\n"
    "  /quit, /exit  leave (Ctrl+D or Ctrl+C at the prompt too)\n"
    "Ctrl+C while the model writes stops the reply and keeps the conversation.\n";

const char* mode_name(text::ThinkingMode m) {
  switch (m) {
    case text::ThinkingMode::None: return "no thinking";
    case text::ThinkingMode::High: return "thinking";
    case text::ThinkingMode::Max: return "thinking, max effort";
  }
  return "thinking";
}

class Chat {
 public:
  Chat(engine::Engine& engine, const InteractiveSettings& s)
      : engine_(engine),
        tokenizer_(engine.tokenizer()),
        s_(s),
        session_(engine.backend(), engine.tokenizer(), s.n_ctx, s.system, s.mode),
        sampler_(s.sampling, s.seed),
        reader_(::isatty(0) == 1, ::isatty(0) == 1 ? home_file(".ds4_history") : "") {}

  int run() {
    install_interrupt_handler();
    const engine::ModelFacts& facts = engine_.facts();
    std::fprintf(stderr, "ds4 chat: %s, %u layers, context %lld tokens, %s. /help lists the commands.\n",
                 facts.name.empty() ? "deepseek4" : facts.name.c_str(), facts.n_layer, static_cast<long long>(session_.n_ctx()),
                 mode_name(session_.mode()));
    return run_message_loop(
        reader_, "ds4> ", [this](const std::string& text) { return command(text); },
        [this](const std::string& message) { send(message); });
  }

 private:
  // False when the command ends the chat.
  bool command(const std::string& text) {
    const size_t sp = text.find_first_of(" \t");
    const std::string name = text.substr(0, sp);
    const std::string arg = sp == std::string::npos ? "" : trim_blanks(std::string_view(text).substr(sp));
    if (name == "/quit" || name == "/exit") return false;
    if (name == "/help") {
      std::fputs(kHelp, stdout);
    } else if (name == "/think" || name == "/nothink" || name == "/think-max") {
      set_mode(name == "/think" ? text::ThinkingMode::High
                                : name == "/nothink" ? text::ThinkingMode::None : text::ThinkingMode::Max);
    } else if (name == "/ctx") {
      char* end = nullptr;
      const long long n = arg.empty() ? 0 : std::strtoll(arg.c_str(), &end, 10);
      if (arg.empty() || *end != '\0' || n < 16) {
        std::fprintf(stderr, "usage: /ctx N, with N at least 16 (tokens)\n");
      } else {
        try {
          session_.reset(n);
          s_.n_ctx = n;
          std::fprintf(stderr, "new conversation, context %lld tokens\n", n);
          if (s_.requested_mode == text::ThinkingMode::Max) set_mode(text::ThinkingMode::Max);
        } catch (const std::bad_alloc&) {
          std::fprintf(stderr, "not enough memory for a context of %lld tokens\n", n);
        }
      }
    } else if (name == "/read") {
      if (arg.empty()) {
        std::fprintf(stderr, "usage: /read FILE\n");
      } else {
        std::ifstream in(arg, std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        if (!in) {
          std::fprintf(stderr, "cannot read %s\n", arg.c_str());
        } else {
          std::fprintf(stderr, "(sending %s, %zu bytes)\n", arg.c_str(), ss.str().size());
          send(ss.str());
        }
      }
    } else {
      std::fprintf(stderr, "unknown command %s; /help lists the commands\n", name.c_str());
    }
    return true;
  }

  runtime::GenerateLimits limits() const {
    runtime::GenerateLimits l;
    l.max_tokens = s_.max_tokens;
    l.ignore_eos = s_.ignore_eos;
    l.stop_strings = s_.stop_strings;
    return l;
  }

  void set_mode(text::ThinkingMode requested) {
    s_.requested_mode = requested;
    std::string warning;
    const text::ThinkingMode m = text::effective_thinking_mode(requested, session_.n_ctx(), &warning);
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    session_.set_mode(m);
    std::fprintf(stderr, "mode: %s\n", mode_name(m));
  }

  void send(const std::string& message) {
    // The flag was cleared before the line was read: a Ctrl+C pressed since
    // (right after Enter) stops this turn instead of being forgotten.
    TurnDisplay display(s_.color, tokenizer_.end_think());
    const runtime::TurnHooks hooks = display.hooks();
    try {
      const runtime::TurnResult r = session_.turn(message, sampler_, limits(), hooks);
      display.finish();
      if (r.rolled_back) {
        std::fputs("(interrupted: the message was not added to the conversation)\n", stderr);
        return;
      }
      if (r.reason == runtime::StopReason::Cancelled) std::fputs("(interrupted)\n", stderr);
      if (r.reason == runtime::StopReason::ContextFull)
        std::fputs("(the context is full: /ctx N starts a larger conversation)\n", stderr);
      if (r.reason == runtime::StopReason::MaxTokens) std::fputs("(reply cut at the -n token limit)\n", stderr);
      const double pf = r.prefill_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prefill_seconds : 0;
      const double gen = r.generate_seconds > 0 ? static_cast<double>(r.generated_tokens) / r.generate_seconds : 0;
      std::fprintf(stderr, "prefill: %.2f t/s, generation: %.2f t/s (context %lld/%lld)\n", pf, gen,
                   static_cast<long long>(session_.used()), static_cast<long long>(session_.n_ctx()));
    } catch (const Error& e) {
      display.finish();
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }

  engine::Engine& engine_;
  const text::Tokenizer& tokenizer_;
  InteractiveSettings s_;
  runtime::ChatSession session_;
  runtime::Sampler sampler_;
  LineReader reader_;
};

}  // namespace

int interactive_chat(engine::Engine& engine, const InteractiveSettings& s) {
  Chat chat(engine, s);
  return chat.run();
}

}  // namespace ds4::app
