#include "engine/scheduler.h"

#include <algorithm>

#include "backend/backend.h"
#include "core/error.h"
#include "runtime/generate.h"

namespace ds4::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double checked_stall(double stall) {
  if (!(stall >= 1.0)) throw Error("scheduler: the decode stall bound must be at least 1, got " + std::to_string(stall));
  return stall;
}

bool prefilling(Task& t) { return !t.ended() && t.generation() == nullptr; }

}  // namespace

Scheduler::Scheduler(backend::Backend& backend, SchedulerOptions options)
    : backend_(backend),
      options_(std::move(options)),
      planner_(checked_stall(options_.max_decode_stall), backend.prefill_chunk()) {
  if (options_.max_running < 1) throw Error("scheduler: at least one task must be able to run");
  worker_ = std::thread([this] { worker_loop(); });
}

Scheduler::~Scheduler() { stop(); }

Scheduler::Submitted Scheduler::submit(std::shared_ptr<Task> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return Submitted::Stopping;
    // queue_max counts tasks waiting for a place; the worker admits one to
    // each free place at its next step.
    const size_t free_places = options_.max_running - std::min(running_, options_.max_running);
    if (queue_.size() >= options_.queue_max + free_places) return Submitted::Full;
    queue_.push_back({std::move(task), Clock::now()});
  }
  cv_.notify_all();
  return Submitted::Queued;
}

void Scheduler::stop() {
  std::call_once(stop_once_, [this] {
    std::deque<Queued> dropped;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      dropped.swap(queue_);
    }
    cv_.notify_all();
    for (Queued& q : dropped) q.task->failed(TaskFailure::Shutdown, "stopping");
    if (worker_.joinable()) worker_.join();
  });
}

size_t Scheduler::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

size_t Scheduler::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

void Scheduler::worker_loop() {
  Active active;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (active.empty()) cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (active.empty() && queue_.empty()) return;  // stopping, nothing left
    }
    admit(active);
    if (!active.empty()) step(active);
    std::erase_if(active, [](const std::shared_ptr<Task>& t) { return t->ended(); });
    size_t queued = 0;
    {
      std::lock_guard lock(mutex_);
      running_ = active.size();
      queued = queue_.size();
    }
    if (options_.on_queue) options_.on_queue(queued, active.size());
  }
}

void Scheduler::admit(Active& active) {
  std::vector<std::pair<std::shared_ptr<Task>, double>> admitted;
  {
    std::lock_guard lock(mutex_);
    while (!queue_.empty() && active.size() + admitted.size() < options_.max_running) {
      admitted.emplace_back(std::move(queue_.front().task), seconds_since(queue_.front().at));
      queue_.pop_front();
    }
    running_ = active.size() + admitted.size();
  }
  for (auto& [task, waited] : admitted) {
    if (task->start(waited) && !task->ended()) active.push_back(std::move(task));
  }
}

void Scheduler::step(Active& active) {
  // Prompts whose consumer left stop before anything is spent on them. The
  // evaluated part stays for reuse when it ends where logits were computed
  // (a stop); a session without them is no use to a later task.
  for (auto& t : active) {
    if (prefilling(*t) && t->cancelled()) {
      if (t->session().logits().empty()) t->session().reset();
      t->failed(TaskFailure::Cancelled, "during prefill");
    }
  }
  std::vector<Task*> decoding;
  std::vector<int32_t> next(active.size());
  std::vector<backend::Part> parts;
  for (auto& t : active) {
    if (t->ended() || t->generation() == nullptr) continue;
    std::optional<int32_t> id;
    try {
      id = t->generation()->step();
    } catch (const Error& e) {
      t->session().reset();
      t->failed(TaskFailure::Generation, e.what());
      continue;
    }
    if (!id) {
      t->finished();
      continue;
    }
    int32_t& slot = next[decoding.size()];
    slot = *id;
    parts.push_back({&t->session(), std::span<const int32_t>(&slot, 1), nullptr});
    decoding.push_back(t.get());
  }

  // The prompt tokens this step may carry go to the prefilling prompts in
  // admission order (StepPlanner).
  std::vector<Task*> prefill;
  std::vector<int64_t> remaining;
  for (auto& t : active) {
    if (!prefilling(*t)) continue;
    prefill.push_back(t.get());
    remaining.push_back(t->next_stop() - t->session().size());
  }
  const std::vector<int64_t> pieces = planner_.share_prefill(decoding.size(), remaining);
  std::vector<Task*> pres;
  int64_t prefilled = 0;
  for (size_t i = 0; i < prefill.size(); ++i) {
    if (pieces[i] == 0) continue;
    Task* t = prefill[i];
    const auto pos = static_cast<size_t>(t->session().size());
    // Logits only where they are used: at the stops.
    parts.push_back({&t->session(), t->prompt().subspan(pos, static_cast<size_t>(pieces[i])), nullptr,
                     pieces[i] < remaining[i]});
    pres.push_back(t);
    prefilled += pieces[i];
  }
  if (parts.empty()) return;

  const auto t0 = Clock::now();
  try {
    // A prompt evaluated alone can stop inside its piece when its consumer
    // leaves (beside other sessions a cancel would spoil theirs too).
    if (pres.size() == 1 && decoding.empty()) {
      backend_.set_progress([t = pres[0]](int64_t, int64_t) { return !t->cancelled(); });
    }
    backend_.eval(parts);
    backend_.set_progress(nullptr);
  } catch (const Cancelled&) {
    backend_.set_progress(nullptr);
    pres[0]->session().reset();
    pres[0]->failed(TaskFailure::Cancelled, "during prefill");
    return;
  } catch (const Error& e) {
    backend_.set_progress(nullptr);
    // The evaluation checks everything first; a failure inside it leaves the
    // sessions of the call unusable.
    const bool unavailable = dynamic_cast<const Unavailable*>(&e) != nullptr;
    for (Task* t : decoding) {
      t->session().reset();
      t->failed(unavailable ? TaskFailure::Unavailable : TaskFailure::Generation, e.what());
    }
    for (Task* t : pres) {
      t->session().reset();
      t->failed(unavailable ? TaskFailure::Unavailable : TaskFailure::Prefill, e.what());
    }
    return;
  }
  const double seconds = seconds_since(t0);
  planner_.learn(seconds, decoding.size(), prefilled);
  if (options_.on_step) {
    options_.on_step(static_cast<int64_t>(parts.size()), static_cast<int64_t>(decoding.size()) + prefilled, seconds);
  }
  for (Task* t : decoding) t->token_evaluated();
  for (Task* t : pres) {
    t->piece_evaluated();
    if (!t->ended() && t->session().size() >= t->next_stop()) t->stop_reached();
  }
}

}  // namespace ds4::engine
