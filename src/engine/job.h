// Jobs submitted to engine::Engine::submit: a prompt and a generation on one
// session, run by the engine's scheduler beside the other submitted jobs
// (one batched evaluation per step for all of them). JobHandle is what the
// submitter keeps; SubmittedJob is the scheduler's task.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduler.h"
#include "runtime/generate.h"

namespace ds4::backend {
class Session;
}
namespace ds4::runtime {
class Sampler;
}
namespace ds4::text {
class Tokenizer;
}

namespace ds4::engine {

// Callbacks of a job (all optional).
struct JobCallbacks {
  // Prefill progress in prompt tokens (done, total); false cancels.
  std::function<bool(int64_t done, int64_t total)> progress;
  // Polled before every generated token; true stops with StopReason::Cancelled.
  std::function<bool()> cancelled;
  // Each generated token with the text that became final with it; a reason
  // other than None stops generation after it.
  std::function<runtime::StopReason(int32_t id, std::string_view text)> on_token;
  // The result, once, when generation has stopped.
  std::function<void(const runtime::GenerateResult &result)> done;
};

class JobHandle {
 public:
  // Asks the job to stop: a prefill at its next step (the session put back
  // where it was), a generation before its next token. Either way the result
  // says StopReason::Cancelled.
  void cancel() { cancel_.store(true); }
  bool cancel_requested() const { return cancel_.load(); }
  bool done() const;
  // Blocks until the job has ended and gives its result; ds4::Error with the
  // reason when it failed (a failed prefill leaves the session where it was,
  // a failed generation leaves it empty).
  runtime::GenerateResult wait();

  // For the job's task.
  void complete(runtime::GenerateResult result);
  void complete_with_error(std::string message);

 private:
  std::atomic<bool> cancel_{false};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  runtime::GenerateResult result_;
  std::optional<std::string> error_;
};

// The scheduler's side of a submitted job.
class SubmittedJob final : public Task {
 public:
  // Everything referenced must outlive the job.
  SubmittedJob(backend::Session &session, std::vector<int32_t> prompt, const text::Tokenizer &tokenizer,
               runtime::Sampler &sampler, const runtime::GenerateLimits &limits, JobCallbacks callbacks,
               std::shared_ptr<JobHandle> handle);

  bool start(double queue_seconds) override;
  backend::Session &session() override { return session_; }
  std::span<const int32_t> prompt() const override { return all_; }
  int64_t next_stop() const override { return static_cast<int64_t>(all_.size()); }
  void stop_reached() override { begin_generation(); }
  runtime::Generation *generation() override { return generation_ ? &*generation_ : nullptr; }
  void finished() override;
  void failed(TaskFailure why, const std::string &message) override;
  bool cancelled() const override;
  void piece_evaluated() override;

 private:
  void begin_generation();
  void put_back();

  backend::Session &session_;
  std::vector<int32_t> new_tokens_;
  std::vector<int32_t> all_;  // the session's tokens at the start + new_tokens_
  const text::Tokenizer &tokenizer_;
  runtime::Sampler &sampler_;
  runtime::GenerateLimits limits_;
  JobCallbacks callbacks_;
  std::shared_ptr<JobHandle> handle_;
  std::unique_ptr<backend::Session> before_;  // for a cancelled or failed prefill
  runtime::GenerateHooks hooks_;
  std::optional<runtime::Generation> generation_;
};

}  // namespace ds4::engine
