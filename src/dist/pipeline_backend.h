// The coordinator's backend for pipeline parallel inference (DESIGN.md: "the
// distributed runner is a Backend too"): layers [0, first_remote) run here
// on a local backend, the rest on workers along the coordinator's route.
// Above it nothing changes: sessions, batched evaluation, snapshots and
// session files behave as on one machine, and the logits are bit-identical
// to one process's (hidden states travel as f32 unless f16 is asked for).
//
// A prompt goes in waves of at most wave_tokens tokens with up to `window`
// of them in flight, so the local layers evaluate wave k + 1 while the
// workers evaluate wave k. Each session keeps the exact token history; when
// a worker lost a session's state (it restarted, or a step failed part-way)
// the session is replayed from that history on every stage, so a worker's
// failure costs a re-prefill, never wrong output.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/coordinator.h"
#include "dist/messages.h"

namespace ds4::dist {

struct PipelineOptions {
  int first_remote = 1;    // this process evaluates layers [0, first_remote)
  int wave_tokens = 256;   // tokens per wave of a prompt
  int window = 4;          // waves in flight
  HiddenBits bits = HiddenBits::F32;
};

// What the coordinator asks of every worker: this build, the model of
// `local` (its fingerprint), its numerics and hidden size, sessions of up to
// n_ctx tokens, layers from first_remote on.
Expectation expectation_for(const backend::Backend& local, const std::array<uint8_t, 32>& fingerprint, int64_t n_ctx,
                            int first_remote);

class PipelineBackend final : public backend::Backend {
 public:
  // `local` evaluates the first layers; `coordinator` carries the rest.
  // Both must outlive every session made here.
  PipelineBackend(backend::Backend& local, Coordinator& coordinator, PipelineOptions options);

  std::string name() const override { return local_.name() + "+pipeline"; }
  const model::Deepseek4Model& model() const override { return local_.model(); }
  backend::Numerics numerics() const override { return local_.numerics(); }
  int64_t hidden_size() const override { return local_.hidden_size(); }
  std::unique_ptr<backend::Session> new_session(int64_t n_ctx) const override;
  bool owns(const backend::Session& session) const override;
  // Every layer only (the whole range): ds4::Error for a partial range.
  // ds4::Unavailable when the route is incomplete or a stage stops answering; the
  // sessions keep their tokens and logits and are replayed on the next call.
  void eval(std::span<const backend::Part> parts, backend::LayerRange range = {}) override;
  using backend::Backend::eval;
  void eval_head(const float* hidden, int64_t n, float* logits) override { local_.eval_head(hidden, n, logits); }
  void set_progress(Progress progress) override { local_.set_progress(std::move(progress)); }
  void set_prefill_chunk(int n) override { local_.set_prefill_chunk(n); }
  int prefill_chunk() const override { return local_.prefill_chunk(); }
  // The whole session's DSV4 payload: this process's layers and each
  // worker's, merged into one ordinary payload (and split again on load).
  std::vector<uint8_t> save_state(const backend::Session& session) const override;
  void load_state(std::span<const uint8_t> payload, backend::Session& session) const override;
  void save_session_file(const std::string& path, const backend::Session& session) const override;
  void load_session_file(const std::string& path, backend::Session& session) const override;
  std::vector<uint8_t> save_layers(const backend::Session& session, backend::LayerRange range) const override;
  void load_layers(std::span<const uint8_t> state, backend::Session& session, backend::LayerRange range) const override;

  const PipelineOptions& options() const { return options_; }

 private:
  class Session;
  Session& pipeline_session(const backend::Part& part, size_t index) const;
  struct Work;
  void run_waves(std::span<const backend::Part> parts, std::vector<Work>& work);
  // Replays a session whose workers' state is not known to match.
  void sync(Session& s) const;
  // A local session holding every layer of `session`: the local layers as
  // they are, each stage's from its worker.
  std::unique_ptr<backend::Session> gather(const backend::Session& session) const;
  // `session` becomes `full`: the local layers kept here, each stage's
  // layers sent to its worker.
  void scatter(std::unique_ptr<backend::Session> full, backend::Session& session) const;

  backend::Backend& local_;
  Coordinator& coordinator_;
  PipelineOptions options_;
};

}  // namespace ds4::dist
