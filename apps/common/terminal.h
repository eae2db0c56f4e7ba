// What the chat shows on a terminal: Ctrl+C as a flag the generation loop
// polls, the prefill progress bar, grey reasoning. Off a terminal the same
// calls print plain text (no escapes, no bar).
#pragma once

#include <cstdint>
#include <string_view>

namespace ds4::app {

// Installs the SIGINT handler (no SA_RESTART, so a blocking read returns).
void install_interrupt_handler();
// True once Ctrl+C was pressed since the last clear.
bool interrupted();
void clear_interrupt();

// While alive, makes this process the terminal's foreground process group
// when it shares one with a parent (as under `make run`): Ctrl+C then
// reaches ds4 only, so a parent like make does not die of it and leave the
// chat orphaned. Restores the previous foreground group when destroyed. Does
// nothing when stdin is not a terminal or ds4 already leads its group.
class TerminalForeground {
 public:
  TerminalForeground();
  ~TerminalForeground();
  TerminalForeground(const TerminalForeground&) = delete;
  TerminalForeground& operator=(const TerminalForeground&) = delete;

 private:
  int previous_ = -1;  // the group to give the terminal back to, -1 = none taken
};

bool stdout_is_tty();
bool stderr_is_tty();

// "processing N input tokens: [#####·····] d/N (p%)" redrawn in place on a
// terminal stderr, at most ~20 times a second; nothing elsewhere.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void update(int64_t done, int64_t total);
  void finish();  // clears the line

 private:
  bool enabled_;
  bool drawn_ = false;
  int64_t last_ms_ = -1;
};

// Writes generated text to stdout: on a terminal made printable (control
// characters and invalid UTF-8 as U+FFFD) and, with `color`, reasoning in
// grey; elsewhere the bytes as generated.
class TokenPrinter {
 public:
  TokenPrinter(bool terminal, bool color) : terminal_(terminal), color_(terminal && color) {}
  void print(std::string_view text, bool reasoning);
  void end_turn();  // resets the colour, ends the line

 private:
  bool terminal_;
  bool color_;
  bool grey_ = false;
  bool at_line_start_ = true;
};

}  // namespace ds4::app
