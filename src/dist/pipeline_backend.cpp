#include "dist/pipeline_backend.h"

#include <algorithm>
#include <atomic>
#include <deque>

#include "core/error.h"
#include "version/version.h"

namespace ds4::dist {

namespace {

std::atomic<uint64_t> g_next_session{1};

// A worker did not hold a session as expected: replay it.
class Mismatch : public Error {
 public:
  explicit Mismatch(const std::string& what) : Error(what) {}
};

}  // namespace

// A conversation across the route: the local session (layers before the
// first remote one), the exact token history and the last logits, and the
// id the workers know its state by.
class PipelineBackend::Session final : public backend::Session {
 public:
  Session(const PipelineBackend& owner, std::unique_ptr<backend::Session> local)
      : owner_(&owner), local_(std::move(local)), id_(g_next_session++) {}
  ~Session() override {
    SessionOp op;
    op.kind = SessionOpKind::Drop;
    op.session = id_;
    owner_->coordinator_.session_op_async(std::move(op));
  }

  int64_t n_ctx() const override { return local_->n_ctx(); }
  std::span<const int32_t> tokens() const override { return tokens_; }
  std::span<const float> logits() const override { return logits_; }
  bool consistent() const override { return consistent_; }
  void reset() override {
    local_->reset();
    tokens_.clear();
    logits_.clear();
    hash_ = kEmptyPrefixHash;
    consistent_ = true;
    stale_ = false;  // the next span starts at 0 and resets every stage
  }
  std::unique_ptr<backend::Session> snapshot() const override {
    auto copy = std::make_unique<Session>(*owner_, local_->snapshot());
    copy->take_fields(*this);
    if (!stale_ && !tokens_.empty()) copy->stale_ = !copy->copy_remote_from(id_);
    return copy;
  }
  void restore(const backend::Session& snapshot) override {
    const auto* s = dynamic_cast<const Session*>(&snapshot);
    if (s == nullptr || s->owner_ != owner_) throw Error("session restore: the snapshot is not this pipeline's");
    local_->restore(*s->local_);
    take_fields(*s);
    if (!stale_ && !tokens_.empty()) stale_ = !copy_remote_from(s->id_);
  }
  size_t state_bytes() const override { return local_->state_bytes(); }

  const PipelineBackend* owner_;
  std::unique_ptr<backend::Session> local_;
  uint64_t id_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  uint64_t hash_ = kEmptyPrefixHash;
  bool consistent_ = true;
  // The workers' state of this session is not known to match tokens_: the
  // next evaluation replays the history on every stage.
  bool stale_ = false;

 private:
  void take_fields(const Session& s) {
    tokens_ = s.tokens_;
    logits_ = s.logits_;
    hash_ = s.hash_;
    consistent_ = s.consistent_;
    stale_ = s.stale_;
  }
  // Every worker's copy of session `from` becomes this one's; false when a
  // stage could not (then the next evaluation replays).
  bool copy_remote_from(uint64_t from) const {
    SessionOp op;
    op.kind = SessionOpKind::Copy;
    op.session = id_;
    op.other = from;
    for (const auto& a : owner_->coordinator_.session_op(std::move(op)))
      if (a.unavailable || a.done.status != ResultStatus::Ok) return false;
    return true;
  }
};

// One part of a call as it is sent: the tokens (the history first when the
// session is replayed) and where its logits go.
struct PipelineBackend::Work {
  Session* session = nullptr;
  std::vector<int32_t> tokens;
  size_t history = 0;  // leading tokens replayed, not the part's own
  bool want_last = false;
  float* all_logits = nullptr;
  std::vector<float> last_logits;
};

Expectation expectation_for(const backend::Backend& local, const std::array<uint8_t, 32>& fingerprint, int64_t n_ctx,
                            int first_remote) {
  Expectation e;
  e.version = std::string(ds4::version());
  e.commit = std::string(ds4::git_commit());
  e.fingerprint = fingerprint;
  e.n_layer = static_cast<uint32_t>(local.n_layer());
  e.numerics = static_cast<uint32_t>(local.numerics());
  e.hidden_size = static_cast<uint64_t>(local.hidden_size());
  e.n_ctx = n_ctx;
  e.first_remote = first_remote;
  return e;
}

PipelineBackend::PipelineBackend(backend::Backend& local, Coordinator& coordinator, PipelineOptions options)
    : local_(local), coordinator_(coordinator), options_(options) {
  if (options_.first_remote < 0 || options_.first_remote >= local_.n_layer())
    throw Error("pipeline: the coordinator's layers 0:" + std::to_string(options_.first_remote) +
                " leave no layer for the workers of a " + std::to_string(local_.n_layer()) + "-layer model");
  if (options_.wave_tokens < 1) throw Error("pipeline: waves of at least one token");
  if (options_.window < 1) throw Error("pipeline: at least one wave in flight");
}

std::unique_ptr<backend::Session> PipelineBackend::new_session(int64_t n_ctx) const {
  return std::make_unique<Session>(*this, local_.new_session(n_ctx));
}

bool PipelineBackend::owns(const backend::Session& session) const {
  const auto* s = dynamic_cast<const Session*>(&session);
  return s != nullptr && s->owner_ == this;
}

PipelineBackend::Session& PipelineBackend::pipeline_session(const backend::Part& part, size_t index) const {
  auto* s = dynamic_cast<Session*>(part.session);
  if (s == nullptr || s->owner_ != this)
    throw Error("part " + std::to_string(index) + ": the session is not this pipeline's");
  return *s;
}

void PipelineBackend::eval(std::span<const backend::Part> parts, backend::LayerRange range) {
  if (range.begin != 0 || range.end != -1)
    throw Error("pipeline: only whole-model evaluations (the route holds the layer ranges)");
  const auto nv = static_cast<int32_t>(n_vocab());
  std::vector<Session*> sessions;
  for (size_t i = 0; i < parts.size(); ++i) {
    Session& s = pipeline_session(parts[i], i);
    if (!s.consistent_) throw Error("part " + std::to_string(i) + ": the session was left inconsistent");
    if (std::find(sessions.begin(), sessions.end(), &s) != sessions.end())
      throw Error("part " + std::to_string(i) + ": the session appears twice");
    for (const int32_t t : parts[i].tokens)
      if (t < 0 || t >= nv)
        throw Error("part " + std::to_string(i) + ": token id " + std::to_string(t) + " is outside the vocabulary of " +
                    std::to_string(nv));
    if (static_cast<int64_t>(s.tokens_.size() + parts[i].tokens.size()) > s.n_ctx())
      throw Error("part " + std::to_string(i) + ": " + std::to_string(s.tokens_.size() + parts[i].tokens.size()) +
                  " tokens exceed the context of " + std::to_string(s.n_ctx()));
    sessions.push_back(&s);
  }
  // A mismatch (a worker lost a session) is answered by replaying the
  // sessions once; a second mismatch is an error.
  for (int attempt = 0;; ++attempt) {
    std::vector<Work> work(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      Session& s = *sessions[i];
      Work& w = work[i];
      w.session = &s;
      if (s.stale_) {
        s.local_->reset();
        w.tokens = s.tokens_;
        w.history = s.tokens_.size();
      }
      w.tokens.insert(w.tokens.end(), parts[i].tokens.begin(), parts[i].tokens.end());
      w.all_logits = parts[i].all_logits;
      w.want_last = w.all_logits == nullptr && !parts[i].skip_logits && !parts[i].tokens.empty();
    }
    try {
      run_waves(parts, work);
    } catch (const Cancelled&) {
      for (Session* s : sessions) {
        s->consistent_ = false;
        s->stale_ = true;
      }
      throw;
    } catch (const Unavailable&) {
      for (Session* s : sessions) s->stale_ = true;
      throw;
    } catch (const Mismatch&) {
      for (Session* s : sessions) s->stale_ = true;
      if (attempt == 0) continue;
      throw;
    } catch (const Error&) {
      for (Session* s : sessions) s->stale_ = true;
      throw;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      Session& s = *sessions[i];
      const Work& w = work[i];
      const auto own = std::span<const int32_t>(w.tokens).subspan(w.history);
      s.tokens_.insert(s.tokens_.end(), own.begin(), own.end());
      s.hash_ = token_prefix_hash(own, s.hash_);
      s.stale_ = false;
      if (own.empty()) continue;
      if (w.all_logits != nullptr) {
        const float* last = w.all_logits + (own.size() - 1) * static_cast<size_t>(nv);
        s.logits_.assign(last, last + nv);
      } else if (w.want_last) {
        s.logits_ = w.last_logits;
      } else {
        s.logits_.clear();
      }
    }
    return;
  }
}

void PipelineBackend::run_waves(std::span<const backend::Part> parts, std::vector<Work>& work) {
  const auto hd = static_cast<size_t>(hidden_size());
  const auto nv = static_cast<size_t>(n_vocab());
  struct Piece {
    size_t part, begin, end;
  };
  // Waves: the parts' tokens in order, cut every wave_tokens tokens.
  std::vector<std::vector<Piece>> waves(1);
  size_t in_wave = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    size_t at = 0;
    const size_t n = work[i].tokens.size();
    if (n == 0) continue;
    while (at < n) {
      if (in_wave == static_cast<size_t>(options_.wave_tokens)) {
        waves.emplace_back();
        in_wave = 0;
      }
      const size_t take = std::min(n - at, static_cast<size_t>(options_.wave_tokens) - in_wave);
      waves.back().push_back({i, at, at + take});
      at += take;
      in_wave += take;
    }
  }
  if (waves.back().empty()) return;  // nothing to evaluate

  std::vector<uint64_t> hash(work.size());
  for (size_t i = 0; i < work.size(); ++i) hash[i] = work[i].history > 0 ? kEmptyPrefixHash : work[i].session->hash_;
  auto pos_of = [&](size_t i) {
    return work[i].history > 0 ? int64_t{0} : static_cast<int64_t>(work[i].session->tokens_.size());
  };

  struct InFlight {
    uint64_t request;
    size_t wave;
  };
  std::deque<InFlight> flight;
  std::string failure, mismatch;
  bool unavailable = false;
  // Takes the oldest wave's outcome: its logits to where they go.
  auto collect = [&] {
    const InFlight f = flight.front();
    flight.pop_front();
    Outcome o = coordinator_.wait(f.request);
    if (o.status == ResultStatus::Mismatch) {
      if (mismatch.empty()) mismatch = o.error;
      return;
    }
    if (o.status != ResultStatus::Ok) {
      if (failure.empty()) failure = o.error;
      unavailable = unavailable || o.unavailable;
      return;
    }
    if (o.logits.empty() && !o.hidden.empty()) {
      // The last stage stopped at the last layer: the head runs here.
      const size_t rows = o.hidden.size() / hd;
      o.logits.resize(rows * nv);
      local_.eval_head(o.hidden.data(), static_cast<int64_t>(rows), o.logits.data());
    }
    size_t row = 0;
    for (const Piece& p : waves[f.wave]) {
      Work& w = work[p.part];
      const bool last_piece = p.end == w.tokens.size();
      if (w.all_logits != nullptr) {
        for (size_t t = p.begin; t < p.end; ++t, ++row) {
          if (row >= o.logits.size() / nv) break;
          if (t >= w.history)
            std::copy_n(o.logits.data() + row * nv, nv, w.all_logits + (t - w.history) * nv);
        }
      } else if (w.want_last && last_piece) {
        if ((row + 1) * nv <= o.logits.size())
          w.last_logits.assign(o.logits.data() + row * nv, o.logits.data() + (row + 1) * nv);
        ++row;
      }
    }
  };

  Floats hidden;
  try {
    for (size_t wi = 0; wi < waves.size(); ++wi) {
      const std::vector<Piece>& wave = waves[wi];
      size_t n_tokens = 0;
      for (const Piece& p : wave) n_tokens += p.end - p.begin;
      Eval eval;
      eval.bits = options_.bits;
      std::vector<backend::Part> local(wave.size());
      if (options_.first_remote > 0) hidden.assign(n_tokens * hd, 0.0f);
      size_t row = 0;
      for (size_t k = 0; k < wave.size(); ++k) {
        const Piece& p = wave[k];
        Work& w = work[p.part];
        const auto span = std::span<const int32_t>(w.tokens).subspan(p.begin, p.end - p.begin);
        local[k].session = w.session->local_.get();
        local[k].tokens = span;
        if (options_.first_remote > 0) local[k].hidden_out = hidden.data() + row * hd;
        EvalPart ep;
        ep.session = w.session->id_;
        ep.pos0 = pos_of(p.part) + static_cast<int64_t>(p.begin);
        ep.prefix_hash = hash[p.part];
        ep.reset = ep.pos0 == 0;
        ep.all_logits = w.all_logits != nullptr;
        ep.skip_logits = !ep.all_logits && !(w.want_last && p.end == w.tokens.size());
        ep.tokens.assign(span.begin(), span.end());
        hash[p.part] = token_prefix_hash(span, hash[p.part]);
        eval.parts.push_back(std::move(ep));
        row += span.size();
      }
      if (options_.first_remote > 0) local_.eval(local, backend::LayerRange{0, options_.first_remote});
      eval.hidden = std::move(hidden);
      hidden = {};
      flight.push_back({coordinator_.submit(std::move(eval)), wi});
      if (flight.size() >= static_cast<size_t>(options_.window)) collect();
      if (!failure.empty() || !mismatch.empty()) break;
    }
  } catch (...) {
    while (!flight.empty()) collect();
    throw;
  }
  while (!flight.empty()) collect();
  if (!failure.empty()) {
    if (unavailable) throw Unavailable(failure);
    throw Error(failure);
  }
  if (!mismatch.empty()) throw Mismatch(mismatch);
}

void PipelineBackend::sync(Session& s) const {
  if (!s.stale_ || s.tokens_.empty()) return;
  const backend::Part part{&s, {}, nullptr, true};
  const_cast<PipelineBackend*>(this)->eval(std::span<const backend::Part>(&part, 1));
}

std::unique_ptr<backend::Session> PipelineBackend::gather(const backend::Session& session) const {
  auto* s = const_cast<Session*>(dynamic_cast<const Session*>(&session));
  if (s == nullptr || s->owner_ != this) throw Error("session save: the session is not this pipeline's");
  if (!s->consistent_) throw Error("session save: the session was left incomplete by a cancelled evaluation");
  sync(*s);
  std::unique_ptr<backend::Session> full = s->local_->snapshot();
  if (s->tokens_.empty()) return full;
  SessionOp op;
  op.kind = SessionOpKind::SaveState;
  op.session = s->id_;
  for (const Coordinator::OpAnswer& a : coordinator_.session_op(std::move(op))) {
    const std::string stage = "stage " + layer_range_text(a.begin, a.end) + ": ";
    if (a.unavailable) throw Unavailable("session save: " + stage + a.done.error);
    if (a.done.status != ResultStatus::Ok) throw Error("session save: " + stage + a.done.error);
    local_.load_layers(a.done.payload, *full, backend::LayerRange{a.begin, a.end});
  }
  return full;
}

void PipelineBackend::scatter(std::unique_ptr<backend::Session> full, backend::Session& session) const {
  auto* s = dynamic_cast<Session*>(&session);
  if (s == nullptr || s->owner_ != this) throw Error("session load: the session is not this pipeline's");
  SessionOp op;
  op.kind = SessionOpKind::LoadState;
  op.session = s->id_;
  bool loaded = true;
  if (full->size() > 0) {
    const auto answers = coordinator_.session_op(
        std::move(op), [&](int begin, int end) { return local_.save_layers(*full, backend::LayerRange{begin, end}); });
    for (const auto& a : answers) loaded = loaded && !a.unavailable && a.done.status == ResultStatus::Ok;
  }
  // Only this process's layers stay here: the stages' rows would be dead
  // weight (gather asks the stages for theirs).
  const backend::LayerRange here{0, options_.first_remote};
  s->local_->reset();
  local_.load_layers(local_.save_layers(*full, here), *s->local_, here);
  s->tokens_.assign(full->tokens().begin(), full->tokens().end());
  s->logits_.assign(full->logits().begin(), full->logits().end());
  s->hash_ = token_prefix_hash(s->tokens_);
  s->consistent_ = true;
  // A stage that could not take its layers gets them by replay at the next
  // evaluation (the history is all here).
  s->stale_ = !loaded;
}

std::vector<uint8_t> PipelineBackend::save_state(const backend::Session& session) const {
  return local_.save_state(*gather(session));
}

void PipelineBackend::load_state(std::span<const uint8_t> payload, backend::Session& session) const {
  auto full = local_.new_session(session.n_ctx());
  local_.load_state(payload, *full);
  scatter(std::move(full), session);
}

void PipelineBackend::save_session_file(const std::string& path, const backend::Session& session) const {
  local_.save_session_file(path, *gather(session));
}

void PipelineBackend::load_session_file(const std::string& path, backend::Session& session) const {
  auto full = local_.new_session(session.n_ctx());
  local_.load_session_file(path, *full);
  scatter(std::move(full), session);
}

std::vector<uint8_t> PipelineBackend::save_layers(const backend::Session& session, backend::LayerRange range) const {
  return local_.save_layers(*gather(session), range);
}

void PipelineBackend::load_layers(std::span<const uint8_t> state, backend::Session& session,
                                  backend::LayerRange range) const {
  if (range.begin != 0 || range.end != -1)
    throw Error("session load: a pipeline session takes the state of every layer (0:output)");
  auto full = local_.new_session(session.n_ctx());
  local_.load_layers(state, *full, range);
  scatter(std::move(full), session);
}

}  // namespace ds4::dist
