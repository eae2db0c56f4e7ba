// Reads the user's lines: libedit line editing and a history file on a
// terminal, plain lines from a pipe. Ctrl+C at the prompt ends input like
// Ctrl+D.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ds4::app {

class LineReader {
 public:
  // history_path "" = no history file.
  LineReader(bool terminal, std::string history_path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its newline; nullopt at end of input.
  std::optional<std::string> read(const std::string& prompt);
  // A message: a line, and while it ends with a backslash the next line
  // after a "... " prompt, joined with newlines (the backslash dropped).
  std::optional<std::string> read_message(const std::string& prompt);
  bool terminal() const { return terminal_; }

 private:
  bool terminal_;
  std::string history_path_;
};

// The loop of an interactive chat (ds4, ds4-agent): clears Ctrl+C, flushes
// stdout (on a pipe it is block-buffered: `make run | tee log` showed /help's
// text only at exit), reads a message; a blank one is skipped, a trimmed one
// starting with '/' goes to `command` (false ends the loop), any other to
// `send` as typed. Returns 0 at the end of input.
int run_message_loop(LineReader& reader, const std::string& prompt,
                     const std::function<bool(const std::string& command)>& command,
                     const std::function<void(const std::string& message)>& send);

// `s` without its leading and trailing spaces and tabs.
std::string trim_blanks(std::string_view s);

// $HOME/<name> (a history file), or "" when HOME is unset.
std::string home_file(std::string_view name);

}  // namespace ds4::app
