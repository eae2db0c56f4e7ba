#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <limits>
#include <vector>

#include "backend/cpu/forward.h"
#include "backend/cpu/session.h"
#include "core/error.h"
#include "runtime/tool_call_constraint.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

namespace ds4::runtime {

GenerateResult generate(cpu::Forward& forward, cpu::Session& session, const text::Tokenizer& tokenizer,
                        Sampler& sampler, const GenerateLimits& limits, const GenerateHooks& hooks) {
  const int max_tokens = limits.max_tokens;
  if (session.size() == 0) throw Error("generate: the session holds no tokens to continue from");
  if (max_tokens < 0) throw Error("generate: max tokens " + std::to_string(max_tokens) + " is negative");
  const auto t0 = std::chrono::steady_clock::now();
  GenerateResult r;
  text::StreamingDetokenizer detok(tokenizer);
  const int32_t eos = tokenizer.eos();
  std::vector<float> adjusted;  // the logits with logit_bias added and EOS removed for ignore_eos

  // The DSML view of the assistant text: syntax regions and tool blocks.
  const bool dsml = limits.greedy_syntax || limits.stop_at_tool_block;
  text::DsmlSyntaxTracker syntax;
  text::DsmlStreamParser blocks(text::DsmlOptions{limits.thinking, true, false});
  if (dsml && !limits.assistant_prefix.empty()) {
    syntax.feed(limits.assistant_prefix);
    blocks.feed(limits.assistant_prefix);
  }

  std::optional<ToolCallConstraint> constraint;  // advanced token by token
  if (limits.constraint) constraint.emplace(*limits.constraint);

  std::optional<StopStringMatcher> stops;
  if (!limits.stop_strings.empty()) stops.emplace(limits.stop_strings);
  size_t delivered = 0;  // bytes of r.text handed to on_token

  while (true) {
    if (hooks.cancelled && hooks.cancelled()) {
      r.reason = StopReason::Cancelled;
      break;
    }
    if (static_cast<int64_t>(r.tokens.size()) >= max_tokens) {
      r.reason = StopReason::MaxTokens;
      break;
    }
    const bool greedy = (limits.greedy_syntax && syntax.greedy()) || (hooks.force_greedy && hooks.force_greedy());
    int32_t id;
    if (limits.ignore_eos || !limits.logit_bias.empty() || constraint) {
      adjusted.assign(session.logits().begin(), session.logits().end());
      for (const auto& [token, bias] : limits.logit_bias) {
        if (token >= 0 && static_cast<size_t>(token) < adjusted.size()) adjusted[static_cast<size_t>(token)] += bias;
      }
      if (limits.ignore_eos) adjusted[static_cast<size_t>(eos)] = -std::numeric_limits<float>::infinity();
      if (constraint) constraint->mask(adjusted);
      id = sampler.sample(adjusted, greedy);
    } else {
      id = sampler.sample(session.logits(), greedy);
    }
    if (id == eos) {
      r.reason = StopReason::Eos;
      break;
    }
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
    if (stop != StopReason::None) {
      r.reason = stop;
      r.unevaluated.push_back(id);
      break;
    }
    if (static_cast<int64_t>(r.tokens.size()) >= max_tokens) {
      r.reason = StopReason::MaxTokens;
      r.unevaluated.push_back(id);
      break;
    }
    if (session.size() >= session.n_ctx()) {
      r.reason = StopReason::ContextFull;
      r.unevaluated.push_back(id);
      break;
    }
    const int32_t one[1] = {id};
    forward.eval(session, one);
  }
  if (r.reason != StopReason::StopString) {
    r.text += detok.flush();
  }
  r.tail = r.text.substr(std::min(delivered, r.text.size()));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ds4::runtime
