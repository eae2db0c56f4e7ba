#include "core/thread_pool.h"

#include <sched.h>

#include <fstream>
#include <set>
#include <string>
#include <utility>

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
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain_tasks() {
  for (;;) {
    const int task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) return;
    try {
      (*fn_)(task, n_tasks_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int /*worker_index*/) {
  RunningPoolScope scope(this);
  uint32_t seen = 0;
  for (;;) {
    seen = wait_while_equal(generation_, seen);
    if (stop_.load(std::memory_order_relaxed)) return;
    drain_tasks();
    // The last worker out wakes the caller.
    if (workers_busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) workers_busy_.notify_one();
  }
}

void ThreadPool::run(int n_tasks, const Task& fn) {
  if (n_tasks <= 0) return;
  if (tl_running_pool == this || n_threads_ == 1 || n_tasks == 1) {
    RunningPoolScope scope(this);
    for (int t = 0; t < n_tasks; ++t) fn(t, n_tasks);
    return;
  }

  std::lock_guard<std::mutex> lock(run_mutex_);
  RunningPoolScope scope(this);
  fn_ = &fn;
  n_tasks_ = n_tasks;
  error_ = nullptr;
  next_task_.store(0, std::memory_order_relaxed);
  workers_busy_.store(n_threads_ - 1, std::memory_order_relaxed);
  // Release: workers that see the new generation also see fn_ and n_tasks_.
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();

  drain_tasks();
  for (int busy = workers_busy_.load(std::memory_order_acquire); busy != 0;
       busy = workers_busy_.load(std::memory_order_acquire)) {
    wait_while_equal(workers_busy_, busy);
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
