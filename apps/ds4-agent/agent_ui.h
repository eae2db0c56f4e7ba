// ds4-agent's terminal side: reads the user's lines (libedit on a terminal,
// plain lines from a pipe), runs each message through the conversation with
// its output streamed (reasoning grey, or folded away with /reasoning), tool
// calls and results shown as they happen, a progress bar during long
// prefills, Ctrl+C stopping the turn but keeping the conversation, and the
// session commands /save /list /switch /del /strip /new.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "agent/conversation.h"
#include "common/line_reader.h"

namespace ds4::agent {
class SessionStore;
}

namespace ds4::app {

struct AgentUiSettings {
  bool color = true;
  bool show_reasoning = true;
  std::string initial_prompt;  // -p: sent before reading any input
};

class AgentUi {
 public:
  explicit AgentUi(AgentUiSettings settings);

  // Asks before a shell command runs (the ToolBox's confirm): y/yes runs it.
  bool confirm(const std::string& command);
  // The conversation loop; returns the exit status.
  int run(agent::Conversation& conversation, agent::SessionStore& sessions);

 private:
  // False when the command ends the program.
  bool command(const std::string& line, agent::Conversation& conversation, agent::SessionStore& sessions);
  void send(const std::string& message, agent::Conversation& conversation);
  agent::AgentEvents events();
  void list_sessions(agent::SessionStore& sessions);

  AgentUiSettings s_;
  LineReader reader_;
  std::string last_reasoning_;
};

}  // namespace ds4::app
