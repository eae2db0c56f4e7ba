// What one chat turn shows on the terminal: the prefill progress bar, Ctrl+C
// as cancellation, the reply (reasoning grey, the </think> marker as a line
// break on a colour terminal).
#pragma once

#include <cstdint>

#include "runtime/chat_session.h"
#include "common/terminal.h"

namespace ds4::app {

class TurnDisplay {
 public:
  TurnDisplay(bool color, int32_t end_think);
  // Hooks for ChatSession::turn; they refer to this object.
  runtime::TurnHooks hooks();
  // Clears the bar, resets the colour and ends the reply's line.
  void finish();

 private:
  ProgressBar bar_;
  TokenPrinter printer_;
  int32_t end_think_;
  bool marker_as_newline_;
};

}  // namespace ds4::app
