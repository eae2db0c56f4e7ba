// Runs the agent's shell commands: /bin/sh -c COMMAND in the working
// directory, in its own process group (a time limit or Ctrl+C kills the
// whole group), stdin from /dev/null, stdout and stderr together, the output
// capped (its head and tail kept, the cut said), and an environment without
// the agent's secrets (API keys, tokens, passwords).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace ds4::agent {

struct ShellOptions {
  std::string working_dir;
  int default_timeout_sec = 120;
  int max_timeout_sec = 3600;
  size_t max_output_bytes = 30000;
};

struct ShellOutcome {
  std::string output;      // capped as described
  size_t output_bytes = 0; // what the command wrote in all
  int exit_status = -1;    // -1 when killed
  int signal = 0;
  bool timed_out = false;
  bool cancelled = false;
  double seconds = 0;
};

// The environment the command gets: `env` ("NAME=value" entries) without
// the variables whose names hold API_KEY, APIKEY, TOKEN, SECRET, PASSWORD or
// CREDENTIAL, or start with ANTHROPIC_, OPENAI_ or DS4_API (case-insensitive).
std::vector<std::string> scrubbed_environment(const std::vector<std::string>& env);

// ds4::Error when the command cannot be started; otherwise what happened.
ShellOutcome run_shell(const std::string& command, int timeout_sec, const ShellOptions& options,
                       const std::function<bool()>& cancelled);

// Keeps at most `max_bytes` of `text`: its head and tail, around a line
// "[... N bytes cut ...]".
std::string cap_output(const std::string& text, size_t max_bytes);

}  // namespace ds4::agent
