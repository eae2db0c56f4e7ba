#include "subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "file_io.h"
#include "temp_dir.h"

extern char** environ;

namespace ds4::test {

std::string ProcessResult::describe() const {
  return signal != 0 ? "killed by signal " + std::to_string(signal) : "exit status " + std::to_string(exit_code);
}

std::string ProcessResult::err_text() const {
  std::string s = err;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

ProcessResult run_process(const std::vector<std::string>& args, Stderr stderr_to) {
  return run_process_with_input(args, std::nullopt, stderr_to);
}

ProcessResult run_process_with_input(const std::vector<std::string>& args, const std::optional<std::string>& input,
                                     Stderr stderr_to) {
  if (args.empty()) throw Error("run_process: empty argv");
  // Output goes to files rather than pipes, so a chatty child can never block on a
  // full pipe while we wait for it.
  TempDir dir("ds4-proc-");
  const std::string out_path = dir.file("stdout"), err_path = dir.file("stderr");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string in_path = dir.file("stdin");
  if (input) write_text(in_path, *input);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, input ? in_path.c_str() : "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (stderr_to == Stderr::kMergeIntoStdout) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }

  std::vector<std::string> storage = args;
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start " + args[0] + ": " + strerror(rc));

  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error("waitpid failed for " + args[0] + ": " + strerror(errno));
  }
  ProcessResult r;
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  } else {
    r.exit_code = WEXITSTATUS(status);
  }
  r.out = read_text(out_path);
  if (stderr_to == Stderr::kSeparate) r.err = read_text(err_path);
  return r;
}

ProcessResult run_app(const std::string& bin_dir, const std::string& name, const std::vector<std::string>& args,
                      Stderr stderr_to) {
  std::vector<std::string> argv{bin_dir + "/" + name};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, stderr_to);
}

}  // namespace ds4::test
