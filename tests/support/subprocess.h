// Running a program without a shell (posix_spawn) and collecting what it printed:
// ds4-gguf and ds4-mkmodel in the CLI tests, ds4-ref-runner in the reference client.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ds4::test {

struct ProcessResult {
  int exit_code = -1;  // exit status, or -1 when killed by a signal
  int signal = 0;      // the terminating signal, 0 when it exited
  std::string out;     // everything written to stdout (and stderr, with kMergeIntoStdout)
  std::string err;     // everything written to stderr, as written

  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exit status 1" / "killed by signal 6", for error messages.
  std::string describe() const;
  // err without its trailing newlines, for quoting in a message.
  std::string err_text() const;
};

enum class Stderr { kSeparate, kMergeIntoStdout };

// Runs argv[0] (a path, not searched in PATH) with argv, stdin from /dev/null and the
// current environment; waits for it. Throws ds4::Error only when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, Stderr stderr_to = Stderr::kSeparate);

// As run_process, with stdin reading `input` (from a file, so the child never
// blocks on a pipe); nullopt = /dev/null.
ProcessResult run_process_with_input(const std::vector<std::string>& argv, const std::optional<std::string>& input,
                                     Stderr stderr_to = Stderr::kSeparate);

// Runs <DS4_BIN_DIR>/<name> with args, as run_process does. bin_dir is the folder
// the apps are built in (the tests' DS4_BIN_DIR).
ProcessResult run_app(const std::string& bin_dir, const std::string& name, const std::vector<std::string>& args,
                      Stderr stderr_to = Stderr::kSeparate);

}  // namespace ds4::test
