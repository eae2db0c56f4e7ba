#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "runtime/tool_call_constraint.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

namespace ds4::runtime {

using Clock = std::chrono::steady_clock;

struct Generation::State {
  State(backend::Session& session, const text::Tokenizer& tokenizer, Sampler& sampler, const GenerateLimits& limits,
        const GenerateHooks& hooks)
      : session(session),
        tokenizer(tokenizer),
        sampler(sampler),
        limits(limits),
        hooks(hooks),
        detok(tokenizer),
        dsml(limits.greedy_syntax || limits.stop_at_tool_block),
        blocks(text::DsmlOptions{limits.thinking, true, false}) {}

  // Sampling from the logits after logit_bias, ignore_eos and the forced
  // tool call's mask.
  int32_t choose();
  // Records a sampled token (not EOS); what stops the generation after it.
  StopReason accept(int32_t id);
  void stop(StopReason reason, std::optional<int32_t> unevaluated) {
    r.reason = reason;
    if (unevaluated) r.unevaluated.push_back(*unevaluated);
    stopped = true;
  }

  backend::Session& session;
  const text::Tokenizer& tokenizer;
  Sampler& sampler;
  const GenerateLimits& limits;
  const GenerateHooks& hooks;
  Clock::time_point t0 = Clock::now();
  GenerateResult r;
  text::StreamingDetokenizer detok;
  std::vector<float> adjusted;  // the logits with logit_bias added and EOS removed for ignore_eos
  // The DSML view of the assistant text: syntax regions and tool blocks.
  const bool dsml;
  text::DsmlSyntaxTracker syntax;
  text::DsmlStreamParser blocks;
  std::optional<ToolCallConstraint> constraint;  // advanced token by token
  std::optional<StopStringMatcher> stops;
  size_t delivered = 0;  // bytes of r.text handed to on_token
  bool stopped = false;
  bool finished = false;
};

int32_t Generation::State::choose() {
  const bool greedy = (limits.greedy_syntax && syntax.greedy()) || (hooks.force_greedy && hooks.force_greedy());
  if (!limits.ignore_eos && limits.logit_bias.empty() && !constraint) return sampler.sample(session.logits(), greedy);
  adjusted.assign(session.logits().begin(), session.logits().end());
  for (const auto& [token, bias] : limits.logit_bias) {
    if (token >= 0 && static_cast<size_t>(token) < adjusted.size()) adjusted[static_cast<size_t>(token)] += bias;
  }
  if (limits.ignore_eos) adjusted[static_cast<size_t>(tokenizer.eos())] = -std::numeric_limits<float>::infinity();
  if (constraint) constraint->mask(adjusted);
  return sampler.sample(adjusted, greedy);
}

StopReason Generation::State::accept(int32_t id) {
  r.tokens.push_back(id);
  if (constraint) constraint->accept(id);
  const std::string piece = detok.push(id);
  r.text += piece;
  StopReason stop = StopReason::None;
  if (dsml) {
    syntax.feed(piece);
    blocks.feed(piece);
    if (limits.stop_at_tool_block && blocks.tool_block_complete()) stop = StopReason::ToolCalls;
  }
  if (constraint && constraint->complete()) stop = StopReason::ToolCalls;
  size_t safe = r.text.size();
  if (stops) {
    const StopStringMatcher::Result m = stops->feed(piece);
    if (m.match_at && stop == StopReason::None) {
      r.text.resize(*m.match_at);
      safe = r.text.size();
      stop = StopReason::StopString;
    } else {
      safe = r.text.size() - std::min(m.hold_back, r.text.size());
    }
  }
  safe = std::max(safe, delivered);
  const std::string_view fresh = std::string_view(r.text).substr(delivered, safe - delivered);
  delivered = safe;
  if (hooks.on_token) {
    const StopReason caller = hooks.on_token(id, fresh);
    if (stop == StopReason::None) stop = caller;
  }
  return stop;
}

Generation::Generation(backend::Session& session, const text::Tokenizer& tokenizer, Sampler& sampler,
                       const GenerateLimits& limits, const GenerateHooks& hooks) {
  if (session.size() == 0) throw Error("generate: the session holds no tokens to continue from");
  if (session.logits().empty()) throw Error("generate: the session holds no logits (its last evaluation skipped them)");
  if (limits.max_tokens < 0) throw Error("generate: max tokens " + std::to_string(limits.max_tokens) + " is negative");
  s_ = std::make_unique<State>(session, tokenizer, sampler, limits, hooks);
  if (s_->dsml && !limits.assistant_prefix.empty()) {
    s_->syntax.feed(limits.assistant_prefix);
    s_->blocks.feed(limits.assistant_prefix);
  }
  if (limits.constraint) s_->constraint.emplace(*limits.constraint);
  if (!limits.stop_strings.empty()) s_->stops.emplace(limits.stop_strings);
}

Generation::~Generation() = default;
Generation::Generation(Generation&&) noexcept = default;

bool Generation::stopped() const { return s_->stopped; }
backend::Session& Generation::session() { return s_->session; }

std::optional<int32_t> Generation::step() {
  State& s = *s_;
  if (s.stopped) return std::nullopt;
  const int64_t max_tokens = s.limits.max_tokens;
  if (s.hooks.cancelled && s.hooks.cancelled()) {
    s.stop(StopReason::Cancelled, std::nullopt);
    return std::nullopt;
  }
  if (static_cast<int64_t>(s.r.tokens.size()) >= max_tokens) {
    s.stop(StopReason::MaxTokens, std::nullopt);
    return std::nullopt;
  }
  const int32_t id = s.choose();
  if (id == s.tokenizer.eos()) {
    s.stop(StopReason::Eos, std::nullopt);
    return std::nullopt;
  }
  // After a stop the token is sampled but not evaluated: the caller evaluates
  // it before whatever follows it in the transcript.
  if (const StopReason stop = s.accept(id); stop != StopReason::None) {
    s.stop(stop, id);
  } else if (static_cast<int64_t>(s.r.tokens.size()) >= max_tokens) {
    s.stop(StopReason::MaxTokens, id);
  } else if (s.session.size() >= s.session.n_ctx()) {
    s.stop(StopReason::ContextFull, id);
  }
  if (s.stopped) return std::nullopt;
  return id;
}

GenerateResult Generation::finish() {
  State& s = *s_;
  if (!s.stopped) throw Error("generate: finish() before the generation stopped");
  if (s.finished) throw Error("generate: finish() called twice");
  s.finished = true;
  if (s.r.reason != StopReason::StopString) s.r.text += s.detok.flush();
  s.r.tail = s.r.text.substr(std::min(s.delivered, s.r.text.size()));
  s.r.seconds = std::chrono::duration<double>(Clock::now() - s.t0).count();
  return std::move(s.r);
}

GenerateResult generate(backend::Backend& backend, backend::Session& session, const text::Tokenizer& tokenizer,
                        Sampler& sampler, const GenerateLimits& limits, const GenerateHooks& hooks) {
  Generation g(session, tokenizer, sampler, limits, hooks);
  while (const std::optional<int32_t> id = g.step()) backend.eval(session, std::span<const int32_t>(&*id, 1));
  return g.finish();
}

std::vector<GenerateResult> generate_batch(backend::Backend& backend, std::span<Generation* const> generations) {
  std::vector<int32_t> next(generations.size());
  std::vector<backend::Part> parts;
  while (true) {
    parts.clear();
    for (size_t i = 0; i < generations.size(); ++i) {
      if (const std::optional<int32_t> id = generations[i]->step()) {
        next[i] = *id;
        backend::Part part;
        part.session = &generations[i]->session();
        part.tokens = std::span<const int32_t>(&next[i], 1);
        parts.push_back(part);
      }
    }
    if (parts.empty()) break;
    backend.eval(parts);
  }
  std::vector<GenerateResult> out;
  out.reserve(generations.size());
  for (Generation* g : generations) out.push_back(g->finish());
  return out;
}

}  // namespace ds4::runtime
