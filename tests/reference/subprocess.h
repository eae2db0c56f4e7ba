// Running a program without a shell and collecting what it printed, for the
// reference client (ds4-ref-runner) and the tests (ds4-mkmodel).
#pragma once

#include <string>
#include <vector>

namespace ds4::reference {

struct ProcessResult {
  int exit_code = -1;    // exit status, or -1 when killed by a signal
  int signal = 0;        // the terminating signal, 0 when it exited
  std::string out;       // everything written to stdout
  std::string err;       // everything written to stderr, trailing newlines removed

  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exit status 1" / "killed by signal 6", for error messages.
  std::string describe() const;
};

// Runs argv[0] (a path, not searched in PATH) with argv, stdin from /dev/null and the
// current environment; waits for it. Throws ds4::Error only when it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv);

}  // namespace ds4::reference
