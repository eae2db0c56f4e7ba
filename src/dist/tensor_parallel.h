// Tensor parallel inference (docs/distributed.md): K ranks evaluate every
// layer together, each with its share of the weights (backend::TensorShare:
// routed experts by owner, the vocab head by rows; attention replicated),
// combining the shares through a backend::Collective. Rank 0 serves: its
// backend is a TensorParallelBackend, which sends every call that touches a
// session to the other ranks before making it on its own share, so every
// rank holds the same sessions and makes the same collective calls in the
// same order. The other ranks run follow_tensor_parallel until rank 0 stops.
//
// Session state is the same on every rank (attention and KV are replicated),
// so rank 0 alone saves a whole session; a loaded one is sent to the others.
// Results are deterministic (the shares are added in rank order) and within
// float rounding of one process's, not bit-identical: the routed experts'
// outputs are added per rank before the ranks' parts are.
//
// A failure on one rank after the group's collective calls have begun (not a
// refused call: those fail on every rank alike before any) leaves the ranks
// out of step; the group is then ended (Collective::abort), never left
// waiting.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dist/wire.h"
#include "backend/collective.h"

namespace ds4::dist {

class TensorParallelBackend final : public backend::Backend {
 public:
  // `local`: this rank's backend with its share set (on the CPU:
  // cpu::Forward::set_tensor_split with `group`); rank 0 of `group`. Both
  // must outlive this object, and every session made here must be gone
  // before it is (the destructor tells the other ranks to stop).
  TensorParallelBackend(backend::Backend &local, backend::Collective &group);
  ~TensorParallelBackend() override;
  TensorParallelBackend(const TensorParallelBackend &) = delete;
  TensorParallelBackend &operator=(const TensorParallelBackend &) = delete;

  std::string name() const override { return local_.name() + "+tensor-parallel"; }
  const model::Deepseek4Model &model() const override { return local_.model(); }
  backend::Numerics numerics() const override { return local_.numerics(); }
  int64_t hidden_size() const override { return local_.hidden_size(); }
  std::unique_ptr<backend::Session> new_session(int64_t n_ctx) const override;
  bool owns(const backend::Session &session) const override;
  // Every layer only (ds4::Error for a partial range or hidden states).
  void eval(std::span<const backend::Part> parts, backend::LayerRange range = {}) override;
  using backend::Backend::eval;
  void eval_head(const float *hidden, int64_t n, float *logits) override;
  // Called on rank 0 only; its answer after each layer is every rank's.
  void set_progress(Progress progress) override { progress_ = std::move(progress); }
  void set_prefill_chunk(int n) override;
  int prefill_chunk() const override { return local_.prefill_chunk(); }
  std::vector<uint8_t> save_state(const backend::Session &session) const override;
  void load_state(std::span<const uint8_t> payload, backend::Session &session) const override;
  std::vector<uint8_t> save_layers(const backend::Session &session, backend::LayerRange range) const override;
  void load_layers(std::span<const uint8_t> state, backend::Session &session, backend::LayerRange range) const override;
  void save_session_file(const std::string &path, const backend::Session &session) const override;
  void load_session_file(const std::string &path, backend::Session &session) const override;

  int ranks() const { return group_.size(); }
  // The id the other ranks know a session of this backend by.
  uint64_t session_id(const backend::Session &session) const;

 private:
  class Session;
  friend class Session;
  Session &tp_session(const backend::Session &session, const char *what) const;
  // The command in `bytes` to every other rank (under mutex_).
  void send(const Bytes& bytes) const;
  // fn() on this rank; a failure after the group's collective calls began
  // ends the group.
  template <typename Fn>
  void in_step(const char *what, Fn &&fn) const;
  void drop(uint64_t id) const noexcept;
  void reset(Session &s) const;
  std::unique_ptr<backend::Session> snapshot(const Session &s) const;
  void restore(Session &s, const backend::Session &from) const;

  backend::Backend &local_;
  backend::Collective &group_;
  Progress progress_;
  mutable std::mutex mutex_;  // one command stream: each command and rank 0's own step together
  mutable uint64_t next_id_ = 1;
};

// A rank other than 0: makes rank 0's calls on `local` (this rank's share,
// set up as rank 0's), keeping the same sessions under rank 0's ids. A
// command that cannot be made here as on rank 0 (the ranks are out of step)
// ends the group.
class TensorParallelFollower {
 public:
  TensorParallelFollower(backend::Backend &local, backend::Collective &group);
  ~TensorParallelFollower();
  // Rank 0's calls until its backend is destroyed.
  void run();
  // One command; false after rank 0's stop.
  bool serve_one();
  // The session rank 0 knows as `id` (TensorParallelBackend::session_id), or null.
  const backend::Session *session(uint64_t id) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

inline void follow_tensor_parallel(backend::Backend &local, backend::Collective &group) {
  TensorParallelFollower(local, group).run();
}

}  // namespace ds4::dist
