#include "engine/job.h"

#include "backend/backend.h"
#include "core/error.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace ds4::engine {

bool JobHandle::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

runtime::GenerateResult JobHandle::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) throw Error(*error_);
  return result_;
}

void JobHandle::complete(runtime::GenerateResult result) {
  {
    std::lock_guard lock(mutex_);
    result_ = std::move(result);
    done_ = true;
  }
  cv_.notify_all();
}

void JobHandle::complete_with_error(std::string message) {
  {
    std::lock_guard lock(mutex_);
    error_ = std::move(message);
    done_ = true;
  }
  cv_.notify_all();
}

SubmittedJob::SubmittedJob(backend::Session &session, std::vector<int32_t> prompt, const text::Tokenizer &tokenizer,
                           runtime::Sampler &sampler, const runtime::GenerateLimits &limits, JobCallbacks callbacks,
                           std::shared_ptr<JobHandle> handle)
    : session_(session),
      new_tokens_(std::move(prompt)),
      tokenizer_(tokenizer),
      sampler_(sampler),
      limits_(limits),
      callbacks_(std::move(callbacks)),
      handle_(std::move(handle)) {}

bool SubmittedJob::start(double) {
  if (!session_.consistent()) {
    handle_->complete_with_error("job: the session is inconsistent (a cancelled evaluation); reset or restore it");
    end();
    return false;
  }
  all_.assign(session_.tokens().begin(), session_.tokens().end());
  all_.insert(all_.end(), new_tokens_.begin(), new_tokens_.end());
  if (all_.empty()) {
    handle_->complete_with_error("job: nothing to generate from (an empty session and an empty prompt)");
    end();
    return false;
  }
  if (static_cast<int64_t>(all_.size()) > session_.n_ctx()) {
    handle_->complete_with_error("job: the prompt needs " + std::to_string(all_.size()) +
                                 " tokens of context, the session holds " + std::to_string(session_.n_ctx()));
    end();
    return false;
  }
  if (new_tokens_.empty()) {
    begin_generation();
  } else {
    before_ = session_.snapshot();
  }
  return !ended();
}

void SubmittedJob::piece_evaluated() {
  if (callbacks_.progress &&
      !callbacks_.progress(session_.size() - (static_cast<int64_t>(all_.size() - new_tokens_.size())),
                           static_cast<int64_t>(new_tokens_.size()))) {
    handle_->cancel();
  }
}

bool SubmittedJob::cancelled() const { return handle_->cancel_requested(); }

void SubmittedJob::begin_generation() {
  hooks_.cancelled = [this] { return handle_->cancel_requested() || (callbacks_.cancelled && callbacks_.cancelled()); };
  hooks_.on_token = callbacks_.on_token;
  try {
    generation_.emplace(session_, tokenizer_, sampler_, limits_, hooks_);
  } catch (const Error &e) {
    put_back();
    handle_->complete_with_error(std::string("job: ") + e.what());
    end();
  }
}

void SubmittedJob::put_back() {
  if (before_) session_.restore(*before_);
}

void SubmittedJob::finished() {
  runtime::GenerateResult r = generation_->finish();
  generation_.reset();
  if (callbacks_.done) callbacks_.done(r);
  handle_->complete(std::move(r));
  end();
}

void SubmittedJob::failed(TaskFailure why, const std::string &message) {
  generation_.reset();
  switch (why) {
    case TaskFailure::Cancelled: {
      put_back();
      runtime::GenerateResult r;
      r.reason = runtime::StopReason::Cancelled;
      if (callbacks_.done) callbacks_.done(r);
      handle_->complete(std::move(r));
      break;
    }
    case TaskFailure::Prefill:
      put_back();
      handle_->complete_with_error("job: prefill failed: " + message);
      break;
    case TaskFailure::Generation:
      handle_->complete_with_error("job: generation failed: " + message);
      break;
    case TaskFailure::Shutdown:
      handle_->complete_with_error("job: the engine is shutting down");
      break;
    case TaskFailure::Unavailable:
      put_back();
      handle_->complete_with_error("job: unavailable: " + message);
      break;
  }
  end();
}

}  // namespace ds4::engine
