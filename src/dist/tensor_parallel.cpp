#include "dist/tensor_parallel.h"

#include <cstdio>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "dist/wire.h"

namespace ds4::dist {

namespace {

// Rank 0's commands, sent before rank 0 makes the same call on its share.
enum class Op : uint8_t {
  NewSession = 1,  // id, n_ctx
  Drop,            // id
  Reset,           // id
  Snapshot,        // source id, new id
  Restore,         // id, snapshot id
  Eval,            // parts (id, flags, tokens), progress
  Head,            // n, hidden states
  LoadState,       // id, payload
  LoadLayers,      // id, range, state
  SetChunk,        // n
  Stop,
};

constexpr uint8_t kAllLogits = 1;
constexpr uint8_t kSkipLogits = 2;

// Bounds of a command's arrays: tokens of one call, payload bytes.
constexpr uint64_t kMaxTokens = uint64_t{1} << 32;
constexpr uint64_t kMaxBytes = uint64_t{1} << 40;

WireWriter command(Op op) {
  WireWriter w;
  w.put(static_cast<uint8_t>(op));
  return w;
}

}  // namespace

class TensorParallelBackend::Session final : public backend::Session {
 public:
  Session(const TensorParallelBackend &owner, uint64_t id, std::unique_ptr<backend::Session> local)
      : owner_(&owner), id_(id), local_(std::move(local)) {}
  ~Session() override { owner_->drop(id_); }

  int64_t n_ctx() const override { return local_->n_ctx(); }
  std::span<const int32_t> tokens() const override { return local_->tokens(); }
  std::span<const float> logits() const override { return local_->logits(); }
  bool consistent() const override { return local_->consistent(); }
  void reset() override { owner_->reset(*this); }
  std::unique_ptr<backend::Session> snapshot() const override { return owner_->snapshot(*this); }
  void restore(const backend::Session &from) override { owner_->restore(*this, from); }
  size_t state_bytes() const override { return local_->state_bytes(); }

  const TensorParallelBackend *owner() const { return owner_; }
  uint64_t id() const { return id_; }
  backend::Session &local() const { return *local_; }

 private:
  const TensorParallelBackend *owner_;
  uint64_t id_;
  std::unique_ptr<backend::Session> local_;
};

TensorParallelBackend::TensorParallelBackend(backend::Backend &local, backend::Collective &group)
    : local_(local), group_(group) {
  if (group.rank() != 0) throw Error("tensor parallel: the serving backend runs on rank 0, not " + std::to_string(group.rank()));
}

TensorParallelBackend::~TensorParallelBackend() {
  std::lock_guard lock(mutex_);
  try {
    send(command(Op::Stop).take());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tensor parallel: stopping the other ranks: %s\n", e.what());
  }
}

void TensorParallelBackend::send(const Bytes& bytes) const {
  std::vector<uint8_t> command(bytes.begin(), bytes.end());  // the collective's type; commands are small
  group_.broadcast(command);
}

template <typename Fn>
void TensorParallelBackend::in_step(const char *what, Fn &&fn) const {
  const uint64_t before = group_.calls();
  try {
    fn();
  } catch (const Cancelled &) {
    throw;  // every rank heard the same answer after the same layer
  } catch (const std::exception &e) {
    // Refused before any collective call: every rank refused it alike.
    if (group_.calls() == before && dynamic_cast<const Error *>(&e) != nullptr) throw;
    group_.abort(std::string("tensor parallel: ") + what + " failed on rank 0 part-way through: " + e.what());
  }
}

TensorParallelBackend::Session &TensorParallelBackend::tp_session(const backend::Session &session,
                                                                  const char *what) const {
  const auto *s = dynamic_cast<const Session *>(&session);
  if (s == nullptr || s->owner() != this)
    throw Error(std::string(what) + ": the session belongs to another backend");
  return const_cast<Session &>(*s);
}

uint64_t TensorParallelBackend::session_id(const backend::Session &session) const {
  return tp_session(session, "session id").id();
}

bool TensorParallelBackend::owns(const backend::Session &session) const {
  const auto *s = dynamic_cast<const Session *>(&session);
  return s != nullptr && s->owner() == this;
}

std::unique_ptr<backend::Session> TensorParallelBackend::new_session(int64_t n_ctx) const {
  std::lock_guard lock(mutex_);
  std::unique_ptr<backend::Session> local = local_.new_session(n_ctx);
  const uint64_t id = next_id_++;
  WireWriter w = command(Op::NewSession);
  w.put(id);
  w.put(n_ctx);
  send(w.take());
  return std::make_unique<Session>(*this, id, std::move(local));
}

void TensorParallelBackend::drop(uint64_t id) const noexcept {
  std::lock_guard lock(mutex_);
  try {
    WireWriter w = command(Op::Drop);
    w.put(id);
    send(w.take());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tensor parallel: dropping session %llu: %s\n", static_cast<unsigned long long>(id), e.what());
  }
}

void TensorParallelBackend::reset(Session &s) const {
  std::lock_guard lock(mutex_);
  WireWriter w = command(Op::Reset);
  w.put(s.id());
  send(w.take());
  s.local().reset();
}

std::unique_ptr<backend::Session> TensorParallelBackend::snapshot(const Session &s) const {
  std::lock_guard lock(mutex_);
  std::unique_ptr<backend::Session> copy = s.local().snapshot();
  const uint64_t id = next_id_++;
  WireWriter w = command(Op::Snapshot);
  w.put(s.id());
  w.put(id);
  send(w.take());
  return std::make_unique<Session>(*this, id, std::move(copy));
}

void TensorParallelBackend::restore(Session &s, const backend::Session &from) const {
  const Session &source = tp_session(from, "restore");
  std::lock_guard lock(mutex_);
  s.local().restore(source.local());  // refused here: nothing sent
  WireWriter w = command(Op::Restore);
  w.put(s.id());
  w.put(source.id());
  send(w.take());
}

void TensorParallelBackend::eval(std::span<const backend::Part> parts, backend::LayerRange range) {
  if (range.begin != 0 || range.end >= 0)
    throw Error("eval: tensor parallel evaluates every layer, not a range from " + std::to_string(range.begin));
  std::vector<backend::Part> local(parts.begin(), parts.end());
  WireWriter w = command(Op::Eval);
  w.put(static_cast<uint32_t>(parts.size()));
  for (size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].session == nullptr) throw Error("eval: part " + std::to_string(p) + " has no session");
    if (parts[p].hidden_in != nullptr || parts[p].hidden_out != nullptr)
      throw Error("eval: tensor parallel takes no hidden states (part " + std::to_string(p) + ")");
    Session &s = tp_session(*parts[p].session, "eval");
    local[p].session = &s.local();
    w.put(s.id());
    w.put(static_cast<uint8_t>((parts[p].all_logits ? kAllLogits : 0) | (parts[p].skip_logits ? kSkipLogits : 0)));
    w.put_array(parts[p].tokens);
  }
  w.put(static_cast<uint8_t>(progress_ ? 1 : 0));
  std::lock_guard lock(mutex_);
  send(w.take());
  if (progress_) {
    // The answer after each layer is rank 0's, heard by every rank.
    local_.set_progress([this](int64_t done, int64_t total) { return group_.agree(progress_(done, total)); });
  } else {
    local_.set_progress(nullptr);
  }
  in_step("an evaluation", [&] { local_.eval(local); });
}

void TensorParallelBackend::eval_head(const float *hidden, int64_t n, float *logits) {
  if (n < 0) throw Error("eval_head: " + std::to_string(n) + " states");
  WireWriter w = command(Op::Head);
  w.put(n);
  w.put_array(std::span<const float>(hidden, static_cast<size_t>(n * hidden_size())));
  std::lock_guard lock(mutex_);
  send(w.take());
  in_step("the output head", [&] { local_.eval_head(hidden, n, logits); });
}

void TensorParallelBackend::set_prefill_chunk(int n) {
  std::lock_guard lock(mutex_);
  local_.set_prefill_chunk(n);  // refused here: nothing sent
  WireWriter w = command(Op::SetChunk);
  w.put(static_cast<int32_t>(n));
  send(w.take());
}

std::vector<uint8_t> TensorParallelBackend::save_state(const backend::Session &session) const {
  return local_.save_state(tp_session(session, "save state").local());
}

void TensorParallelBackend::load_state(std::span<const uint8_t> payload, backend::Session &session) const {
  Session &s = tp_session(session, "load state");
  std::lock_guard lock(mutex_);
  local_.load_state(payload, s.local());  // refused here: nothing sent
  WireWriter w = command(Op::LoadState);
  w.put(s.id());
  w.put_array(payload);
  send(w.take());
}

std::vector<uint8_t> TensorParallelBackend::save_layers(const backend::Session &session,
                                                        backend::LayerRange range) const {
  return local_.save_layers(tp_session(session, "save layers").local(), range);
}

void TensorParallelBackend::load_layers(std::span<const uint8_t> state, backend::Session &session,
                                        backend::LayerRange range) const {
  Session &s = tp_session(session, "load layers");
  std::lock_guard lock(mutex_);
  local_.load_layers(state, s.local(), range);
  WireWriter w = command(Op::LoadLayers);
  w.put(s.id());
  w.put(static_cast<int32_t>(range.begin));
  w.put(static_cast<int32_t>(range.end));
  w.put_array(state);
  send(w.take());
}

void TensorParallelBackend::save_session_file(const std::string &path, const backend::Session &session) const {
  local_.save_session_file(path, tp_session(session, path.c_str()).local());
}

void TensorParallelBackend::load_session_file(const std::string &path, backend::Session &session) const {
  Session &s = tp_session(session, path.c_str());
  std::lock_guard lock(mutex_);
  local_.load_session_file(path, s.local());
  // The other ranks get the loaded state itself (they may not see the file).
  WireWriter w = command(Op::LoadState);
  w.put(s.id());
  w.put_array(std::span<const uint8_t>(local_.save_state(s.local())));
  send(w.take());
}

// ---- the other ranks ----

class TensorParallelFollower::Impl {
 public:
  Impl(backend::Backend &local, backend::Collective &group) : local_(local), group_(group) {}

  backend::Collective &group() { return group_; }
  const backend::Session *find(uint64_t id) const {
    const auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : it->second.get();
  }

  // False after Stop.
  bool step(std::span<const uint8_t> bytes) {
    WireReader r(bytes, "tensor-parallel command");
    const auto op = static_cast<Op>(r.get<uint8_t>("op"));
    switch (op) {
      case Op::Stop: return false;
      case Op::NewSession: {
        const auto id = r.get<uint64_t>("id");
        const auto n_ctx = r.get<int64_t>("n_ctx");
        r.expect_end();
        sessions_[id] = local_.new_session(n_ctx);
        return true;
      }
      case Op::Drop: {
        const auto id = r.get<uint64_t>("id");
        r.expect_end();
        session(id);
        sessions_.erase(id);
        return true;
      }
      case Op::Reset: session(r.get<uint64_t>("id")).reset(); return true;
      case Op::Snapshot: {
        backend::Session &from = session(r.get<uint64_t>("source"));
        const auto id = r.get<uint64_t>("id");
        sessions_[id] = from.snapshot();
        return true;
      }
      case Op::Restore: {
        backend::Session &to = session(r.get<uint64_t>("id"));
        to.restore(session(r.get<uint64_t>("snapshot")));
        return true;
      }
      case Op::Eval: eval(r); return true;
      case Op::Head: {
        const auto n = r.get<int64_t>("n");
        const std::vector<float> hidden = r.get_array<float>("hidden", kMaxBytes / sizeof(float));
        if (n < 0 || hidden.size() != static_cast<size_t>(n * local_.hidden_size()))
          r.fail("hidden", "not n x hidden_size floats");
        logits_.resize(static_cast<size_t>(n) * static_cast<size_t>(local_.n_vocab()));
        local_.eval_head(hidden.data(), n, logits_.data());
        return true;
      }
      case Op::LoadState: {
        backend::Session &s = session(r.get<uint64_t>("id"));
        const std::vector<uint8_t> payload = r.get_array<uint8_t>("payload", kMaxBytes);
        local_.load_state(payload, s);
        return true;
      }
      case Op::LoadLayers: {
        backend::Session &s = session(r.get<uint64_t>("id"));
        backend::LayerRange range;
        range.begin = r.get<int32_t>("begin");
        range.end = r.get<int32_t>("end");
        const std::vector<uint8_t> state = r.get_array<uint8_t>("state", kMaxBytes);
        local_.load_layers(state, s, range);
        return true;
      }
      case Op::SetChunk: local_.set_prefill_chunk(r.get<int32_t>("n")); return true;
    }
    group_.abort("tensor parallel: rank " + std::to_string(group_.rank()) + " got unknown command " +
                 std::to_string(static_cast<int>(op)) + " (another build on rank 0?)");
    return false;  // abort() does not return
  }

 private:
  // A session rank 0 named and this rank does not have: out of step.
  backend::Session &session(uint64_t id) {
    const auto it = sessions_.find(id);
    if (it == sessions_.end())
      group_.abort("tensor parallel: rank " + std::to_string(group_.rank()) + " has no session " + std::to_string(id) +
                   " (the ranks are out of step)");
    return *it->second;
  }

  void eval(WireReader &r) {
    const auto n_parts = r.get<uint32_t>("parts");
    std::vector<backend::Part> parts(n_parts);
    tokens_.resize(n_parts);
    all_logits_.resize(n_parts);
    for (uint32_t p = 0; p < n_parts; ++p) {
      parts[p].session = &session(r.get<uint64_t>("session"));
      const auto flags = r.get<uint8_t>("flags");
      tokens_[p] = r.get_array<int32_t>("tokens", kMaxTokens);
      parts[p].tokens = tokens_[p];
      parts[p].skip_logits = (flags & kSkipLogits) != 0;
      if ((flags & kAllLogits) != 0) {
        all_logits_[p].resize(tokens_[p].size() * static_cast<size_t>(local_.n_vocab()));
        parts[p].all_logits = all_logits_[p].data();
      }
    }
    const bool progress = r.get<uint8_t>("progress") != 0;
    r.expect_end();
    if (progress) {
      local_.set_progress([this](int64_t, int64_t) { return group_.agree(true); });
    } else {
      local_.set_progress(nullptr);
    }
    local_.eval(parts);
  }

  backend::Backend &local_;
  backend::Collective &group_;
  std::unordered_map<uint64_t, std::unique_ptr<backend::Session>> sessions_;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<std::vector<float>> all_logits_;
  std::vector<float> logits_;
};

TensorParallelFollower::TensorParallelFollower(backend::Backend &local, backend::Collective &group)
    : impl_(std::make_unique<Impl>(local, group)) {
  if (group.rank() == 0) throw Error("tensor parallel: rank 0 serves; the other ranks follow");
}

TensorParallelFollower::~TensorParallelFollower() = default;

void TensorParallelFollower::run() {
  while (serve_one()) {
  }
}

const backend::Session *TensorParallelFollower::session(uint64_t id) const { return impl_->find(id); }

bool TensorParallelFollower::serve_one() {
  backend::Collective &group = impl_->group();
  std::vector<uint8_t> bytes;
  group.broadcast(bytes);
  const uint64_t before = group.calls();
  try {
    return impl_->step(bytes);
  } catch (const Cancelled &) {
    // Rank 0's answer after a layer, heard here too: the same on every rank.
  } catch (const Error &e) {
    // Refused before any collective call: rank 0, with the same sessions,
    // refused it alike and told its caller.
    if (group.calls() != before)
      group.abort("tensor parallel: rank " + std::to_string(group.rank()) + " failed part-way through: " + e.what());
  } catch (const std::exception &e) {
    group.abort("tensor parallel: rank " + std::to_string(group.rank()) + ": " + e.what());
  }
  return true;
}

}  // namespace ds4::dist
