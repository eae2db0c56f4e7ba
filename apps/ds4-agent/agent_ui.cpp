#include "agent_ui.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "agent/session_store.h"
#include "common/terminal.h"
#include "core/error.h"

namespace ds4::app {

namespace {

constexpr const char* kHelp =
    "Type a message and press Enter; end a line with \\ to continue on the next. Commands:\n"
    "  /help            this text\n"
    "  /save NAME       save the conversation (KV and transcript) as NAME\n"
    "  /list            saved sessions: name, tokens, age, size\n"
    "  /switch NAME     continue a saved session\n"
    "  /del NAME        delete a saved session\n"
    "  /strip           drop old tool outputs and reasoning, re-evaluate the shorter transcript\n"
    "  /new             start over\n"
    "  /reasoning       show or fold the model's reasoning\n"
    "  /quit, /exit     leave (Ctrl+D too)\n"
    "Ctrl+C stops the current turn (and a running command) and keeps the conversation.\n";

constexpr const char* kCyan = "\x1b[36m";
constexpr const char* kReset = "\x1b[0m";

std::string shorten(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

std::string age(int64_t saved_at) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const int64_t d = now > saved_at ? now - saved_at : 0;
  if (d < 120) return std::to_string(d) + " s";
  if (d < 7200) return std::to_string(d / 60) + " min";
  if (d < 172800) return std::to_string(d / 3600) + " h";
  return std::to_string(d / 86400) + " days";
}

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  }
  return buf;
}

}  // namespace

AgentUi::AgentUi(AgentUiSettings settings)
    : s_(std::move(settings)), reader_(::isatty(0) == 1, ::isatty(0) == 1 ? home_file(".ds4_agent_history") : "") {}

bool AgentUi::confirm(const std::string& command) {
  std::fflush(stdout);
  std::fprintf(stderr, "run this command? [y/N]\n  %s\n", command.c_str());
  const std::optional<std::string> answer = reader_.read("run? ");
  if (!answer) return false;
  const std::string a = trim_blanks(*answer);
  return a == "y" || a == "Y" || a == "yes";
}

agent::AgentEvents AgentUi::events() {
  agent::AgentEvents e;
  e.cancelled = [] { return interrupted(); };
  return e;
}

void AgentUi::send(const std::string& message, agent::Conversation& conversation) {
  const bool tty = stdout_is_tty();
  const bool color = s_.color && tty;
  ProgressBar bar(stderr_is_tty() && s_.color);
  TokenPrinter printer(tty, s_.color);
  size_t reasoning_bytes = 0;
  last_reasoning_.clear();
  bool folded_note = false;

  agent::AgentEvents e = events();
  e.progress = [&](int64_t done, int64_t total) {
    bar.update(done, total);
    return !interrupted();
  };
  e.reasoning = [&](std::string_view text) {
    bar.finish();
    last_reasoning_ += text;
    reasoning_bytes += text.size();
    if (s_.show_reasoning) {
      printer.print(text, true);
    } else if (!folded_note) {
      printer.print("(thinking; /reasoning shows it)\n", true);
      folded_note = true;
    }
  };
  e.content = [&](std::string_view text) {
    bar.finish();
    printer.print(text, false);
  };
  e.tool_call = [&](const std::string& name, const std::string& args) {
    bar.finish();
    printer.end_turn();
    std::printf("%s[tool] %s %s%s\n", color ? kCyan : "", name.c_str(), shorten(args, 300).c_str(),
                color ? kReset : "");
    std::fflush(stdout);
  };
  e.tool_result = [&](const std::string& name, const agent::ToolResult& r) {
    std::string shown;
    size_t lines = 0, pos = 0;
    while (pos < r.text.size() && lines < 12) {
      const size_t nl = r.text.find('\n', pos);
      shown += "  " + shorten(r.text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos), 200) + "\n";
      ++lines;
      pos = nl == std::string::npos ? r.text.size() : nl + 1;
    }
    if (pos < r.text.size()) shown += "  [... " + std::to_string(r.text.size() - pos) + " more bytes to the model]\n";
    std::printf("%s[%s %s]%s\n%s", color ? kCyan : "", name.c_str(), r.is_error ? "failed" : "done",
                color ? kReset : "", shown.c_str());
    std::fflush(stdout);
  };
  e.step_done = [&](const agent::StepStats& st) {
    bar.finish();
    printer.end_turn();
    const double pf = st.prefill_seconds > 0 ? static_cast<double>(st.prompt_tokens) / st.prefill_seconds : 0;
    const double gen = st.generate_seconds > 0 ? static_cast<double>(st.generated_tokens) / st.generate_seconds : 0;
    std::fprintf(stderr, "prefill: %lld tokens, %.2f t/s; generation: %lld tokens, %.2f t/s (context %lld/%lld)\n",
                 static_cast<long long>(st.prompt_tokens), pf, static_cast<long long>(st.generated_tokens), gen,
                 static_cast<long long>(conversation.used()), static_cast<long long>(conversation.n_ctx()));
  };

  try {
    const agent::TurnSummary t = conversation.send(message, e);
    bar.finish();
    printer.end_turn();
    if (!t.note.empty()) std::fprintf(stderr, "(%s)\n", t.note.c_str());
  } catch (const Error& err) {
    bar.finish();
    printer.end_turn();
    std::fprintf(stderr, "error: %s\n", err.what());
  }
  std::fflush(stdout);
}

void AgentUi::list_sessions(agent::SessionStore& sessions) {
  const auto list = sessions.list();
  if (list.empty()) {
    std::printf("no saved sessions in %s\n", sessions.dir().c_str());
    return;
  }
  for (const auto& s : list) {
    if (!s.problem.empty()) {
      std::printf("%-20s  (cannot be loaded: %s)\n", s.name.c_str(), s.problem.c_str());
      continue;
    }
    std::printf("%-20s  %8lld tokens  %10s ago  %10s  %s\n", s.name.c_str(), static_cast<long long>(s.tokens),
                age(s.saved_at).c_str(), size_text(s.bytes).c_str(), s.title.c_str());
  }
}

bool AgentUi::command(const std::string& text, agent::Conversation& conversation, agent::SessionStore& sessions) {
  const size_t sp = text.find_first_of(" \t");
  const std::string name = text.substr(0, sp);
  const std::string arg = sp == std::string::npos ? "" : trim_blanks(std::string_view(text).substr(sp));
  try {
    if (name == "/quit" || name == "/exit") return false;
    if (name == "/help") {
      std::fputs(kHelp, stdout);
    } else if (name == "/save" || name == "/switch" || name == "/del") {
      if (arg.empty()) throw Error("usage: " + name + " NAME");
      if (name == "/save") {
        sessions.save(arg, conversation);
        std::printf("saved %s (%lld tokens)\n", arg.c_str(), static_cast<long long>(conversation.used()));
      } else if (name == "/switch") {
        const auto t0 = std::chrono::steady_clock::now();
        sessions.load(arg, conversation);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("switched to %s (%lld tokens, restored in %.3f s)\n", arg.c_str(),
                    static_cast<long long>(conversation.used()), secs);
      } else {
        sessions.remove(arg);
        std::printf("deleted %s\n", arg.c_str());
      }
    } else if (name == "/list") {
      list_sessions(sessions);
    } else if (name == "/strip") {
      ProgressBar bar(stderr_is_tty() && s_.color);
      agent::AgentEvents e = events();
      e.progress = [&](int64_t done, int64_t total) {
        bar.update(done, total);
        return !interrupted();
      };
      const auto [before, after] = conversation.strip(e);
      bar.finish();
      std::printf("stripped: %lld -> %lld tokens\n", static_cast<long long>(before), static_cast<long long>(after));
    } else if (name == "/new") {
      conversation.clear();
      std::printf("new conversation\n");
    } else if (name == "/reasoning") {
      s_.show_reasoning = !s_.show_reasoning;
      std::printf("reasoning %s\n", s_.show_reasoning ? "shown" : "folded");
      if (s_.show_reasoning && !last_reasoning_.empty()) {
        TokenPrinter p(stdout_is_tty(), s_.color);
        p.print(last_reasoning_, true);
        p.end_turn();
      }
    } else {
      std::fprintf(stderr, "unknown command %s; /help lists the commands\n", name.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return true;
}

int AgentUi::run(agent::Conversation& conversation, agent::SessionStore& sessions) {
  install_interrupt_handler();
  if (!s_.initial_prompt.empty()) {
    clear_interrupt();
    send(s_.initial_prompt, conversation);
  }
  return run_message_loop(
      reader_, "agent> ", [&](const std::string& text) { return command(text, conversation, sessions); },
      [&](const std::string& message) { send(message, conversation); });
}

}  // namespace ds4::app
