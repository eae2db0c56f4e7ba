// The engine's worker: admits queued requests to free slots and advances
// all of them by batched steps (continuous batching, issue 23). A step is
// one backend::Backend::eval over the next token of every generating
// request and pieces of the prompts still prefilling (oldest first, within
// the step's budget: engine/step_planner.h); eval
// leaves each session exactly as evaluating it alone would, so a request's
// reply does not depend on what ran beside it.
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

void Engine::worker_loop() {
  ActiveList active;
  while (true) {
    std::vector<std::pair<std::shared_ptr<Job>, double>> admitted;
    {
      std::unique_lock lock(mutex_);
      if (active.empty()) cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (active.empty() && queue_.empty()) return;  // stopping, nothing left
      while (!queue_.empty() && active.size() + admitted.size() < slots_.size()) {
        admitted.emplace_back(queue_.front(), seconds_since(queue_.front()->queued_at));
        queue_.pop_front();
      }
      active_count_ = active.size() + admitted.size();
    }
    for (auto& [job, waited] : admitted) {
      if (std::unique_ptr<Active> a = start(std::move(job), waited)) active.push_back(std::move(a));
    }
    if (!active.empty()) step(active);
    std::erase_if(active, [](const std::unique_ptr<Active>& a) { return a->done; });
    {
      std::lock_guard lock(mutex_);
      active_count_ = active.size();
    }
    update_queue_metrics();
    publish_slot_metrics();
  }
}

std::unique_ptr<Engine::Active> Engine::start(std::shared_ptr<Job> job, double queue_seconds) {
  auto a = std::make_unique<Active>();
  a->job = std::move(job);
  a->t_start = EngineClock::now();
  a->queue_seconds = queue_seconds;
  metrics_.queue_wait(queue_seconds);
  Job& job_ref = *a->job;
  const ChatRequest& req = job_ref.request;
  if (trace_) a->trace = trace_header(job_ref);
  if (job_ref.channel->cancelled()) {
    fail(*a, RequestError("client disconnected before the request ran", 499));
    return nullptr;
  }

  Slot& slot = choose_slot(job_ref);
  slot.busy = true;
  ++slot.requests;
  a->slot = &slot;
  try {
    a->prefix = reuse(slot, job_ref, a->trace);
  } catch (const Error& e) {
    slot.session.reset();
    slot.visible_text.clear();
    fail(*a, RequestError(std::string("cache lookup failed: ") + e.what(), 500, "server_error"));
    return nullptr;
  }
  metrics_.cache_decision(a->prefix.source);
  const int64_t n_prompt = a->prompt_size();
  if (req.stream) {
    job_ref.ids.prompt_usage.prompt_tokens = n_prompt;
    job_ref.ids.prompt_usage.cached_tokens = a->prefix.cached;
    a->stream = make_reply_stream(req, job_ref.ids);
    job_ref.channel->write(a->stream->begin());
  }
  if (n_prompt >= config_.n_ctx) {
    fail(*a, context_overflow(req.api, n_prompt, config_.n_ctx));
    return nullptr;
  }
  // The live state is about to change: the old bindings go.
  slot.visible_text.clear();
  slot.visible_pending.clear();
  a->t_prefill = EngineClock::now();
  plan_prefill(*a);
  if (a->next_stop == a->stops.size()) begin_generation(*a);  // all of it cached
  if (a->done) return nullptr;
  return a;
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
  while (a.next_stop < stops.size() && stops[a.next_stop] <= pos) ++a.next_stop;
}

void Engine::step(ActiveList& active) {
  // Prompts whose client left stop before anything is spent on them.
  for (auto& a : active) {
    if (a->prefilling() && a->job->channel->cancelled()) {
      // The evaluated part of the prompt stays for reuse when it ends where
      // logits were computed (a checkpoint); a session without them is no
      // use to a later request.
      if (a->slot->session.logits().empty()) a->slot->session.reset();
      fail(*a, RequestError("client disconnected during prefill", 499));
    }
  }
  std::vector<backend::Part> parts;
  std::vector<Active*> decoding;
  for (auto& a : active) {
    if (!a->generation || a->done) continue;
    std::optional<int32_t> id;
    try {
      id = a->generation->step();
    } catch (const Error& e) {
      a->slot->session.reset();
      fail(*a, RequestError(std::string("generation failed: ") + e.what(), 500, "server_error"));
      continue;
    }
    if (!id) {
      finish_generation(*a);
      continue;
    }
    a->next_token = *id;
    parts.push_back({&a->slot->session, std::span<const int32_t>(&a->next_token, 1), nullptr});
    decoding.push_back(a.get());
  }
  // Beside decoding sessions whose step time is not known (lately), this
  // step measures it: no prompt pieces. Otherwise the prompt tokens it may
  // carry go to the prefilling prompts oldest first.
  std::vector<Active*> prefilling;
  std::vector<int64_t> remaining;
  for (auto& a : active) {
    if (!a->prefilling()) continue;
    prefilling.push_back(a.get());
    remaining.push_back(a->stops[a->next_stop] - a->slot->session.size());
  }
  const std::vector<int64_t> pieces = planner_.share_prefill(decoding.size(), remaining);
  std::vector<Active*> pres;
  int64_t prefilled = 0;
  for (size_t i = 0; i < prefilling.size(); ++i) {
    if (pieces[i] == 0) continue;
    Active* pre = prefilling[i];
    const int64_t pos = pre->slot->session.size();
    // Logits only where they are used: the prompt's end (sampling) and
    // checkpoints (a KV file holds them).
    parts.push_back({&pre->slot->session,
                     std::span<const int32_t>(pre->prefix.tokens).subspan(static_cast<size_t>(pos),
                                                                          static_cast<size_t>(pieces[i])),
                     nullptr, pieces[i] < remaining[i]});
    pres.push_back(pre);
    prefilled += pieces[i];
  }
  if (parts.empty()) return;

  const auto t0 = EngineClock::now();
  try {
    // A prompt evaluated alone can stop inside its piece when the client
    // leaves (beside other sessions a cancel would spoil theirs too).
    if (pres.size() == 1 && decoding.empty()) {
      backend_.set_progress([ch = pres[0]->job->channel.get()](int64_t, int64_t) { return !ch->cancelled(); });
    }
    backend_.eval(parts);
    backend_.set_progress(nullptr);
  } catch (const Cancelled&) {
    backend_.set_progress(nullptr);
    pres[0]->slot->session.reset();
    fail(*pres[0], RequestError("client disconnected during prefill", 499));
    return;
  } catch (const Error& e) {
    backend_.set_progress(nullptr);
    for (Active* a : decoding) {
      a->slot->session.reset();
      fail(*a, RequestError(std::string("generation failed: ") + e.what(), 500, "server_error"));
    }
    for (Active* pre : pres) {
      pre->slot->session.reset();
      fail(*pre, RequestError(std::string("prefill failed: ") + e.what(), 500, "server_error"));
    }
    return;
  }
  const double seconds = seconds_since(t0);
  planner_.learn(seconds, decoding.size(), prefilled);
  metrics_.batch_step(static_cast<int64_t>(parts.size()), static_cast<int64_t>(decoding.size()) + prefilled,
                      seconds);
  for (Active* a : decoding) ++a->slot->generated;
  for (Active* pre : pres) prefill_advanced(*pre);
}

void Engine::prefill_advanced(Active& a) {
  Slot& slot = *a.slot;
  const int64_t pos = slot.session.size();
  if (pos < a.stops[a.next_stop]) return;  // more pieces before this stop
  const int64_t stop = a.stops[a.next_stop++];
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
    a.generation.emplace(session, tokenizer_, *a.sampler, a.limits, a.hooks);
  } catch (const Error& e) {
    fail(a, RequestError(std::string("generation failed: ") + e.what(), 500, "server_error"));
  }
}

void Engine::finish_generation(Active& a) {
  Job& job = *a.job;
  const ChatRequest& req = job.request;
  Slot& slot = *a.slot;
  ReplyChannel& channel = *job.channel;
  runtime::GenerateResult gen = a.generation->finish();
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
  a.done = true;
  a.generation.reset();
  if (a.slot) a.slot->busy = false;
}

void Engine::publish_slot_metrics() {
  for (const auto& s : slots_) {
    metrics_.set_slot(s->index, s->busy, s->session.size(), s->requests, s->generated);
  }
}

}  // namespace ds4::server
