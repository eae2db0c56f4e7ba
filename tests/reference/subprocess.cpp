#include "subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "temp_dir.h"

extern char** environ;

namespace ds4::reference {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::string ProcessResult::describe() const {
  return signal != 0 ? "killed by signal " + std::to_string(signal) : "exit status " + std::to_string(exit_code);
}

ProcessResult run_process(const std::vector<std::string>& args) {
  if (args.empty()) throw Error("run_process: empty argv");
  // Output goes to files rather than pipes, so a chatty child can never block on a
  // full pipe while we wait for it.
  TempDir dir("ds4-proc-");
  const std::string out_path = (dir.path() / "stdout").string(), err_path = (dir.path() / "stderr").string();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);

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
  r.err = read_text(err_path);
  while (!r.err.empty() && (r.err.back() == '\n' || r.err.back() == '\r')) r.err.pop_back();
  return r;
}

}  // namespace ds4::reference
