#include "core/thread_pool.h"

#include <sched.h>

#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"

namespace ds4 {

namespace {

// The pool whose task this thread is running, to detect nested run() calls.
thread_local const ThreadPool* tl_running_pool = nullptr;

class RunningPoolScope {
 public:
  explicit RunningPoolScope(const ThreadPool* pool) : saved_(tl_running_pool) { tl_running_pool = pool; }
  ~RunningPoolScope() { tl_running_pool = saved_; }
  RunningPoolScope(const RunningPoolScope&) = delete;
  RunningPoolScope& operator=(const RunningPoolScope&) = delete;

 private:
  const ThreadPool* saved_;
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spin this many times before sleeping: back-to-back runs (one per matmul)
// arrive within microseconds, and a futex wake costs more than that. Kept
// short so an oversubscribed machine does not burn its cores.
constexpr int kSpinIterations = 1024;

// Waits until `value` differs from `old` (spin, then futex-backed wait).
template <typename T>
T wait_while_equal(const std::atomic<T>& value, T old) {
  for (int i = 0; i < kSpinIterations; ++i) {
    const T v = value.load(std::memory_order_acquire);
    if (v != old) return v;
    cpu_relax();
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    const T v = value.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain_tasks(uint32_t generation) {
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(word >> 32) != generation) return;  // that run is over
    const int n_tasks = static_cast<int>((word >> 16) & kFieldMask);
    const int task = static_cast<int>(word & kFieldMask);
    if (task >= n_tasks) return;
    // A failed exchange reloads `word`: another thread took this task.
    if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    try {
      (*fn_)(task, n_tasks);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    // The thread finishing the last task wakes the caller (which may sleep).
    if (completed_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_tasks) completed_.notify_one();
    word = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  RunningPoolScope scope(this);
  uint32_t seen = 0;
  for (;;) {
    seen = wait_while_equal(generation_, seen);
    if (stop_.load(std::memory_order_relaxed)) return;
    drain_tasks(seen);
  }
}

void ThreadPool::run(int n_tasks, const Task& fn) {
  if (n_tasks <= 0) return;
  if (tl_running_pool == this || n_threads_ == 1 || n_tasks == 1) {
    RunningPoolScope scope(this);
    for (int t = 0; t < n_tasks; ++t) fn(t, n_tasks);
    return;
  }
  if (n_tasks > kMaxTasks) throw Error("thread pool: " + std::to_string(n_tasks) + " tasks in one run (at most 65535)");

  std::lock_guard<std::mutex> lock(run_mutex_);
  RunningPoolScope scope(this);
  fn_ = &fn;
  error_ = nullptr;
  completed_.store(0, std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Release: a thread that claims a task of this run also sees fn_.
  claim_.store(static_cast<uint64_t>(generation) << 32 | static_cast<uint64_t>(n_tasks) << 16,
               std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();

  drain_tasks(generation);
  for (int done = completed_.load(std::memory_order_acquire); done != n_tasks;
       done = completed_.load(std::memory_order_acquire)) {
    wait_while_equal(completed_, done);
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

int default_thread_count() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::set<std::pair<int, int>> cores;  // (package, core)
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &mask)) continue;
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      std::ifstream package_file(dir + "physical_package_id");
      std::ifstream core_file(dir + "core_id");
      int package = -1, core = -1;
      if (!(package_file >> package) || !(core_file >> core)) {
        cores.clear();  // topology unreadable: do not trust a partial count
        break;
      }
      cores.emplace(package, core);
    }
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace ds4
