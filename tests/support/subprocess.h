// Running a program without a shell (posix_spawn) and collecting what it printed:
// ds4-gguf and ds4-mkmodel in the CLI tests, ds4-ref-runner in the reference client.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "temp_dir.h"

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

// A child the test talks to as a user at a pipe would: its stdin and stdout
// are pipes held open here, so what it prints can be read while it still
// waits for more input (an interactive program must flush its answers; a
// pipe does not flush them for it). stderr goes to a file, read at wait().
class LiveProcess {
 public:
  // Starts argv[0] (a path) with argv; ds4::Error when it cannot be started.
  // stdin_terminal: stdin is a pseudo-terminal instead of a pipe (what a
  // user at a terminal gives a program whose output goes to a pipe, as in
  // `make run | tee log`).
  explicit LiveProcess(const std::vector<std::string>& argv, bool stdin_terminal = false);
  // Kills the child if it still runs.
  ~LiveProcess();
  LiveProcess(const LiveProcess&) = delete;
  LiveProcess& operator=(const LiveProcess&) = delete;

  // Writes to the child's stdin; ds4::Error when it has closed it.
  void write(std::string_view bytes);
  // Reads stdout until everything read so far contains `needle` (true), or
  // until `timeout` passes or stdout ends (false).
  bool read_until(std::string_view needle, std::chrono::milliseconds timeout);
  // Everything read from stdout so far.
  const std::string& out() const { return out_; }
  // Closes stdin (end of input), reads stdout to its end and waits for the
  // exit; out() and the result hold everything it printed.
  ProcessResult finish();

 private:
  // One read() of stdout into out_; at its end (or an error) closes it.
  void read_some();

  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1;
  std::string out_;
  TempDir dir_{"ds4-live-"};
};

}  // namespace ds4::test
