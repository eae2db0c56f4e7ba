#include "dist/coordinator.h"

#include <algorithm>

#include "core/error.h"
#include "dist/worker.h"

namespace ds4::dist {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{20};

std::string hex(const std::array<uint8_t, 32>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 8; ++i) {  // the first 8 bytes identify it in a message
    s += digits[b[static_cast<size_t>(i)] >> 4];
    s += digits[b[static_cast<size_t>(i)] & 15];
  }
  return s;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool overlaps(int b0, int e0, int b1, int e1, int n_layer) {
  const int end0 = e0 < 0 ? n_layer : e0, end1 = e1 < 0 ? n_layer : e1;
  return b0 < end1 && b1 < end0;
}

}  // namespace

std::string resolve_forward_address(const std::string& offered, const std::string& seen_at) {
  for (const char* any : {"tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:", "tcp://:::"}) {
    const std::string prefix(any);
    if (offered.rfind(prefix, 0) != 0) continue;
    if (seen_at.empty() || seen_at == "unknown address") return "";
    const std::string host = seen_at.find(':') != std::string::npos ? "[" + seen_at + "]" : seen_at;
    return "tcp://" + host + ":" + offered.substr(prefix.size());
  }
  return offered;
}

std::string layer_range_text(int begin, int end) {
  return std::to_string(begin) + ":" + (end < 0 ? std::string("output") : std::to_string(end));
}

void parse_layer_range(const std::string& text, int* begin, int* end) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& v) {
    if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos)
      throw Error("--layers '" + text + "': expected A:B or A:output with layer numbers");
    return std::stoi(v);
  };
  if (colon == std::string::npos) throw Error("--layers '" + text + "': expected A:B or A:output");
  *begin = number(text.substr(0, colon));
  const std::string tail = text.substr(colon + 1);
  *end = tail == "output" ? -1 : number(tail);
  if (*end >= 0 && *end <= *begin) throw Error("--layers '" + text + "': the range is empty (B must exceed A)");
}

std::string handshake_problem(const Hello& h, const Expectation& e) {
  if (h.version != e.version || h.commit != e.commit)
    return "another build: the worker is " + h.version + " (commit " + h.commit + "), the coordinator " + e.version +
           " (commit " + e.commit + ")";
  if (h.fingerprint != e.fingerprint)
    return "another model file: fingerprint " + hex(h.fingerprint) + "..., the coordinator's " + hex(e.fingerprint) +
           "...";
  if (h.n_layer != e.n_layer)
    return "the model has " + std::to_string(h.n_layer) + " layers there, " + std::to_string(e.n_layer) + " here";
  if (h.numerics != e.numerics) return "other numerics (--quality on one side only)";
  if (h.hidden_size != e.hidden_size)
    return "hidden states of " + std::to_string(h.hidden_size) + " floats, the coordinator's " +
           std::to_string(e.hidden_size);
  if (h.n_ctx < e.n_ctx)
    return "a context of " + std::to_string(h.n_ctx) + " tokens, the coordinator's is " + std::to_string(e.n_ctx) +
           " (give the worker --ctx " + std::to_string(e.n_ctx) + " or more)";
  const auto n = static_cast<int32_t>(e.n_layer);
  const int32_t end = h.layer_end < 0 ? n : h.layer_end;
  if (h.layer_begin < 0 || h.layer_begin >= n || end > n || h.layer_begin >= end)
    return "layers " + layer_range_text(h.layer_begin, h.layer_end) + " do not fit a model of " +
           std::to_string(n) + " layers (A:B with A < B <= " + std::to_string(n) + ", or A:output)";
  if (h.layer_begin < e.first_remote)
    return "layers " + layer_range_text(h.layer_begin, h.layer_end) + " overlap the coordinator's own 0:" +
           std::to_string(e.first_remote);
  return "";
}

Coordinator::Coordinator(std::unique_ptr<Hub> hub, Expectation expect, CoordinatorOptions options)
    : hub_(std::move(hub)), expect_(std::move(expect)), options_(std::move(options)) {
  io_ = std::thread([this] { io_loop(); });
}

Coordinator::~Coordinator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  io_.join();
}

void Coordinator::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

void Coordinator::io_loop() {
  auto last_beat = Clock::time_point{};
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    for (const std::string& line : hub_->take_security_events()) log(line);
    drop_unreachable();
    if (auto in = hub_->receive(kPoll)) on_message(std::move(*in));
    if (const std::vector<PeerId> heard = hub_->take_heard(); !heard.empty()) {
      // Part of a long message (a wave of hidden states) is on its way.
      std::lock_guard lock(mutex_);
      for (const PeerId& id : heard)
        if (const auto it = peers_.find(id); it != peers_.end()) it->second.last_heard = Clock::now();
    }
    const auto now = Clock::now();
    if (now - last_beat >= kHeartbeatInterval) {
      std::lock_guard lock(mutex_);
      for (const auto& [id, peer] : peers_) hub_->send(id, encode(Heartbeat{}));
      last_beat = now;
    }
    check_liveness();
  }
}

void Coordinator::on_message(Incoming in) {
  const std::string from = "a peer at " + in.address;
  MessageType type;
  try {
    type = message_type(in.bytes, from);
  } catch (const Error& e) {
    log(std::string("ignored a message: ") + e.what());
    return;
  }
  try {
    if (type == MessageType::Hello) return on_hello(in);
    std::lock_guard lock(mutex_);
    const auto it = peers_.find(in.peer);
    if (it == peers_.end()) {
      // Not (or no longer) admitted: it must say HELLO first.
      hub_->send(in.peer, encode_rehello());
      return;
    }
    it->second.last_heard = Clock::now();
  } catch (const Error& e) {
    log(std::string("ignored a message: ") + e.what());
    return;
  }
  try {
    if (type == MessageType::Result) on_result(in);
    else if (type == MessageType::SessionOpDone) on_op_done(in);
    else if (type == MessageType::ForwardLost) on_forward_lost(in);
  } catch (const Error& e) {
    log(std::string("ignored a message: ") + e.what());
  }
}

void Coordinator::on_hello(const Incoming& in) {
  const Hello h = decode_hello(in.bytes, "a peer at " + in.address);
  const std::string who = "worker " + h.name + " at " + in.address;
  std::string problem = handshake_problem(h, expect_);
  std::lock_guard lock(mutex_);
  PeerId replaced;
  if (problem.empty()) {
    for (const auto& [id, p] : peers_) {
      if (id == in.peer) continue;
      if (p.begin == h.layer_begin && p.end == h.layer_end) {
        replaced = id;  // the same stage again (a restarted worker): the new one takes over
      } else if (overlaps(p.begin, p.end, h.layer_begin, h.layer_end, static_cast<int>(expect_.n_layer))) {
        problem = "layers " + layer_range_text(h.layer_begin, h.layer_end) + " overlap those of worker " + p.name +
                  " (" + layer_range_text(p.begin, p.end) + ")";
        break;
      }
    }
  }
  if (!problem.empty()) {
    log("refused " + who + ": " + problem);
    hub_->send(in.peer, encode(Refuse{problem}));
    return;
  }
  if (!replaced.empty()) {
    log(who + " replaces worker " + peers_[replaced].name + " for layers " + layer_range_text(h.layer_begin, h.layer_end));
    fail_at(replaced, "worker " + peers_[replaced].name + " was replaced");
    peers_.erase(replaced);
  }
  Peer& p = peers_[in.peer];
  const bool rejoin = !p.id.empty();
  p.id = in.peer;
  p.name = h.name;
  p.address = in.address;
  p.begin = h.layer_begin;
  p.end = h.layer_end;
  p.last_heard = Clock::now();
  p.stats.begin = p.begin;
  p.stats.end = p.end;
  p.stats.name = p.name;
  p.stats.address = p.address;
  p.forward = options_.forward_between_workers ? resolve_forward_address(h.forward, in.address) : "";
  p.stats.forward = p.forward;
  hub_->send(in.peer, encode(Welcome{next_stage_++}));
  if (!rejoin) log(who + " joined: layers " + layer_range_text(p.begin, p.end));
  changed_.notify_all();
}

void Coordinator::on_result(const Incoming& in) {
  Result r = decode_result(in.bytes, "a worker at " + in.address);
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(r.request);
  if (it == pending_.end() || it->second.done) return;  // failed meanwhile
  Pending& p = it->second;
  if (std::find(p.route.begin(), p.route.end(), in.peer) == p.route.end()) return;
  Peer& peer = peers_.at(in.peer);
  record_telemetry(p, peer, r);
  peer.stats.bytes_received += in.bytes.size();
  if (r.status != ResultStatus::Ok) {
    p.done = true;
    p.outcome.status = r.status;
    p.outcome.error = "stage " + layer_range_text(peer.begin, peer.end) + " (worker " + peer.name + "): " + r.error;
    changed_.notify_all();
    return;
  }
  if (peer.end < 0 || peer.end == static_cast<int>(expect_.n_layer)) {
    // The route's end: logits, or (a last stage without the head) the
    // hidden states of the rows whose logits are wanted.
    p.done = true;
    p.outcome.logits = std::move(r.logits);
    p.outcome.hidden = std::move(r.hidden);
    changed_.notify_all();
    return;
  }
  if (!r.forward_error.empty()) {
    // The next stage stays reachable through the coordinator.
    if (Peer* next = stage_at(peer.end); next != nullptr && !next->forward.empty()) {
      log("stage " + layer_range_text(peer.begin, peer.end) + " (worker " + peer.name + ") cannot hand over to " +
          "stage " + layer_range_text(next->begin, next->end) + ": " + r.forward_error +
          "; its input now goes through the coordinator");
      next->forward.clear();
      next->stats.forward.clear();
    }
  }
  forward(it->first, p, peer.end, std::move(r.hidden));
}

// Each stage the answer passed through is credited its evaluation (the
// answer's trace and its own) and an even share of the rest of the round
// trip.
void Coordinator::record_telemetry(const Pending& p, Peer& answered, const Result& r) {
  const double round_trip = seconds(Clock::now() - p.sent);
  std::vector<std::pair<Peer*, double>> evals;
  for (const StageTime& t : r.trace)
    if (Peer* s = stage_at(t.layer_begin)) evals.emplace_back(s, static_cast<double>(t.eval_us) * 1e-6);
  evals.emplace_back(&answered, static_cast<double>(r.eval_us) * 1e-6);
  double total_eval = 0;
  for (const auto& e : evals) total_eval += e.second;
  const double wait_share = std::max(0.0, round_trip - total_eval) / static_cast<double>(evals.size());
  for (auto& [stage, eval] : evals) {
    stage->stats.requests += 1;
    stage->stats.eval_seconds += eval;
    stage->stats.wait_seconds += wait_share;
  }
}

// A worker's connection to the next stage broke: what it handed over there
// may be lost, so the requests routed that way fail now (rather than wait
// for an answer that never comes), and that stage's input goes through the
// coordinator from now on.
void Coordinator::on_forward_lost(const Incoming& in) {
  const ForwardLost f = decode_forward_lost(in.bytes, "a worker at " + in.address);
  std::lock_guard lock(mutex_);
  const auto from = peers_.find(in.peer);
  if (from == peers_.end()) return;
  Peer* next = stage_at(from->second.end);
  if (next == nullptr || next->forward.empty() || next->forward != f.address) return;
  const std::string why = "stage " + layer_range_text(from->second.begin, from->second.end) + " (worker " +
                          from->second.name + ") lost its hand-overs to stage " +
                          layer_range_text(next->begin, next->end) + ": " + f.reason;
  log(why + "; that stage's input now goes through the coordinator");
  next->forward.clear();
  next->stats.forward.clear();
  for (auto& [id, p] : pending_) {
    if (p.done) continue;
    const auto at = std::find(p.route.begin(), p.route.end(), in.peer);
    if (at == p.route.end() || std::next(at) == p.route.end() || *std::next(at) != next->id) continue;
    p.done = true;
    p.outcome.status = ResultStatus::Failed;
    p.outcome.unavailable = true;
    p.outcome.error = why;
  }
  changed_.notify_all();
}

void Coordinator::on_op_done(const Incoming& in) {
  SessionOpDone d = decode_session_op_done(in.bytes, "a worker at " + in.address);
  std::lock_guard lock(mutex_);
  const auto it = pending_ops_.find(d.request);
  if (it == pending_ops_.end() || it->second.at != in.peer) return;
  it->second.answer = std::move(d);
  it->second.done = true;
  changed_.notify_all();
}

Coordinator::Peer* Coordinator::stage_at(int begin) {
  for (auto& [id, p] : peers_)
    if (p.begin == begin) return &p;
  return nullptr;
}

std::string Coordinator::missing_from(int begin) const {
  int next = expect_.n_layer;
  for (const auto& [id, p] : peers_)
    if (p.begin > begin) next = std::min(next, p.begin);
  return layer_range_text(begin, next >= static_cast<int>(expect_.n_layer) ? -1 : next);
}

void Coordinator::forward(uint64_t id, Pending& p, int begin, Floats hidden) {
  Peer* peer = stage_at(begin);
  if (peer == nullptr) {
    p.done = true;
    p.outcome.status = ResultStatus::Failed;
    p.outcome.unavailable = true;
    p.outcome.error = "the distributed route is incomplete: no worker serves layers " + missing_from(begin);
    changed_.notify_all();
    return;
  }
  p.eval.request = id;
  p.eval.layer_begin = peer->begin;
  p.eval.layer_end = peer->end;
  p.eval.hidden = std::move(hidden);
  p.eval.route.clear();
  p.eval.trace.clear();
  p.route = {peer->id};
  // The stages after it that take hand-overs, up to the first that does not
  // (or a gap in the route: the answer then comes back from before it).
  for (const Peer* at = peer; at->end >= 0 && at->end != static_cast<int>(expect_.n_layer);) {
    const Peer* next = stage_at(at->end);
    if (next == nullptr || next->forward.empty()) break;
    p.eval.route.push_back({next->begin, next->end, next->forward});
    p.route.push_back(next->id);
    at = next;
  }
  Bytes bytes = encode(p.eval);
  p.eval.hidden = {};
  p.eval.route.clear();
  p.sent = Clock::now();
  peer->stats.bytes_sent += bytes.size();
  hub_->send(peer->id, std::move(bytes));
}

void Coordinator::fail_at(const PeerId& peer, const std::string& why) {
  for (auto& [id, p] : pending_) {
    if (p.done || std::find(p.route.begin(), p.route.end(), peer) == p.route.end()) continue;
    p.done = true;
    p.outcome.status = ResultStatus::Failed;
    p.outcome.unavailable = true;
    p.outcome.error = why;
  }
  for (auto& [id, op] : pending_ops_) {
    if (op.done || op.at != peer) continue;
    op.done = true;
    op.unavailable = true;
    op.answer.status = ResultStatus::Failed;
    op.answer.error = why;
  }
  changed_.notify_all();
}

void Coordinator::drop_unreachable() {
  const std::vector<PeerId> gone = hub_->take_unreachable();
  if (gone.empty()) return;
  std::lock_guard lock(mutex_);
  for (const PeerId& id : gone) {
    const auto it = peers_.find(id);
    if (it == peers_.end()) continue;
    const Peer& p = it->second;
    const std::string why = "stage " + layer_range_text(p.begin, p.end) + " (worker " + p.name + " at " + p.address +
                            ") is unreachable: its connection is gone";
    log(why + "; the route is incomplete until a worker serves those layers");
    fail_at(id, why);
    peers_.erase(it);
  }
}

void Coordinator::check_liveness() {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  for (auto it = peers_.begin(); it != peers_.end();) {
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last_heard);
    if (silent <= options_.peer_timeout) {
      ++it;
      continue;
    }
    const Peer& p = it->second;
    const std::string why = "stage " + layer_range_text(p.begin, p.end) + " (worker " + p.name + " at " + p.address +
                            ") stopped answering: nothing heard for " + std::to_string(silent.count()) + " ms";
    log(why + "; the route is incomplete until a worker serves those layers");
    fail_at(it->first, why);
    it = peers_.erase(it);
  }
}

RouteStatus Coordinator::route() const {
  std::lock_guard lock(mutex_);
  RouteStatus r;
  int at = expect_.first_remote;
  for (;;) {
    const Peer* found = nullptr;
    for (const auto& [id, p] : peers_)
      if (p.begin == at) found = &p;
    if (found == nullptr) {
      r.missing = missing_from(at);
      return r;
    }
    r.stages.push_back(found->stats);
    if (found->end < 0 || found->end == static_cast<int>(expect_.n_layer)) {
      r.complete = true;
      return r;
    }
    at = found->end;
  }
}

bool Coordinator::wait_for_route(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (route().complete) return true;
    std::unique_lock lock(mutex_);
    if (changed_.wait_until(lock, std::min(deadline, Clock::now() + kPoll)) == std::cv_status::timeout &&
        Clock::now() >= deadline) {
      lock.unlock();
      return route().complete;
    }
  }
}

uint64_t Coordinator::submit(Eval eval) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_request_++;
  Pending& p = pending_[id];
  Floats hidden = std::move(eval.hidden);
  p.eval = std::move(eval);
  forward(id, p, expect_.first_remote, std::move(hidden));
  return id;
}

Outcome Coordinator::wait(uint64_t request) {
  std::unique_lock lock(mutex_);
  const auto it = pending_.find(request);
  if (it == pending_.end()) throw Error("no distributed request " + std::to_string(request));
  changed_.wait(lock, [&] { return it->second.done; });
  Outcome out = std::move(it->second.outcome);
  pending_.erase(it);
  return out;
}

std::vector<Coordinator::OpAnswer> Coordinator::session_op(
    SessionOp op, const std::function<std::vector<uint8_t>(int begin, int end)>& payload_for) {
  std::unique_lock lock(mutex_);
  std::vector<std::pair<uint64_t, OpAnswer>> sent;
  std::vector<OpAnswer> answers;
  int at = expect_.first_remote;
  for (;;) {
    Peer* peer = stage_at(at);
    OpAnswer a;
    a.begin = at;
    if (peer == nullptr) {
      a.unavailable = true;
      a.done.status = ResultStatus::Failed;
      a.done.error = "the distributed route is incomplete: no worker serves layers " + missing_from(at);
      answers.push_back(std::move(a));
      break;
    }
    a.end = peer->end;
    const uint64_t id = next_request_++;
    PendingOp& pending = pending_ops_[id];
    pending.at = peer->id;
    pending.begin = peer->begin;
    pending.end = peer->end;
    op.request = id;
    if (payload_for) op.payload = payload_for(peer->begin, peer->end);
    hub_->send(peer->id, encode(op));
    sent.emplace_back(id, a);
    answers.push_back(a);
    if (peer->end < 0 || peer->end == static_cast<int>(expect_.n_layer)) break;
    at = peer->end;
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    const uint64_t id = sent[i].first;
    changed_.wait(lock, [&] { return pending_ops_.at(id).done; });
    PendingOp& done = pending_ops_.at(id);
    answers[i].done = std::move(done.answer);
    answers[i].unavailable = done.unavailable;
    pending_ops_.erase(id);
  }
  return answers;
}

void Coordinator::session_op_async(SessionOp op) {
  std::lock_guard lock(mutex_);
  int at = expect_.first_remote;
  while (Peer* peer = stage_at(at)) {
    op.request = 0;  // answers to request 0 are ignored
    hub_->send(peer->id, encode(op));
    if (peer->end < 0 || peer->end == static_cast<int>(expect_.n_layer)) break;
    at = peer->end;
  }
}

}  // namespace ds4::dist
