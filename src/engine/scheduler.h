// Continuous batching over one backend (issue 23): tasks are queued, admitted
// up to a number running at once, and advanced together by batched steps
// from one worker thread. A step is one backend::Backend::eval over the next
// token of every generating task and pieces of the prompts still being
// prefilled (their share sized by engine::StepPlanner, oldest first); eval
// leaves each session exactly as evaluating it alone would, so a task's
// result does not depend on what ran beside it.
//
// What a task does at each point (which session, what it reuses, where its
// prompt stops for checkpoints, how it samples, where its tokens go) is the
// task's: ds4-server's requests and engine::Engine::submit's jobs are tasks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/step_planner.h"

namespace ds4::backend {
class Backend;
class Session;
}  // namespace ds4::backend
namespace ds4::runtime {
class Generation;
}

namespace ds4::engine {

// Why the scheduler ended a task.
enum class TaskFailure {
  Cancelled,   // cancelled() turned true before or during its prefill
  Prefill,     // its prompt's evaluation failed (ds4::Error)
  Generation,  // a generation step or evaluation failed (ds4::Error)
  Shutdown,    // still queued when the scheduler stopped
  Unavailable, // an evaluation needed something missing for now (a distributed stage)
};

// A unit of work on one session: its prompt, evaluated in pieces up to each
// stop in turn, then a generation stepped one token per batched step. Every
// hook runs on the scheduler's worker thread, except cancelled() (any thread)
// and failed(Shutdown) (the thread that calls Scheduler::stop).
class Task {
 public:
  virtual ~Task() = default;

  // Admitted: ready the session (reuse, restore). Return false when the task
  // ended at once (it has reported its outcome and called end()).
  virtual bool start(double queue_seconds) = 0;
  virtual backend::Session& session() = 0;
  // The whole prompt; the session holds a prefix of it while prefilling.
  virtual std::span<const int32_t> prompt() const = 0;
  // Where the current prompt piece must stop (the session gets logits
  // there): a checkpoint position or the prompt's end.
  virtual int64_t next_stop() const = 0;
  // The session reached next_stop(). At the prompt's end the task begins its
  // generation (or ends).
  virtual void stop_reached() = 0;
  // The generation once the prompt is in (null while prefilling).
  virtual runtime::Generation* generation() = 0;
  // The generation stopped (step() gave nothing): report and end().
  virtual void finished() = 0;
  // The scheduler ended the task; the session was reset where its state
  // was no longer usable. Report and end().
  virtual void failed(TaskFailure why, const std::string& message) = 0;
  // True when the task's consumer is gone: its prefill stops and its
  // generation's hooks see it.
  virtual bool cancelled() const = 0;
  // One token of this task's generation was evaluated in a step.
  virtual void token_evaluated() {}
  // A piece of this task's prompt was evaluated (before stop_reached()).
  virtual void piece_evaluated() {}

  bool ended() const { return ended_; }

 protected:
  // The task is over: its session is free for the next one.
  void end() { ended_ = true; }

 private:
  bool ended_ = false;
};

struct SchedulerOptions {
  size_t max_running = 1;  // tasks admitted at once (>= 1)
  size_t queue_max = 64;   // tasks waiting beyond the free places
  // A step carrying prompt tokens beside generating tasks takes at most this
  // many times a generation-only step (>= 1).
  double max_decode_stall = 2.0;
  // Reports from the worker (all optional).
  std::function<void(int64_t sessions, int64_t tokens, double seconds)> on_step;
  std::function<void(size_t queued, size_t running)> on_queue;
};

class Scheduler {
 public:
  // The backend must outlive the scheduler. Starts the worker thread.
  // ds4::Error for options out of range.
  Scheduler(backend::Backend& backend, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Submitted { Queued, Full, Stopping };
  // Queues a task. Full: queue_max tasks wait already (beyond the free
  // places); Stopping: stop() was called. The task is not kept then.
  Submitted submit(std::shared_ptr<Task> task);

  // Stops taking tasks, fails the queued ones (TaskFailure::Shutdown), lets
  // the running ones finish and joins the worker. Idempotent.
  void stop();

  size_t queued() const;
  size_t running() const;

 private:
  using Active = std::vector<std::shared_ptr<Task>>;
  void worker_loop();
  void admit(Active& active);
  void step(Active& active);

  backend::Backend& backend_;
  SchedulerOptions options_;
  StepPlanner planner_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  struct Queued {
    std::shared_ptr<Task> task;
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Queued> queue_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::once_flag stop_once_;
  std::thread worker_;
};

}  // namespace ds4::engine
