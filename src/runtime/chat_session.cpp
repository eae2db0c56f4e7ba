#include "runtime/chat_session.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "text/chat_tokens.h"
#include "text/tokenizer.h"

namespace ds4::runtime {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

text::RenderedChat render(const nlohmann::ordered_json& messages, text::ThinkingMode mode, bool add_bos) {
  text::RenderOptions o;
  o.mode = mode;
  o.add_bos = add_bos;
  o.add_generation_prompt = true;
  return text::render_chat(messages, nullptr, o);
}

}  // namespace

ChatSession::ChatSession(backend::Backend& backend, const text::Tokenizer& tokenizer, int64_t n_ctx, std::string system,
                         text::ThinkingMode mode)
    : backend_(&backend),
      tokenizer_(&tokenizer),
      system_(std::move(system)),
      mode_(mode),
      session_(backend.new_session(n_ctx)) {}

std::vector<int32_t> ChatSession::start_tokens() const {
  std::vector<int32_t> ids = {tokenizer_->bos()};
  if (mode_ == text::ThinkingMode::Max) {
    const auto prefix = tokenizer_->encode(text::think_max_prefix(), true);
    ids.insert(ids.end(), prefix.begin(), prefix.end());
  }
  if (!system_.empty()) {
    const auto sys = tokenizer_->encode(system_, false);
    ids.insert(ids.end(), sys.begin(), sys.end());
  }
  return ids;
}

std::vector<int32_t> ChatSession::user_turn_tokens(std::string_view user_text) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", std::string(user_text)}});
  // The Think Max prefix belongs to the conversation start only; later turns
  // enter thinking the same way as normal thinking does.
  const text::ThinkingMode turn_mode = mode_ == text::ThinkingMode::Max ? text::ThinkingMode::High : mode_;
  return text::tokenize_segments(render(messages, turn_mode, false), *tokenizer_);
}

std::vector<int32_t> ChatSession::transcript() const {
  std::vector<int32_t> t(session_->tokens().begin(), session_->tokens().end());
  t.insert(t.end(), pending_.begin(), pending_.end());
  return t;
}

void ChatSession::set_mode(text::ThinkingMode mode) {
  const bool was_max = mode_ == text::ThinkingMode::Max, is_max = mode == text::ThinkingMode::Max;
  mode_ = mode;
  if (!started_ || was_max == is_max) return;
  // A new conversation start: BOS, the prefix or none, then the rest of the
  // transcript unchanged; everything is evaluated again with the next turn.
  const std::vector<int32_t> old = transcript();
  std::vector<int32_t> t = {tokenizer_->bos()};
  const size_t old_prefix = max_prefix_tokens_;
  max_prefix_tokens_ = 0;
  if (is_max) {
    const auto prefix = tokenizer_->encode(text::think_max_prefix(), true);
    t.insert(t.end(), prefix.begin(), prefix.end());
    max_prefix_tokens_ = prefix.size();
  }
  t.insert(t.end(), old.begin() + static_cast<std::ptrdiff_t>(1 + old_prefix), old.end());
  session_->reset();
  pending_ = std::move(t);
}

void ChatSession::reset(int64_t n_ctx) {
  if (n_ctx > 0 && n_ctx != session_->n_ctx()) {
    session_ = backend_->new_session(n_ctx);
  } else {
    session_->reset();
  }
  pending_.clear();
  started_ = false;
  max_prefix_tokens_ = 0;
}

int64_t ChatSession::turn_cost(std::string_view user_text) const {
  int64_t n = session_->size() + static_cast<int64_t>(pending_.size() + user_turn_tokens(user_text).size()) + 1;
  if (!started_) n += static_cast<int64_t>(start_tokens().size());
  return n;
}

TurnResult ChatSession::turn(std::string_view user_text, Sampler& sampler, const GenerateLimits& limits,
                             const TurnHooks& hooks) {
  std::vector<int32_t> add = pending_;
  size_t prefix_tokens = max_prefix_tokens_;
  if (!started_) {
    const std::vector<int32_t> start = start_tokens();
    add.insert(add.end(), start.begin(), start.end());
    prefix_tokens = mode_ == text::ThinkingMode::Max ? tokenizer_->encode(text::think_max_prefix(), true).size() : 0;
  }
  const std::vector<int32_t> user = user_turn_tokens(user_text);
  add.insert(add.end(), user.begin(), user.end());
  return run(std::move(add), prefix_tokens, mode_ != text::ThinkingMode::None, sampler, limits, hooks);
}

TurnResult ChatSession::rendered_turn(std::vector<int32_t> tokens, Sampler& sampler, const GenerateLimits& limits,
                                      const TurnHooks& hooks) {
  if (started_ || !pending_.empty() || session_->size() != 0)
    throw Error("a rendered prompt can only start a conversation");
  if (tokens.empty()) throw Error("the rendered prompt has no tokens");
  const bool reasoning = tokens.back() == tokenizer_->think();
  return run(std::move(tokens), 0, reasoning, sampler, limits, hooks);
}

TurnResult ChatSession::run(std::vector<int32_t> add, size_t prefix_tokens, bool reasoning, Sampler& sampler,
                            const GenerateLimits& limits, const TurnHooks& hooks) {
  TurnResult r;
  // Room for the turn and at least one generated token.
  const int64_t need = session_->size() + static_cast<int64_t>(add.size()) + 1;
  if (need > session_->n_ctx())
    throw Error("this turn needs " + std::to_string(need) + " tokens of context but the session holds " +
                std::to_string(session_->n_ctx()) + " (" + std::to_string(used()) +
                " used); start a larger conversation with /ctx N or --ctx N");

  // Everything a rollback must put back.
  const std::unique_ptr<backend::Session> snapshot = session_->snapshot();
  const std::vector<int32_t> saved_pending = pending_;
  const bool saved_started = started_;
  const size_t saved_prefix = max_prefix_tokens_;
  const auto roll_back = [&] {
    session_->restore(*snapshot);
    pending_ = saved_pending;
    started_ = saved_started;
    max_prefix_tokens_ = saved_prefix;
    r.rolled_back = true;
  };

  const int64_t layers = static_cast<int64_t>(backend_->n_layer());
  const int64_t n_add = static_cast<int64_t>(add.size());
  if (hooks.progress) {
    backend_->set_progress([&](int64_t done, int64_t) { return hooks.progress(done / layers, n_add); });
  }
  const auto t0 = Clock::now();
  try {
    backend_->eval(*session_, add);
  } catch (const Cancelled&) {
    backend_->set_progress(nullptr);
    roll_back();
    r.reason = StopReason::Cancelled;
    return r;
  } catch (...) {
    backend_->set_progress(nullptr);
    roll_back();
    throw;
  }
  backend_->set_progress(nullptr);
  r.prompt_tokens = n_add;
  r.prefill_seconds = seconds_since(t0);
  started_ = true;
  max_prefix_tokens_ = prefix_tokens;
  pending_.clear();

  const int32_t end_think = tokenizer_->end_think();
  GenerateHooks g;
  g.cancelled = hooks.cancelled;
  g.on_token = [&](int32_t id, std::string_view piece) {
    const bool was = reasoning;
    if (id == end_think) reasoning = false;
    if (hooks.on_token) hooks.on_token(id, piece, was);
    return StopReason::None;
  };
  const GenerateResult gen = generate(*backend_, *session_, *tokenizer_, sampler, limits, g);
  if (!gen.tail.empty() && hooks.on_token) hooks.on_token(-1, gen.tail, reasoning);
  r.reason = gen.reason;
  r.generated_tokens = static_cast<int64_t>(gen.tokens.size());
  r.generate_seconds = gen.seconds;
  r.text = gen.text;
  if (gen.reason == StopReason::Cancelled && gen.tokens.empty()) {
    roll_back();
    return r;
  }
  // The turn ends with EOS; it and any token generation stopped on are
  // evaluated together with the next turn.
  pending_ = gen.unevaluated;
  pending_.push_back(tokenizer_->eos());
  return r;
}

}  // namespace ds4::runtime
