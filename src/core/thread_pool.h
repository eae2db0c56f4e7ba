// A persistent pool of worker threads for data-parallel loops: run(n_tasks, fn)
// calls fn(task, n_tasks) exactly once for every task in [0, n_tasks), spread
// over the pool's threads (the caller is one of them), and returns when all
// are done. Workers live as long as the pool, so a call costs two barrier
// crossings and no allocation.
#pragma once

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
  // fn must not depend on which thread runs it. n_tasks <= 0 does nothing.
  // The first exception a task throws is rethrown here after every task has
  // finished (the others still run).
  //
  // Misuse: a call from inside a task of this pool (nested) would deadlock
  // on the pool's own barrier, so it runs its tasks inline, serially, on the
  // calling thread. Calls from two outside threads at once are serialized.
  void run(int n_tasks, const Task& fn);

 private:
  void worker_loop(int worker_index);
  void drain_tasks();

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run at a time from outside threads

  // State of the current run, published by bumping generation_.
  const Task* fn_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_task_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> workers_busy_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Physical cores this process may run on (SMT siblings counted once), from
// the affinity mask and /sys/devices/system/cpu/cpu*/topology; falls back to
// std::thread::hardware_concurrency(), and to 1.
int default_thread_count();

}  // namespace ds4
