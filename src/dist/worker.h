// A pipeline stage in another process (ds4-worker): joins a coordinator
// over a transport link, says what it is (dist/messages.h HELLO), and then
// evaluates the EVAL batches the coordinator sends over its layer range on
// its own sessions, keyed by the coordinator's session ids. Each session's
// token prefix is tracked as a hash, so a span that does not continue what
// the worker holds (it restarted; the coordinator restarted) is answered
// MISMATCH and the coordinator replays the session instead of getting
// silently wrong output.
//
// An EVAL that names stages after this one (its route) is handed to the
// next of them directly (Link::send_to) instead of answered; a hand-over
// the link could not deliver is answered to the coordinator after all, with
// the reason, so it carries the hidden states on itself.
//
// Two threads: the I/O thread receives, sends heartbeats every
// kHeartbeatInterval (also during a long evaluation) and says HELLO until
// welcomed; the evaluation thread runs the batches in arrival order. A small
// batch (a decode step: at most kInlineTokens tokens) that finds nothing
// queued or running is evaluated on the I/O thread itself, sparing the hop
// two thread hand-offs, as long as such batches have taken under
// WorkerOptions::inline_budget (so heartbeats are never held up for long).
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dist/messages.h"
#include "dist/transport.h"

namespace ds4::dist {

inline constexpr std::chrono::milliseconds kHeartbeatInterval{250};
// A peer that sends nothing (not even a heartbeat) for this long is gone.
inline constexpr std::chrono::milliseconds kPeerTimeout{2000};
// Batches the I/O thread may evaluate itself (see above).
inline constexpr size_t kInlineTokens = 16;
// 500 ms: a decode step of a big stage on a slow host still goes inline,
// and heartbeats (every 250 ms, a peer given up after 2 s) stay timely.
inline constexpr std::chrono::milliseconds kInlineBudget{500};

struct WorkerOptions {
  backend::LayerRange layers;  // end -1: through the output head
  int64_t n_ctx = 0;           // the most tokens one session may hold
  std::string name;            // for the coordinator's logs
  std::array<uint8_t, 32> fingerprint{};
  std::chrono::milliseconds peer_timeout = kPeerTimeout;
  // Small batches are evaluated on the I/O thread while they take less.
  std::chrono::milliseconds inline_budget = kInlineBudget;
  // Lines for the log (joined, refused, coordinator lost); may be empty.
  std::function<void(const std::string&)> log;
};

class Worker {
 public:
  // `backend` (which must outlive this object) evaluates the layers.
  Worker(backend::Backend& backend, std::unique_ptr<Link> link, WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves until stop(); ds4::Error when the coordinator refuses this worker
  // (the reason it gave: another build, model, layers ...).
  void run();
  // From any thread (a signal handler's flag watcher, a test).
  void stop();

  // For tests and logs.
  bool welcomed() const;
  size_t sessions() const;
  // Batches the I/O thread evaluated itself (see above).
  size_t inline_evaluations() const;
  // Batches handed to the next stage instead of answered.
  size_t hand_overs() const;

 private:
  struct Job {
    MessageType type;
    Bytes bytes;
  };
  struct Held {
    std::unique_ptr<backend::Session> session;
    uint64_t hash = kEmptyPrefixHash;
  };

  // What an evaluation sends back (nothing for a WELCOME), and for a small
  // batch whether it was quick.
  struct Reply {
    Bytes bytes;
    std::string to;  // the next stage's forward address: a hand-over (EVAL), not an answer
    std::optional<bool> small_batch_quick;
  };

  void evaluation_loop();
  void return_undelivered();
  // Evaluates `bytes` (an EVAL) on the I/O thread when it is small, nothing
  // is queued or running and small batches have been quick; false when it
  // must be queued instead.
  bool evaluate_inline(Bytes& bytes);
  Reply answer(const Job& job);
  Reply answer_eval(const Bytes& bytes, const Eval* decoded);
  // Sends the reply and ends the evaluation, under one lock (see worker.cpp).
  void finish(Reply reply);
  Result evaluate(const Eval& eval);
  static void keep_logit_rows(const Eval& eval, size_t hd, Floats& hidden);
  SessionOpDone session_op(const SessionOp& op);
  // The session a span continues, made when new; null when the span does
  // not continue it (MISMATCH).
  Held* held_for(const EvalPart& part);
  void log(const std::string& line) const;
  Hello hello() const;

  backend::Backend& backend_;
  std::unique_ptr<Link> link_;
  WorkerOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable jobs_ready_;
  std::deque<Job> jobs_;
  bool evaluating_ = false;  // a batch is being evaluated (by either thread)
  // The last small batch's evaluation took under options_.inline_budget.
  bool small_batches_quick_ = false;
  size_t inline_evaluations_ = 0;
  size_t hand_overs_ = 0;
  bool stopping_ = false;
  bool welcomed_ = false;
  std::string refused_;
  // Sessions belong to the thread evaluating (evaluating_ set under mutex_;
  // sessions() reads the count).
  std::map<uint64_t, Held> sessions_;
  size_t session_count_ = 0;
};

}  // namespace ds4::dist
