#include "common/line_reader.h"

#include <editline/readline.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/terminal.h"

namespace ds4::app {

namespace {

// libedit's character source: a read() that gives up when Ctrl+C
// interrupted it (our SIGINT handler has no SA_RESTART), so readline()
// returns as at end of input instead of waiting for the next key.
int read_char(FILE* in) {
  unsigned char c = 0;
  while (true) {
    const ssize_t n = ::read(fileno(in), &c, 1);
    if (n == 1) return c;
    if (n == 0) return EOF;
    if (errno == EINTR && !interrupted()) continue;
    return EOF;
  }
}

}  // namespace

LineReader::LineReader(bool terminal, std::string history_path)
    : terminal_(terminal), history_path_(std::move(history_path)) {
  if (!terminal_) return;
  rl_catch_signals = 0;
  rl_getc_function = read_char;
  using_history();
  stifle_history(1000);
  if (!history_path_.empty()) read_history(history_path_.c_str());
}

LineReader::~LineReader() {
  if (terminal_ && !history_path_.empty()) write_history(history_path_.c_str());
}

std::optional<std::string> LineReader::read(const std::string& prompt) {
  if (!terminal_) {
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }
  char* raw = readline(prompt.c_str());
  if (raw == nullptr) return std::nullopt;
  std::string line(raw);
  std::free(raw);
  if (!line.empty()) add_history(line.c_str());
  return line;
}

int run_message_loop(LineReader& reader, const std::string& prompt,
                     const std::function<bool(const std::string&)>& command,
                     const std::function<void(const std::string&)>& send) {
  while (true) {
    clear_interrupt();
    std::fflush(stdout);
    const std::optional<std::string> message = reader.read_message(prompt);
    if (!message) {
      if (reader.terminal()) std::fputc('\n', stdout);
      return 0;
    }
    const std::string text = trim_blanks(*message);
    if (text.empty()) continue;
    if (text[0] == '/') {
      if (!command(text)) return 0;
      continue;
    }
    send(*message);
  }
}

std::string trim_blanks(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return std::string(s.substr(a, b - a));
}

std::string home_file(std::string_view name) {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return "";
  return std::string(home) + "/" + std::string(name);
}

std::optional<std::string> LineReader::read_message(const std::string& prompt) {
  std::optional<std::string> message = read(prompt);
  while (message && !message->empty() && message->back() == '\\') {
    message->back() = '\n';
    const std::optional<std::string> more = read("... ");
    if (!more) break;
    *message += *more;
  }
  return message;
}

}  // namespace ds4::app
