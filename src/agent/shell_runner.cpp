#include "agent/shell_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace ds4::agent {

namespace {

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

bool is_secret_name(std::string_view name) {
  const std::string n = upper(name);
  for (const char* part : {"API_KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"}) {
    if (n.find(part) != std::string::npos) return true;
  }
  for (const char* prefix : {"ANTHROPIC_", "OPENAI_", "DS4_API"}) {
    if (n.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Kills the command's process group and reaps the shell.
int kill_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

std::vector<std::string> scrubbed_environment(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const auto& e : env) {
    const size_t eq = e.find('=');
    if (is_secret_name(std::string_view(e).substr(0, eq))) continue;
    out.push_back(e);
  }
  return out;
}

std::string cap_output(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  const size_t head = max_bytes / 2, tail = max_bytes - head;
  return text.substr(0, head) + "\n[... " + std::to_string(text.size() - head - tail) + " bytes cut ...]\n" +
         text.substr(text.size() - tail);
}

ShellOutcome run_shell(const std::string& command, int timeout_sec, const ShellOptions& options,
                       const std::function<bool()>& cancelled) {
  std::vector<std::string> env_in;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env_in.emplace_back(*e);
  std::vector<std::string> env = scrubbed_environment(env_in);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(std::string("shell: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDERR_FILENO);
  if (!options.working_dir.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.working_dir.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group, default signal handling (the agent ignores or
  // catches SIGINT; the command must not inherit that).
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    throw Error(std::string("shell: cannot start /bin/sh: ") + std::strerror(rc));
  }

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_sec);
  ShellOutcome r;
  std::string first_bytes;
  // The first `keep` bytes and a rolling tail only: a command may print
  // gigabytes.
  const size_t keep = options.max_output_bytes;
  std::string tail;
  const auto take = [&](std::string_view chunk) {
    r.output_bytes += chunk.size();
    if (first_bytes.size() < keep) {
      const size_t n = std::min(chunk.size(), keep - first_bytes.size());
      first_bytes.append(chunk.substr(0, n));
      chunk.remove_prefix(n);
    }
    if (!chunk.empty()) {
      tail.append(chunk);
      if (tail.size() > 2 * keep) tail.erase(0, tail.size() - keep);  // amortized: erase rarely
    }
  };
  // Reads what is there; false at end of output.
  const auto read_some = [&](int wait_ms) {
    pollfd p{out_pipe[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready <= 0) return ready == 0 || errno == EINTR;
    char buf[65536];
    const ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
    if (n < 0) return errno == EINTR;
    if (n == 0) return false;
    take(std::string_view(buf, static_cast<size_t>(n)));
    return true;
  };
  int status = 0;
  bool reaped = false;
  while (true) {
    if (cancelled && cancelled()) {
      r.cancelled = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      r.timed_out = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    if (!read_some(static_cast<int>(std::min<long long>(left, 100)))) break;
    // The shell may be gone while something it started in the background
    // still holds the pipe open: then what is there now is the output.
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      while (read_some(0)) {
        pollfd p{out_pipe[0], POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) break;
      }
      break;
    }
  }
  ::close(out_pipe[0]);
  if (r.timed_out || r.cancelled) {
    status = kill_and_reap(pid);
  } else {
    if (!reaped) {
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    // What the command left running belongs to its group and goes with it.
    ::kill(-pid, SIGKILL);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    r.exit_status = WEXITSTATUS(status);
  }
  if (r.output_bytes <= keep) {
    r.output = first_bytes;
  } else {
    // The first half of the budget from the head, the rest from the end.
    const size_t head = keep / 2, end = keep - head;
    std::string last = tail.size() >= end ? tail.substr(tail.size() - end)
                                          : first_bytes.substr(first_bytes.size() - (end - tail.size())) + tail;
    r.output = first_bytes.substr(0, head) + "\n[... " + std::to_string(r.output_bytes - head - end) +
               " bytes cut ...]\n" + last;
  }
  return r;
}

}  // namespace ds4::agent
