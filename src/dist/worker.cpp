#include "dist/worker.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "version/version.h"

namespace ds4::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kHelloInterval{500};
constexpr std::chrono::milliseconds kPoll{20};

std::string range_text(int begin, int end) {
  return std::to_string(begin) + ":" + (end < 0 ? std::string("output") : std::to_string(end));
}

}  // namespace

Worker::Worker(backend::Backend& backend, std::unique_ptr<Link> link, WorkerOptions options)
    : backend_(backend), link_(std::move(link)), options_(std::move(options)) {}

Worker::~Worker() { stop(); }

void Worker::stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  jobs_ready_.notify_all();
}

bool Worker::welcomed() const {
  std::lock_guard lock(mutex_);
  return welcomed_;
}

size_t Worker::sessions() const {
  std::lock_guard lock(mutex_);
  return session_count_;
}

size_t Worker::inline_evaluations() const {
  std::lock_guard lock(mutex_);
  return inline_evaluations_;
}

void Worker::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Hello Worker::hello() const {
  Hello h;
  h.version = std::string(ds4::version());
  h.commit = std::string(ds4::git_commit());
  h.fingerprint = options_.fingerprint;
  h.n_layer = static_cast<uint32_t>(backend_.n_layer());
  h.layer_begin = options_.layers.begin;
  h.layer_end = options_.layers.end;
  h.n_ctx = options_.n_ctx;
  h.numerics = static_cast<uint32_t>(backend_.numerics());
  h.hidden_size = static_cast<uint64_t>(backend_.hidden_size());
  h.name = options_.name;
  h.forward = link_->forward_address();
  return h;
}

size_t Worker::hand_overs() const {
  std::lock_guard lock(mutex_);
  return hand_overs_;
}

// Hand-overs the next stage never took go to the coordinator as this
// stage's RESULT (its hidden states, the reason), which carries them on.
void Worker::return_undelivered() {
  for (Undelivered& u : link_->take_undelivered()) {
    Eval e;
    try {
      e = decode_eval(u.bytes, "this worker's own hand-over");
    } catch (const Error& err) {
      log(std::string("dropped an undeliverable hand-over: ") + err.what());
      continue;
    }
    Result r;
    r.request = e.request;
    if (!e.trace.empty()) {
      r.eval_us = e.trace.back().eval_us;
      e.trace.pop_back();
    }
    r.trace = std::move(e.trace);
    r.forward_error = u.reason;
    r.bits = e.bits;
    r.hidden = std::move(e.hidden);
    link_->send(encode(r));
  }
}

void Worker::run() {
  std::thread evaluator([this] { evaluation_loop(); });
  auto last_heard = Clock::now();
  auto last_sent = Clock::time_point{};
  bool was_welcomed = false;
  // A WELCOME answers one HELLO; HELLOs said while no coordinator listened
  // queue up (ZeroMQ delivers them all once it binds), and the answers to
  // them after the first are not a new admission.
  bool hello_since_welcome = false;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    const auto now = Clock::now();
    const bool is_welcomed = welcomed();
    if (is_welcomed && now - last_heard > options_.peer_timeout) {
      log("the coordinator has been silent for " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard).count()) +
          " ms; saying HELLO until it answers");
      std::lock_guard lock(mutex_);
      welcomed_ = false;
    } else if (!is_welcomed && now - last_sent >= kHelloInterval) {
      link_->send(encode(hello()));
      last_sent = now;
      hello_since_welcome = true;
    } else if (is_welcomed && now - last_sent >= kHeartbeatInterval) {
      link_->send(encode(Heartbeat{}));
      last_sent = now;
    }
    for (const std::string& line : link_->take_security_events()) log(line);
    return_undelivered();
    for (auto& [address, reason] : link_->take_lost_connections()) {
      log(reason);
      link_->send(encode(ForwardLost{address, reason}));
    }
    auto received = link_->receive(kPoll);
    // Part of a long message (a wave of hidden states) is on its way.
    if (link_->take_heard_from_coordinator()) last_heard = Clock::now();
    if (!received) continue;
    Bytes* bytes = &received->bytes;
    if (!received->from_coordinator) {
      // Another worker hands over its hidden states; nothing else comes that way.
      try {
        const MessageType type = message_type(*bytes, "the previous stage");
        if (type != MessageType::Eval) {
          log(std::string("ignored a ") + message_type_name(type) + " from another worker");
          continue;
        }
      } catch (const Error& e) {
        log(std::string("ignored a bad message: ") + e.what());
        continue;
      }
      if (evaluate_inline(*bytes)) continue;
      std::lock_guard lock(mutex_);
      jobs_.push_back(Job{MessageType::Eval, std::move(*bytes)});
      jobs_ready_.notify_all();
      continue;
    }
    last_heard = Clock::now();
    try {
      const MessageType type = message_type(*bytes, "the coordinator");
      switch (type) {
        case MessageType::Welcome: {
          const Welcome w = decode_welcome(*bytes, "the coordinator");
          // The answer to a HELLO said before the last WELCOME came: this
          // worker is in already, and its sessions stay.
          if (!hello_since_welcome) break;
          hello_since_welcome = false;
          log("joined the coordinator as stage " + std::to_string(w.stage) + " (layers " +
              range_text(options_.layers.begin, options_.layers.end) + ")");
          std::lock_guard lock(mutex_);
          welcomed_ = true;
          // A new welcome: the coordinator may have restarted, its session
          // ids mean other conversations now.
          if (was_welcomed) jobs_.push_back(Job{MessageType::Welcome, {}});
          was_welcomed = true;
          jobs_ready_.notify_all();
          break;
        }
        case MessageType::Refuse: {
          const Refuse r = decode_refuse(*bytes, "the coordinator");
          std::lock_guard lock(mutex_);
          refused_ = r.reason;
          stopping_ = true;
          jobs_ready_.notify_all();
          break;
        }
        case MessageType::Rehello: {
          std::lock_guard lock(mutex_);
          welcomed_ = false;
          last_sent = {};
          break;
        }
        case MessageType::Heartbeat: break;
        case MessageType::Eval:
          if (evaluate_inline(*bytes)) break;
          [[fallthrough]];
        case MessageType::SessionOp: {
          std::lock_guard lock(mutex_);
          jobs_.push_back(Job{type, std::move(*bytes)});
          jobs_ready_.notify_all();
          break;
        }
        default: log(std::string("ignored a ") + message_type_name(type) + " from the coordinator");
      }
    } catch (const Error& e) {
      log(std::string("ignored a bad message: ") + e.what());
    }
  }
  evaluator.join();
  if (!refused_.empty()) throw Error("the coordinator refused this worker: " + refused_);
}

void Worker::evaluation_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      // A batch the I/O thread is evaluating finishes first (arrival order).
      jobs_ready_.wait(lock, [&] { return stopping_ || (!jobs_.empty() && !evaluating_); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      evaluating_ = true;
    }
    finish(answer(job));
  }
}

// The reply is queued on the link under the same lock that ends the
// evaluation: a batch arriving after the reply (the next decode step) finds
// no evaluation running and may go inline, while one queued or evaluated
// inline meanwhile cannot overtake it (replies leave in evaluation order,
// which the coordinator's forwarding of prefill waves relies on).
void Worker::finish(Reply reply) {
  std::lock_guard lock(mutex_);
  if (reply.small_batch_quick) small_batches_quick_ = *reply.small_batch_quick;
  if (!reply.to.empty()) {
    link_->send_to(reply.to, std::move(reply.bytes));
    ++hand_overs_;
  } else if (!reply.bytes.empty()) {
    link_->send(std::move(reply.bytes));
  }
  evaluating_ = false;
  session_count_ = sessions_.size();
  jobs_ready_.notify_all();  // the evaluation thread may take what came meanwhile
}

namespace {

size_t batch_tokens(const Eval& eval) {
  size_t n = 0;
  for (const EvalPart& p : eval.parts) n += p.tokens.size();
  return n;
}

}  // namespace

bool Worker::evaluate_inline(Bytes& bytes) {
  // Larger than any small batch's hidden states (plus its token lists): a
  // prefill wave, not worth decoding here.
  const size_t small_bytes = kInlineTokens * static_cast<size_t>(backend_.hidden_size()) * sizeof(float) + (1u << 20);
  if (bytes.size() > small_bytes) return false;
  Eval eval;
  try {
    eval = decode_eval(bytes, "the coordinator");
  } catch (const Error&) {
    return false;  // the evaluation thread answers it with the error
  }
  if (batch_tokens(eval) > kInlineTokens) return false;
  {
    std::lock_guard lock(mutex_);
    if (!small_batches_quick_ || evaluating_ || !jobs_.empty() || stopping_) return false;
    evaluating_ = true;
  }
  Reply reply = answer_eval(bytes, &eval);
  {
    std::lock_guard lock(mutex_);
    ++inline_evaluations_;
  }
  finish(std::move(reply));
  return true;
}

// Evaluates an EVAL (decoded already, or from its bytes) into its RESULT;
// times small batches for evaluate_inline.
Worker::Reply Worker::answer_eval(const Bytes& bytes, const Eval* decoded) {
  Result r;
  const auto t0 = Clock::now();
  size_t tokens = SIZE_MAX;
  Reply reply;
  Eval eval;  // outlives the try: the answer's trace is read from it
  try {
    if (decoded == nullptr) {
      eval = decode_eval(bytes, "the coordinator or the previous stage");
      decoded = &eval;
    }
    tokens = batch_tokens(*decoded);
    r = evaluate(*decoded);
    if (r.status == ResultStatus::Ok && !decoded->route.empty()) {
      // Hand the hidden states to the next stage, with the rest of the route.
      Eval next;
      next.request = decoded->request;
      next.layer_begin = decoded->route[0].layer_begin;
      next.layer_end = decoded->route[0].layer_end;
      next.bits = decoded->bits;
      next.parts = decoded->parts;
      next.hidden = std::move(r.hidden);
      next.route.assign(decoded->route.begin() + 1, decoded->route.end());
      next.trace = decoded->trace;
      next.trace.push_back({options_.layers.begin, r.eval_us});
      reply.to = decoded->route[0].address;
      reply.bytes = encode(next);
    }
  } catch (const Error& e) {
    r.status = ResultStatus::Failed;
    r.error = e.what();
    // The request id is the first field after the header; a message too
    // short for it fails on the coordinator's side by its timeout.
    if (bytes.size() >= 20) std::memcpy(&r.request, bytes.data() + 12, 8);
  }
  if (tokens <= kInlineTokens) reply.small_batch_quick = Clock::now() - t0 < options_.inline_budget;
  if (reply.to.empty()) {
    r.trace = decoded != nullptr ? decoded->trace : std::vector<StageTime>{};
    reply.bytes = encode(r);
  }
  return reply;
}

Worker::Reply Worker::answer(const Job& job) {
  switch (job.type) {
    case MessageType::Welcome: sessions_.clear(); return {};
    case MessageType::Eval: return answer_eval(job.bytes, nullptr);
    case MessageType::SessionOp: {
      SessionOpDone d;
      try {
        d = session_op(decode_session_op(job.bytes, "the coordinator"));
      } catch (const Error& e) {
        d.status = ResultStatus::Failed;
        d.error = e.what();
        if (job.bytes.size() >= 20) std::memcpy(&d.request, job.bytes.data() + 12, 8);
      }
      Reply reply;
      reply.bytes = encode(d);
      return reply;
    }
    default: return {};
  }
}

Worker::Held* Worker::held_for(const EvalPart& part) {
  auto it = sessions_.find(part.session);
  if (part.reset) {
    if (part.pos0 != 0) throw Error("a reset span must start at position 0, not " + std::to_string(part.pos0));
    if (it == sessions_.end()) it = sessions_.emplace(part.session, Held{backend_.new_session(options_.n_ctx)}).first;
    it->second.session->reset();
    it->second.hash = kEmptyPrefixHash;
    return &it->second;
  }
  if (it == sessions_.end()) {
    if (part.pos0 != 0 || part.prefix_hash != kEmptyPrefixHash) return nullptr;
    it = sessions_.emplace(part.session, Held{backend_.new_session(options_.n_ctx)}).first;
  }
  Held& h = it->second;
  if (h.session->size() != part.pos0 || h.hash != part.prefix_hash || !h.session->consistent()) return nullptr;
  return &h;
}

Result Worker::evaluate(const Eval& eval) {
  Result r;
  r.request = eval.request;
  r.bits = eval.bits;
  if (eval.layer_begin != options_.layers.begin || eval.layer_end != options_.layers.end)
    throw Error("EVAL for layers " + range_text(eval.layer_begin, eval.layer_end) + " reached the worker of layers " +
                range_text(options_.layers.begin, options_.layers.end));
  const auto hd = static_cast<size_t>(backend_.hidden_size());
  const bool last = options_.layers.end < 0;
  const bool first = options_.layers.begin == 0;
  size_t n_tokens = 0;
  for (const EvalPart& p : eval.parts) n_tokens += p.tokens.size();
  if (!first && eval.hidden.size() != n_tokens * hd)
    throw Error("EVAL carries " + std::to_string(eval.hidden.size()) + " hidden floats for " +
                std::to_string(n_tokens) + " tokens of " + std::to_string(hd));
  std::vector<Held*> held;
  for (const EvalPart& p : eval.parts) {
    Held* h = held_for(p);
    if (h == nullptr) {
      r.status = ResultStatus::Mismatch;
      r.error = "session " + std::to_string(p.session) + " does not continue at position " + std::to_string(p.pos0);
      return r;
    }
    held.push_back(h);
  }
  if (!last) r.hidden.assign(n_tokens * hd, 0.0f);
  // all_logits rows go straight into r.logits; the last rows are copied after.
  size_t logit_rows = 0;
  for (const EvalPart& p : eval.parts) {
    if (p.all_logits) logit_rows += p.tokens.size();
    else if (!p.skip_logits && !p.tokens.empty()) logit_rows += 1;
  }
  const auto nv = static_cast<size_t>(backend_.n_vocab());
  if (last) r.logits.assign(logit_rows * nv, 0.0f);
  std::vector<backend::Part> parts(eval.parts.size());
  size_t row = 0, logit_row = 0;
  std::vector<size_t> last_row_at(eval.parts.size(), SIZE_MAX);
  for (size_t i = 0; i < eval.parts.size(); ++i) {
    const EvalPart& p = eval.parts[i];
    backend::Part& bp = parts[i];
    bp.session = held[i]->session.get();
    bp.tokens = p.tokens;
    bp.skip_logits = p.skip_logits;
    if (!first) bp.hidden_in = eval.hidden.data() + row * hd;
    if (!last) bp.hidden_out = r.hidden.data() + row * hd;
    if (last && p.all_logits) {
      bp.all_logits = r.logits.data() + logit_row * nv;
      logit_row += p.tokens.size();
    } else if (last && !p.skip_logits && !p.tokens.empty()) {
      last_row_at[i] = logit_row++;
    }
    row += p.tokens.size();
  }
  const auto t0 = Clock::now();
  try {
    backend_.eval(parts, options_.layers);
  } catch (const Error&) {
    // The backend checked first; a failure inside leaves these sessions
    // unusable: forget them (the coordinator replays).
    for (const EvalPart& p : eval.parts) sessions_.erase(p.session);
    throw;
  }
  r.eval_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  if (options_.layers.end == backend_.n_layer()) keep_logit_rows(eval, hd, r.hidden);
  for (size_t i = 0; i < eval.parts.size(); ++i) {
    held[i]->hash = token_prefix_hash(eval.parts[i].tokens, held[i]->hash);
    if (last_row_at[i] != SIZE_MAX) {
      const auto logits = held[i]->session->logits();
      if (logits.size() != nv) throw Error("the session has no logits after its span");
      std::copy(logits.begin(), logits.end(), r.logits.begin() + static_cast<ptrdiff_t>(last_row_at[i] * nv));
    }
  }
  return r;
}

// The last stage without the head hands back only the rows whose logits
// are wanted (every row of an all_logits part, the last of the others
// unless skipped), in part order: the coordinator's head needs no more.
void Worker::keep_logit_rows(const Eval& eval, size_t hd, Floats& hidden) {
  size_t row = 0, kept = 0;
  for (const EvalPart& p : eval.parts) {
    const size_t n = p.tokens.size();
    size_t from = n, to = n;
    if (p.all_logits) from = 0;
    else if (!p.skip_logits && n > 0) from = n - 1;
    for (size_t t = from; t < to; ++t, ++kept)
      std::copy_n(hidden.begin() + static_cast<ptrdiff_t>((row + t) * hd), hd, hidden.begin() + static_cast<ptrdiff_t>(kept * hd));
    row += n;
  }
  hidden.resize(kept * hd);
}

SessionOpDone Worker::session_op(const SessionOp& op) {
  SessionOpDone d;
  d.request = op.request;
  switch (op.kind) {
    case SessionOpKind::Drop: sessions_.erase(op.session); break;
    case SessionOpKind::Copy: {
      const auto src = sessions_.find(op.other);
      if (src == sessions_.end()) {
        d.status = ResultStatus::Mismatch;
        d.error = "no session " + std::to_string(op.other);
        sessions_.erase(op.session);
        break;
      }
      Held copy{src->second.session->snapshot(), src->second.hash};
      sessions_[op.session] = std::move(copy);
      break;
    }
    case SessionOpKind::SaveState: {
      const auto it = sessions_.find(op.session);
      if (it == sessions_.end()) {
        d.status = ResultStatus::Mismatch;
        d.error = "no session " + std::to_string(op.session);
        break;
      }
      d.payload = backend_.save_layers(*it->second.session, options_.layers);
      break;
    }
    case SessionOpKind::LoadState: {
      Held h{backend_.new_session(options_.n_ctx)};
      backend_.load_layers(op.payload, *h.session, options_.layers);
      h.hash = token_prefix_hash(h.session->tokens());
      sessions_[op.session] = std::move(h);
      break;
    }
  }
  return d;
}

}  // namespace ds4::dist
