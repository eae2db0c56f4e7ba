// A persistent pool of worker threads for data-parallel loops: run(n_tasks, fn)
// calls fn(task, n_tasks) exactly once for every task in [0, n_tasks), spread
// over the pool's threads (the caller is one of them), and returns when all
// are done. Workers live as long as the pool, so a call costs a wake-up and
// a completion count, and no allocation.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds4 {

class ThreadPool {
 public:
  using Task = std::function<void(int task, int n_tasks)>;

  // n_threads >= 1 counts the caller; n_threads - 1 workers are started.
  // n_threads == 1 starts none and run() executes inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, n_tasks) once per task; tasks are claimed dynamically, so
  // fn must not depend on which thread runs it. n_tasks <= 0 does nothing;
  // more than 65535 tasks is a ds4::Error.
  // The first exception a task throws is rethrown here after every task has
  // finished (the others still run).
  //
  // Misuse: a call from inside a task of this pool (nested) would deadlock
  // on the pool's own barrier, so it runs its tasks inline, serially, on the
  // calling thread. Calls from two outside threads at once are serialized.
  void run(int n_tasks, const Task& fn);

 private:
  // The claim word: run generation (32 bits) | task count (16) | next task
  // (16). Claiming a task is a compare-and-swap on the whole word, so a
  // worker that wakes late can only claim tasks of the run it saw, and only
  // while that run still has unclaimed tasks. The caller waits for tasks to
  // be *completed*, never for workers to turn up: a worker the OS has not
  // scheduled yet costs nothing, the caller runs the remaining tasks itself.
  static constexpr uint64_t kFieldMask = 0xffff;
  static constexpr int kMaxTasks = 0xffff;
  void worker_loop();
  // Claims and runs tasks of run `generation` until none is left.
  void drain_tasks(uint32_t generation);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run at a time from outside threads

  const Task* fn_ = nullptr;           // the current run's function
  std::atomic<uint64_t> claim_{0};     // see above
  std::atomic<uint32_t> generation_{0};  // bumped per run; workers sleep on it
  std::atomic<int> completed_{0};        // tasks of the current run finished
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Splits [0, n) into contiguous ranges and calls fn(begin, end) once for each,
// over the pool: for per-token loops whose iterations are independent (each
// iteration computes the same values whatever the split). A few ranges per
// thread, claimed dynamically, so a thread that starts late (a worker asleep,
// a preempted vCPU) leaves its share to the others. Inline (one range) when
// pool is null, has one thread, or n < 2.
template <typename Fn>
void parallel_ranges(ThreadPool* pool, int64_t n, Fn&& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->size() < 2 || n < 2) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t ranges = std::min<int64_t>(n, int64_t{4} * pool->size());
  pool->run(static_cast<int>(ranges), [&](int task, int n_tasks) {
    fn(n * task / n_tasks, n * (task + 1) / n_tasks);
  });
}

// Physical cores this process may run on (SMT siblings counted once), from
// the affinity mask and /sys/devices/system/cpu/cpu*/topology; falls back to
// std::thread::hardware_concurrency(), and to 1.
int default_thread_count();

}  // namespace ds4
