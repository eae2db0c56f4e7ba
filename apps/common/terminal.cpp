#include "common/terminal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

namespace ds4::app {

namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

constexpr const char* kGrey = "\x1b[90m";
constexpr const char* kReset = "\x1b[0m";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Terminal-safe text: control characters other than newline and tab (a
// random-weight model emits them; ESC or SO would reprogram the terminal)
// and invalid UTF-8 become U+FFFD.
std::string printable(std::string_view text) {
  static constexpr std::string_view kReplacement = "\xef\xbf\xbd";
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        out += kReplacement;
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (len == 4 && c > 0xf4) len = 0;
    bool ok = len > 0 && i + len <= text.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() { return g_interrupted.load(); }
void clear_interrupt() { g_interrupted.store(false); }

namespace {

// tcsetpgrp from a background group raises SIGTTOU; block it for the call.
void set_foreground(pid_t group) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTTOU);
  sigprocmask(SIG_BLOCK, &block, &old);
  tcsetpgrp(STDIN_FILENO, group);
  sigprocmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

TerminalForeground::TerminalForeground() {
  if (::isatty(STDIN_FILENO) != 1) return;
  const pid_t group = getpgrp();
  if (group == getpid() || tcgetpgrp(STDIN_FILENO) != group) return;
  if (setpgid(0, 0) != 0) return;
  set_foreground(getpid());
  previous_ = group;
  // Stopped alone (Ctrl+Z) ds4 could not be resumed by a shell that waits on
  // the parent's group, so suspend is ignored while ds4 holds the terminal.
  signal(SIGTSTP, SIG_IGN);
}

TerminalForeground::~TerminalForeground() {
  if (previous_ < 0) return;
  set_foreground(previous_);
}

bool stdout_is_tty() { return ::isatty(STDOUT_FILENO) == 1; }
bool stderr_is_tty() { return ::isatty(STDERR_FILENO) == 1; }

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_ || total <= 0) return;
  const int64_t t = now_ms();
  if (done < total && last_ms_ >= 0 && t - last_ms_ < 50) return;
  last_ms_ = t;
  constexpr int kCells = 20;
  const int filled = static_cast<int>(done * kCells / total);
  std::string bar;
  for (int i = 0; i < kCells; ++i) bar += i < filled ? "#" : "\xc2\xb7";  // '·'
  std::fprintf(stderr, "\r\x1b[2Kprocessing %lld input tokens: [%s] %lld/%lld (%d%%)", static_cast<long long>(total),
               bar.c_str(), static_cast<long long>(done), static_cast<long long>(total),
               static_cast<int>(done * 100 / total));
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fputs("\r\x1b[2K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

void TokenPrinter::print(std::string_view text, bool reasoning) {
  if (text.empty()) return;
  if (color_ && reasoning != grey_) {
    std::fputs(reasoning ? kGrey : kReset, stdout);
    grey_ = reasoning;
  }
  if (terminal_) {
    const std::string safe = printable(text);
    std::fwrite(safe.data(), 1, safe.size(), stdout);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  at_line_start_ = text.back() == '\n';
  std::fflush(stdout);
}

void TokenPrinter::end_turn() {
  if (grey_) std::fputs(kReset, stdout);
  grey_ = false;
  if (!at_line_start_) std::fputc('\n', stdout);
  at_line_start_ = true;
  std::fflush(stdout);
}

}  // namespace ds4::app
