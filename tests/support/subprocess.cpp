#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "file_io.h"
#include "temp_dir.h"

extern char** environ;

namespace ds4::test {

namespace {

ProcessResult wait_for(pid_t pid, const std::string& name) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error("waitpid failed for " + name + ": " + strerror(errno));
  }
  ProcessResult r;
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  } else {
    r.exit_code = WEXITSTATUS(status);
  }
  return r;
}

}  // namespace

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

  ProcessResult r = wait_for(pid, args[0]);
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


LiveProcess::LiveProcess(const std::vector<std::string>& args, bool stdin_terminal) {
  if (args.empty()) throw Error("LiveProcess: empty argv");
  const std::string err_path = dir_.file("stderr");
  int in_pipe[2], out_pipe[2];
  if (stdin_terminal) {
    // in_pipe[1] is the terminal's master side (we type there), in_pipe[0]
    // its slave (the child's stdin).
    in_pipe[1] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (in_pipe[1] < 0 || grantpt(in_pipe[1]) != 0 || unlockpt(in_pipe[1]) != 0)
      throw Error(std::string("pseudo-terminal: ") + strerror(errno));
    in_pipe[0] = ::open(ptsname(in_pipe[1]), O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (in_pipe[0] < 0) throw Error(std::string("pseudo-terminal: ") + strerror(errno));
  } else if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    throw Error(std::string("pipe: ") + strerror(errno));
  }
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> storage = args;
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  in_fd_ = in_pipe[1];
  out_fd_ = out_pipe[0];
  if (rc != 0) {
    pid_ = -1;
    throw Error("cannot start " + args[0] + ": " + strerror(rc));
  }
  // A child that exits early must not kill the test with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
}

LiveProcess::~LiveProcess() {
  if (in_fd_ >= 0) ::close(in_fd_);
  if (out_fd_ >= 0) ::close(out_fd_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void LiveProcess::write(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(in_fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(std::string("writing to the child's stdin: ") + strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void LiveProcess::read_some() {
  char buf[4096];
  const ssize_t n = ::read(out_fd_, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    ::close(out_fd_);
    out_fd_ = -1;
    return;
  }
  out_.append(buf, static_cast<size_t>(n));
}

bool LiveProcess::read_until(std::string_view needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out_.find(needle) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return false;
    pollfd p{out_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    read_some();
  }
  return true;
}

ProcessResult LiveProcess::finish() {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
  while (out_fd_ >= 0) read_some();
  ProcessResult r = wait_for(pid_, "the child");
  pid_ = -1;
  r.out = out_;
  r.err = read_text(dir_.file("stderr"));
  return r;
}

}  // namespace ds4::test
