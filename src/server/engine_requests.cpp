// A server request's way through engine::Scheduler: admission to a slot
// (prefix reuse, the prefill plan with its checkpoint stops), the stops
// (disk and RAM saves), generation (sampler, limits, the reply assembler),
// the end (usage, tool memory, the visible-transcript binding, metrics,
// trace) and failures. The scheduler batches the steps
// (src/engine/scheduler.h).
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "backend/backend.h"
#include "core/error.h"
#include "runtime/kv_disk_cache.h"
#include "runtime/tool_call_constraint.h"
#include "server/engine.h"
#include "server/engine_internal.h"
#include "server/metrics.h"
#include "server/trace_log.h"
#include "text/tokenizer.h"

namespace ds4::server {

namespace {

constexpr uint8_t kKeyResponsesVisible = runtime::kKvExtResponsesVisibleKey;
constexpr uint8_t kKeyThinkingVisible = runtime::kKvExtThinkingVisibleKey;

std::string trace_header(const Job& job) {
  const ChatRequest& req = job.request;
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string t = "===== request " + std::to_string(job.number) + " " + when + " =====\n";
  t += std::string("api: ") + api_name(req.api) + "\nmodel: " + req.model + "\nthinking: " + mode_name(job.mode) +
       "\nstream: " + (req.stream ? "true" : "false") +
       "\ntools: " + (job.tools_active ? std::to_string(req.tools.size()) : std::string("0")) + "\n";
  t += "--- cache decision ---\ntool_replay: " + job.tool_replay_stats + "\n";
  return t;
}

}  // namespace

bool Engine::start(Active& a, double queue_seconds) {
  a.t_start = EngineClock::now();
  a.queue_seconds = queue_seconds;
  metrics_.queue_wait(queue_seconds);
  Job& job_ref = *a.job;
  const ChatRequest& req = job_ref.request;
  if (trace_) a.trace = trace_header(job_ref);
  if (job_ref.channel->cancelled()) {
    fail(a, RequestError("client disconnected before the request ran", 499));
    return false;
  }

  Slot& slot = choose_slot(job_ref);
  slot.busy = true;
  ++slot.requests;
  a.slot = &slot;
  try {
    a.prefix = reuse(slot, job_ref, a.trace);
  } catch (const Error& e) {
    slot.session.reset();
    slot.visible_text.clear();
    fail(a, RequestError(std::string("cache lookup failed: ") + e.what(), 500, "server_error"));
    return false;
  }
  metrics_.cache_decision(a.prefix.source);
  const int64_t n_prompt = a.prompt_size();
  if (req.stream) {
    job_ref.ids.prompt_usage.prompt_tokens = n_prompt;
    job_ref.ids.prompt_usage.cached_tokens = a.prefix.cached;
    a.stream = make_reply_stream(req, job_ref.ids);
    job_ref.channel->write(a.stream->begin());
  }
  if (n_prompt >= config_.n_ctx) {
    fail(a, context_overflow(req.api, n_prompt, config_.n_ctx));
    return false;
  }
  // The live state is about to change: the old bindings go.
  slot.visible_text.clear();
  slot.visible_pending.clear();
  a.t_prefill = EngineClock::now();
  plan_prefill(a);
  if (a.next_stop_index == a.stops.size()) begin_generation(a);  // all of it cached
  return !a.ended();
}

void Engine::plan_prefill(Active& a) {
  // Prefill stops where checkpoints are due, then at the prompt's end.
  const int64_t n_prompt = a.prompt_size();
  const int64_t cached = a.prefix.cached;
  std::vector<int64_t>& stops = a.stops;
  const runtime::KvCacheConfig* kc = disk_ ? &disk_->config() : nullptr;
  if (kc && a.prefix.source == "cold") {
    a.cold_at = runtime::cold_save_length(a.prefix.tokens, tokenizer_.user(), tokenizer_.assistant(), *kc);
    if (a.cold_at > cached && a.cold_at < n_prompt) stops.push_back(a.cold_at);
  }
  if (ram_.enabled()) {
    // The shared head (system + tools) goes to the RAM prefix cache for the
    // next conversation under the same system prompt.
    a.head_at = runtime::shared_head_length(a.prefix.tokens, tokenizer_.user(), tokenizer_.assistant());
    if (a.head_at >= ram_.min_tokens() && a.head_at > cached && a.head_at < n_prompt) stops.push_back(a.head_at);
  }
  const int64_t step = kc ? runtime::continued_step(*kc) : 0;
  if (step > 0) {
    for (int64_t at = (cached / step + 1) * step; at < n_prompt; at += step) {
      if (at >= kc->min_tokens) stops.push_back(at);
    }
  }
  stops.push_back(n_prompt);
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  const int64_t pos = a.slot->session.size();
  while (a.next_stop_index < stops.size() && stops[a.next_stop_index] <= pos) ++a.next_stop_index;
}

void Engine::prefill_advanced(Active& a) {
  Slot& slot = *a.slot;
  const int64_t pos = slot.session.size();
  if (pos < a.stops[a.next_stop_index]) return;  // more pieces before this stop
  const int64_t stop = a.stops[a.next_stop_index++];
  if (stop == a.prompt_size()) {
    // The whole prompt too: the same request again starts generating at once.
    store_in_ram(slot);
    begin_generation(a);
    return;
  }
  if (stop == a.head_at) {
    store_in_ram(slot);
    a.trace += "ram store at " + std::to_string(stop) + " tokens\n";
  }
  if (!disk_) return;
  const runtime::KvCacheConfig& kc = disk_->config();
  const int64_t step = runtime::continued_step(kc);
  if (stop == a.cold_at) {
    save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Cold), tokenizer_.decode(slot.session.tokens()), 0);
    slot.last_frontier = std::max(slot.last_frontier, stop);
    a.trace += "cold save at " + std::to_string(stop) + " tokens\n";
  } else if (step > 0 && stop % step == 0 && stop > slot.last_frontier) {
    save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Continued), tokenizer_.decode(slot.session.tokens()),
                 0);
    slot.last_frontier = stop;
    a.trace += "continued save at " + std::to_string(stop) + " tokens\n";
  }
}

void Engine::begin_generation(Active& a) {
  a.prefill_seconds = seconds_since(a.t_prefill);
  Job& job = *a.job;
  const ChatRequest& req = job.request;
  backend::Session& session = a.slot->session;
  job.channel->mark_generating();

  // Sampling (PROTOCOL.md §4): thinking mode ignores the client's knobs.
  runtime::SamplingParams sp;
  if (job.mode != text::ThinkingMode::None) {
    sp = runtime::SamplingParams::thinking_defaults();
  } else {
    if (req.temperature) sp.temperature = *req.temperature;
    if (req.top_p) sp.top_p = *req.top_p;
    if (req.min_p) sp.min_p = *req.min_p;
    if (req.top_k) sp.top_k = *req.top_k;
  }
  const uint64_t seed = req.seed && *req.seed > 0
                            ? *req.seed
                            : static_cast<uint64_t>(EngineClock::now().time_since_epoch().count()) | 1;
  try {
    a.sampler.emplace(sp, seed);
  } catch (const Error& e) {
    fail(a, RequestError(e.what()));
    return;
  }

  runtime::GenerateLimits& limits = a.limits;
  const int64_t room = config_.n_ctx - session.size();
  limits.max_tokens = static_cast<int>(
      std::min<int64_t>({req.max_tokens.value_or(config_.max_tokens), config_.max_tokens, room}));
  if (limits.max_tokens < 0) limits.max_tokens = 0;
  limits.stop_strings = req.stop;
  limits.greedy_syntax = job.tools_active;
  limits.stop_at_tool_block = job.tools_active;
  limits.thinking = job.mode != text::ThinkingMode::None;
  limits.assistant_prefix = req.response_prefix.value_or("");
  limits.logit_bias = req.logit_bias;
  limits.constraint = job.constraint.get();

  // The generated text → reasoning / content / tool calls, as events.
  a.assembler = std::make_unique<ReplyAssembler>(req, job.tools_active, limits.thinking, a.stream.get(),
                                                 *job.channel, tool_memory_, trace_ ? &a.trace : nullptr);
  a.assembler->feed_prefix(limits.assistant_prefix);

  const int64_t step = disk_ ? runtime::continued_step(disk_->config()) : 0;
  a.hooks.cancelled = [ch = job.channel.get()] { return ch->cancelled(); };
  a.hooks.on_token = [this, &a, step](int32_t, std::string_view text) {
    a.assembler->feed(text);
    // Continued checkpoints during long replies, never inside a tool block.
    Slot& slot = *a.slot;
    const int64_t pos = slot.session.size();
    if (step > 0 && pos % step == 0 && pos > slot.last_frontier && pos >= disk_->config().min_tokens &&
        !a.assembler->in_tool_block()) {
      save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Continued), tokenizer_.decode(slot.session.tokens()),
                   0);
      slot.last_frontier = pos;
    }
    return runtime::StopReason::None;
  };
  try {
    a.generation_.emplace(session, tokenizer_, *a.sampler, a.limits, a.hooks);
  } catch (const Error& e) {
    fail(a, RequestError(std::string("generation failed: ") + e.what(), 500, "server_error"));
  }
}

void Engine::finish_generation(Active& a) {
  Job& job = *a.job;
  const ChatRequest& req = job.request;
  Slot& slot = *a.slot;
  ReplyChannel& channel = *job.channel;
  runtime::GenerateResult gen = a.generation_->finish();
  if (gen.reason == runtime::StopReason::Cancelled) {
    // The client is gone: nothing to send. The session holds what was
    // evaluated and stays usable for the next request.
    fail(a, RequestError("client disconnected during generation", 499));
    return;
  }
  const int64_t n_prompt = a.prompt_size();
  Reply reply = a.assembler->finish(gen, n_prompt, a.prefix.cached);
  const text::ParsedMessage& m = a.assembler->message();

  // Exact replay of the sampled block by id.
  if (!reply.tool_calls.empty() && m.tool_block_complete && !m.raw_tool_block.empty()) {
    std::vector<std::string> ids;
    for (const auto& c : reply.tool_calls) ids.push_back(c.id);
    tool_memory_.remember(ids, m.raw_tool_block);
  }

  // The visible transcript binding (PROTOCOL.md §6.2 step 6, §6.7): how the
  // client will send this turn back when it drops the hidden reasoning.
  const bool clean_end = gen.reason == runtime::StopReason::Eos || gen.reason == runtime::StopReason::ToolCalls;
  const std::string eos_text = tokenizer_.token_bytes(tokenizer_.eos());
  if (clean_end && a.limits.thinking && m.thinking_closed && !req.response_prefix &&
      reply.finish != FinishReason::Error) {
    const std::string think_open = tokenizer_.token_bytes(tokenizer_.think());
    const std::string think_close = tokenizer_.token_bytes(tokenizer_.end_think());
    std::string visible;
    uint8_t flags = 0;
    if (!job.tools_active && (req.api == Api::ChatCompletions || req.api == Api::Messages) &&
        job.prompt_text.size() >= think_open.size() &&
        job.prompt_text.compare(job.prompt_text.size() - think_open.size(), think_open.size(), think_open) == 0) {
      visible = job.prompt_text.substr(0, job.prompt_text.size() - think_open.size()) + think_close +
                reply.content + eos_text;
      flags = kKeyThinkingVisible;
    } else if (req.api == Api::Responses) {
      const bool keep_reasoning = req.reasoning_summary && reply.finish == FinishReason::ToolCalls;
      visible = job.prompt_text + (keep_reasoning ? reply.reasoning : std::string()) + think_close +
                reply.content + m.raw_tool_block + eos_text;
      flags = kKeyResponsesVisible;
    }
    if (!visible.empty()) {
      slot.visible_text = std::move(visible);
      slot.visible_pending = gen.unevaluated;
      slot.visible_pending.push_back(tokenizer_.eos());
      slot.visible_flags = flags;
    }
  }

  // Counted before the client can see the end of its reply, so a /metrics
  // read right after it counts this request.
  const double total_seconds = seconds_since(a.t_start);
  const int64_t cached = a.prefix.cached;
  metrics_.tokens(n_prompt, cached, reply.usage.completion_tokens, a.prefill_seconds, n_prompt - cached, gen.seconds);
  metrics_.request_done(api_name(req.api), 200);
  if (a.stream) channel.write(a.stream->finish(reply));
  std::fprintf(stderr,
               "ds4-server: request %lld api=%s status=200 stream=%d thinking=%s slot=%d prompt=%lld cached=%lld "
               "source=%s generated=%lld finish=%s queue_ms=%.0f prefill_tps=%.1f gen_tps=%.1f ms=%.0f\n",
               static_cast<long long>(job.number), api_name(req.api), req.stream ? 1 : 0, mode_name(job.mode),
               slot.index, static_cast<long long>(n_prompt), static_cast<long long>(cached),
               a.prefix.source.c_str(), static_cast<long long>(reply.usage.completion_tokens),
               finish_name(reply.finish), a.queue_seconds * 1000,
               a.prefill_seconds > 0 ? static_cast<double>(n_prompt - cached) / a.prefill_seconds : 0.0,
               gen.seconds > 0 ? static_cast<double>(reply.usage.completion_tokens) / gen.seconds : 0.0,
               total_seconds * 1000);
  if (trace_) {
    std::string& trace = a.trace;
    trace += "--- request ---\n" + job.raw_body + "\n--- rendered prompt ---\n" + job.prompt_text +
             "\n--- generated ---\n" + a.assembler->generated_text() + "\n--- parsed ---\nfinish: " +
             finish_name(reply.finish) + "\nprompt tokens: " + std::to_string(n_prompt) +
             "\ngenerated tokens: " + std::to_string(reply.usage.completion_tokens) + "\nreasoning: " +
             reply.reasoning + "\ncontent: " + reply.content + "\n";
    for (const auto& c : reply.tool_calls) trace += "tool call " + c.id + " " + c.name + " " + c.arguments_json + "\n";
    trace += "===== end request " + std::to_string(job.number) + " =====\n";
    trace_->write_block(trace);
  }
  channel.set_reply(std::move(reply));
  channel.close();
  release(a);
}

void Engine::fail(Active& a, const RequestError& e) {
  Job& job = *a.job;
  const ChatRequest& req = job.request;
  ReplyChannel& channel = *job.channel;
  // Counted before the client sees the end (as a finished request).
  metrics_.request_done(api_name(req.api), e.status);
  // A stream's 200 headers are out already: the error goes as an SSE event.
  if (req.stream) {
    if (!a.stream) a.stream = make_reply_stream(req, job.ids);
    channel.write(a.stream->error(e.what()));
  }
  channel.set_error(e);
  channel.close();
  std::fprintf(stderr, "ds4-server: request %lld api=%s status=%d error=\"%s\"\n", static_cast<long long>(job.number),
               api_name(req.api), e.status, e.what());
  if (trace_) {
    a.trace += std::string("--- error ---\n") + e.what() + "\n===== end request " + std::to_string(job.number) +
               " =====\n";
    trace_->write_block(a.trace);
  }
  release(a);
}

void Engine::release(Active& a) {
  a.generation_.reset();
  a.close();
  if (a.slot) a.slot->busy = false;
}

void Engine::Active::failed(engine::TaskFailure why, const std::string& message) {
  switch (why) {
    case engine::TaskFailure::Cancelled:
      server.fail(*this, RequestError("client disconnected " + message, 499));
      break;
    case engine::TaskFailure::Prefill:
      server.fail(*this, RequestError("prefill failed: " + message, 500, "server_error"));
      break;
    case engine::TaskFailure::Generation:
      server.fail(*this, RequestError("generation failed: " + message, 500, "server_error"));
      break;
    case engine::TaskFailure::Shutdown:
      server.fail(*this, RequestError("server is shutting down", 503, "server_error"));
      break;
    case engine::TaskFailure::Unavailable:
      server.fail(*this, RequestError("service unavailable: " + message, 503, "server_error"));
      break;
  }
}

void Engine::publish_metrics(size_t queued, size_t running) {
  metrics_.set_queue_depth(static_cast<int64_t>(queued), static_cast<int64_t>(running));
  for (const auto& s : slots_) {
    metrics_.set_slot(s->index, s->busy, s->session.size(), s->requests, s->generated);
  }
}

}  // namespace ds4::server
