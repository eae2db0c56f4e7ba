// ThreadPool: every task runs exactly once, repeated and concurrent runs,
// nested-call and exception behaviour, default thread count.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace ds4 {
namespace {

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int n_tasks : {1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n_tasks));
      std::atomic<int> bad_count{0};
      pool.run(n_tasks, [&](int task, int n) {
        if (n != n_tasks) bad_count.fetch_add(1);
        hits[static_cast<size_t>(task)].fetch_add(1);
      });
      EXPECT_EQ(bad_count.load(), 0);
      for (int t = 0; t < n_tasks; ++t) EXPECT_EQ(hits[static_cast<size_t>(t)].load(), 1) << threads << " " << t;
    }
  }
}

TEST(ThreadPool, ZeroOrNegativeTasksDoNothing) {
  ThreadPool pool(3);
  int calls = 0;
  pool.run(0, [&](int, int) { ++calls; });
  pool.run(-4, [&](int, int) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, NonPositiveSizeMeansOneThread) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), 1);
  int calls = 0;
  pool.run(5, [&](int, int) { ++calls; });
  EXPECT_EQ(calls, 5);
}

TEST(ThreadPool, ManyRepeatedRuns) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int run = 0; run < 5000; ++run) {
    pool.run(3, [&](int task, int) { sum.fetch_add(task + 1); });
  }
  EXPECT_EQ(sum.load(), 5000 * 6);
}

TEST(ThreadPool, WorkersTakePart) {
  // Each task waits until all three are running, which needs three threads.
  ThreadPool pool(3);
  for (int run = 0; run < 20; ++run) {
    std::atomic<int> arrived{0};
    pool.run(3, [&](int, int) {
      arrived.fetch_add(1);
      while (arrived.load() < 3) std::this_thread::yield();
    });
    EXPECT_EQ(arrived.load(), 3);
  }
}

TEST(ThreadPool, NestedRunExecutesInlineOnTheCallingThread) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> inner_hits(4 * 5);
  std::atomic<int> wrong_thread{0};
  pool.run(4, [&](int outer, int) {
    const auto self = std::this_thread::get_id();
    pool.run(5, [&](int inner, int n) {
      if (std::this_thread::get_id() != self) wrong_thread.fetch_add(1);
      inner_hits[static_cast<size_t>(outer * n + inner)].fetch_add(1);
    });
  });
  EXPECT_EQ(wrong_thread.load(), 0);
  for (auto& h : inner_hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionIsRethrownAfterAllTasksAndPoolStaysUsable) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run(10,
                        [&](int task, int) {
                          ran.fetch_add(1);
                          if (task == 4) throw std::runtime_error("task 4");
                        }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 10);
  std::atomic<int> after{0};
  pool.run(8, [&](int, int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 8);
}

TEST(ThreadPool, RunsFromTwoOutsideThreadsAreSerialized) {
  ThreadPool pool(3);
  std::atomic<int64_t> a{0}, b{0};
  auto hammer = [&](std::atomic<int64_t>& sum) {
    for (int i = 0; i < 500; ++i) pool.run(4, [&](int task, int) { sum.fetch_add(task); });
  };
  std::thread other([&] { hammer(b); });
  hammer(a);
  other.join();
  EXPECT_EQ(a.load(), 500 * 6);
  EXPECT_EQ(b.load(), 500 * 6);
}

TEST(ThreadPool, DefaultThreadCountIsPlausible) {
  const int n = default_thread_count();
  EXPECT_GE(n, 1);
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_LE(n, static_cast<int>(hw));
  }
}

}  // namespace
}  // namespace ds4
