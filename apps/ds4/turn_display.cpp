#include "turn_display.h"

namespace ds4::app {

TurnDisplay::TurnDisplay(bool color, int32_t end_think)
    : bar_(stderr_is_tty() && color),
      printer_(stdout_is_tty(), color),
      end_think_(end_think),
      marker_as_newline_(color && stdout_is_tty()) {}

runtime::TurnHooks TurnDisplay::hooks() {
  runtime::TurnHooks h;
  h.progress = [this](int64_t done, int64_t total) {
    bar_.update(done, total);
    return !interrupted();
  };
  h.cancelled = [] { return interrupted(); };
  h.on_token = [this](int32_t id, std::string_view piece, bool reasoning) {
    bar_.finish();
    if (id == end_think_ && marker_as_newline_) {
      printer_.print("\n", true);
      return;
    }
    printer_.print(piece, reasoning);
  };
  return h;
}

void TurnDisplay::finish() {
  bar_.finish();
  printer_.end_turn();
}

}  // namespace ds4::app
