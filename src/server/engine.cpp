#include "server/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <set>

#include "backend/cpu/forward.h"
#include "core/utf8.h"
#include "core/error.h"
#include "model/deepseek4_model.h"
#include "runtime/generate.h"
#include "runtime/kv_disk_cache.h"
#include "runtime/sampler.h"
#include "runtime/tool_call_constraint.h"
#include "server/metrics.h"
#include "server/reply_assembler.h"
#include "server/trace_log.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

namespace ds4::server {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}


const char* param_name(Api api) {
  switch (api) {
    case Api::Completions: return "prompt";
    case Api::Responses: return "input";
    default: return "messages";
  }
}

const char* mode_name(text::ThinkingMode m) {
  switch (m) {
    case text::ThinkingMode::None: return "none";
    case text::ThinkingMode::High: return "high";
    case text::ThinkingMode::Max: return "max";
  }
  return "?";
}

const char* finish_name(FinishReason f) {
  switch (f) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::ToolCalls: return "tool_calls";
    case FinishReason::Error: return "error";
  }
  return "?";
}

RequestError context_overflow(Api api, int64_t prompt, int64_t n_ctx) {
  RequestError e("Prompt has " + std::to_string(prompt) + " tokens, but the configured context size is " +
                 std::to_string(n_ctx) + " tokens");
  e.param = param_name(api);
  e.code = "context_length_exceeded";
  e.extra["n_prompt_tokens"] = prompt;
  e.extra["n_ctx"] = n_ctx;
  return e;
}

constexpr uint8_t kKeyResponsesVisible = runtime::kKvExtResponsesVisibleKey;
constexpr uint8_t kKeyThinkingVisible = runtime::kKvExtThinkingVisibleKey;

const char* reason_name(runtime::KvSaveReason r) {
  switch (r) {
    case runtime::KvSaveReason::Cold: return "cold";
    case runtime::KvSaveReason::Continued: return "continued";
    case runtime::KvSaveReason::Evict: return "evict";
    case runtime::KvSaveReason::Shutdown: return "shutdown";
    default: return "other";
  }
}

}  // namespace

// A resident session and what the engine knows about it.
struct Engine::Slot {
  explicit Slot(cpu::Session s) : session(std::move(s)) {}
  cpu::Session session;
  // The client-visible transcript at the live frontier (the last reply as
  // the client will send it back: hidden reasoning dropped), and the tokens
  // after session.tokens() that it already covers (EOS, an unevaluated
  // last token). Empty text = no binding.
  std::string visible_text;
  std::vector<int32_t> visible_pending;
  uint8_t visible_flags = 0;
  int64_t last_frontier = 0;  // position of the last continued save
  uint64_t last_used = 0;
};

// What a request reuses: its effective prompt tokens and how many of them the
// slot's session already holds.
struct Engine::Prefix {
  std::vector<int32_t> tokens;
  int64_t cached = 0;
  std::string source;  // memory-token | visible | memory-text | disk | cold
};

Engine::Engine(const text::Tokenizer& tokenizer, cpu::Forward& forward, EngineConfig config,
               std::unique_ptr<runtime::KvDiskCache> disk, Metrics& metrics, TraceLog* trace)
    : tokenizer_(tokenizer),
      forward_(forward),
      config_(std::move(config)),
      disk_(std::move(disk)),
      metrics_(metrics),
      trace_(trace),
      tool_memory_(config_.exact_tool_replay ? config_.tool_memory_max_ids : 0, config_.tool_memory_max_bytes) {
  if (config_.batched_sessions < 1) throw Error("--batched-session must be at least 1");
  for (int i = 0; i < config_.batched_sessions; ++i) {
    slots_.push_back(std::make_unique<Slot>(forward_.new_session(config_.n_ctx)));
  }
  worker_ = std::thread([this] { worker_loop(); });
}

Engine::~Engine() { shutdown(); }

std::string Engine::render_prompt(const ChatRequest& request, text::ThinkingMode mode, std::string* replay_stats) {
  const bool tools_active = request.tools.is_array() && !request.tools.empty();
  text::RenderOptions options;
  options.mode = mode;
  int exact = 0, canonical = 0;
  if (config_.exact_tool_replay) {
    options.exact_tool_block = [&](const std::vector<std::string>& ids) -> std::optional<std::string> {
      std::optional<std::string> block = tool_memory_.exact_block(ids);
      if (!block && disk_) {
        // Replay survives restarts: the KV files carry their tool-id maps.
        std::set<std::string> wanted(ids.begin(), ids.end());
        std::vector<std::pair<std::string, std::string>> found;
        {
          std::lock_guard lock(disk_mutex_);
          found = disk_->find_tool_blocks(wanted);
        }
        for (const auto& [id, b] : found) tool_memory_.remember({id}, b);
        block = tool_memory_.exact_block(ids);
      }
      ++(block ? exact : canonical);
      return block;
    };
  }
  std::string text;
  try {
    text = text::render_chat(request.messages, tools_active ? request.tools : nlohmann::ordered_json(nullptr), options)
               .text();
  } catch (const Error& e) {
    throw RequestError(e.what());
  }
  if (replay_stats) *replay_stats = "exact=" + std::to_string(exact) + " canonical=" + std::to_string(canonical);
  if (request.response_prefix) text += *request.response_prefix;
  return text;
}

int64_t Engine::count_prompt_tokens(const ChatRequest& request) {
  const auto mode = text::effective_thinking_mode(requested_thinking_mode(request), config_.n_ctx, nullptr);
  return static_cast<int64_t>(tokenizer_.encode(render_prompt(request, mode, nullptr), true).size());
}

std::shared_ptr<Job> Engine::prepare(ChatRequest request, std::string raw_body) {
  auto job = std::make_shared<Job>();
  job->number = ++counter_;
  job->raw_body = std::move(raw_body);
  job->mode = text::effective_thinking_mode(requested_thinking_mode(request), config_.n_ctx, nullptr);
  job->tools_active = request.tools.is_array() && !request.tools.empty();
  job->prompt_text = render_prompt(request, job->mode, &job->tool_replay_stats);
  if (request.tool_required && job->tools_active) {
    if (request.response_prefix) throw RequestError("a required tool call cannot follow a response prefix");
    std::call_once(vocab_once_, [this] { vocab_trie_ = std::make_shared<const runtime::VocabTrie>(tokenizer_); });
    try {
      job->constraint = std::make_shared<const runtime::ToolCallConstraint>(
          request.tools, request.forced_tool, vocab_trie_, job->mode != text::ThinkingMode::None);
    } catch (const Error& e) {
      throw RequestError(std::string("tool_choice: ") + e.what());
    }
  }
  job->prompt_tokens = tokenizer_.encode(job->prompt_text, true);
  const int64_t n = static_cast<int64_t>(job->prompt_tokens.size());
  if (n >= config_.n_ctx) throw context_overflow(request.api, n, config_.n_ctx);

  job->ids.created = static_cast<int64_t>(std::time(nullptr));
  switch (request.api) {
    case Api::Completions: job->ids.id = "cmpl-" + std::to_string(job->number); break;
    case Api::Responses: job->ids.id = random_hex_id("resp_"); break;
    default: job->ids.id = "chatcmpl-" + std::to_string(job->number); break;
  }
  job->request = std::move(request);
  return job;
}

void Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw RequestError("server is shutting down", 503, "server_error");
    // queue_max counts requests waiting behind the running one; an idle
    // worker takes the next at once.
    if (queue_.size() >= config_.queue_max + (running_job_ ? 0 : 1)) {
      RequestError e("server busy: " + std::to_string(queue_.size()) + " requests are waiting; retry later", 503,
                     "server_error");
      e.code = "queue_full";
      throw e;
    }
    queue_.push_back(job);
  }
  update_queue_metrics();
  cv_.notify_all();
}

void Engine::update_queue_metrics() {
  std::lock_guard lock(mutex_);
  metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()), running_job_ ? 1 : 0);
}

void Engine::shutdown() { std::call_once(shutdown_once_, [this] { shutdown_now(); }); }

void Engine::shutdown_now() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& job : dropped) {
    job->channel->set_error(RequestError("server is shutting down", 503, "server_error"));
    if (job->request.stream) {
      // The stream's headers may already be out: end it with an error event.
      job->channel->write(make_reply_stream(job->request, job->ids)->error("server is shutting down"));
    }
    job->channel->close();
  }
  if (worker_.joinable()) worker_.join();
  if (disk_) {
    for (auto& slot : slots_) {
      if (slot->session.size() >= disk_->config().min_tokens && slot->session.consistent()) {
        uint8_t flags = 0;
        const std::string key = live_key(*slot, &flags);
        save_to_disk(*slot, static_cast<int>(runtime::KvSaveReason::Shutdown), key, flags);
      }
    }
  }
}

void Engine::worker_loop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = queue_.front();
      queue_.pop_front();
      running_job_ = true;
    }
    update_queue_metrics();
    run(*job);
    {
      std::lock_guard lock(mutex_);
      running_job_ = false;
    }
    update_queue_metrics();
  }
}

Engine::Slot& Engine::choose_slot(const Job& job) {
  // The slot whose live state the prompt extends furthest; else an empty
  // one; else the least recently used.
  Slot* best = nullptr;
  int64_t best_len = 0;
  for (auto& s : slots_) {
    const auto live = s->session.tokens();
    int64_t len = 0;
    if (!live.empty() && live.size() <= job.prompt_tokens.size() &&
        std::equal(live.begin(), live.end(), job.prompt_tokens.begin())) {
      len = static_cast<int64_t>(live.size());
    } else if (!s->visible_text.empty() && starts_with(job.prompt_text, s->visible_text)) {
      len = static_cast<int64_t>(live.size());
    } else if (!live.empty() && s->session.consistent()) {
      // A text-level match (BPE split differently): decode only when cheap
      // enough to matter, i.e. always; the live text is at most n_ctx tokens.
      if (starts_with(job.prompt_text, sanitize_utf8(tokenizer_.decode(live)))) len = static_cast<int64_t>(live.size());
    }
    if (len > best_len || (len == best_len && best != nullptr && len > 0 && s->last_used > best->last_used)) {
      best = s.get();
      best_len = len;
    }
  }
  if (best == nullptr || best_len == 0) {
    best = nullptr;
    for (auto& s : slots_) {
      if (s->session.size() == 0) {
        best = s.get();
        break;
      }
    }
    if (best == nullptr) {
      best = slots_.front().get();
      for (auto& s : slots_) {
        if (s->last_used < best->last_used) best = s.get();
      }
    }
  }
  best->last_used = ++slot_clock_;
  return *best;
}

std::string Engine::live_key(Slot& slot, uint8_t* key_flags) {
  *key_flags = 0;
  if (!slot.visible_text.empty()) {
    // A visible key stands for the session with its pending tokens (EOS…)
    // evaluated: evaluate them now so that the payload matches the key.
    if (!slot.visible_pending.empty()) {
      if (slot.session.size() + static_cast<int64_t>(slot.visible_pending.size()) > slot.session.n_ctx()) {
        slot.visible_text.clear();
      } else {
        forward_.eval(slot.session, slot.visible_pending);
        slot.visible_pending.clear();
      }
    }
    if (!slot.visible_text.empty()) {
      *key_flags = slot.visible_flags;
      return slot.visible_text;
    }
  }
  return tokenizer_.decode(slot.session.tokens());
}

void Engine::save_to_disk(Slot& slot, int reason, const std::string& key, uint8_t key_flags) {
  if (!disk_ || key.empty()) return;
  const auto r = static_cast<runtime::KvSaveReason>(reason);
  std::string path;
  {
    std::lock_guard lock(disk_mutex_);
    path = disk_->store(key, slot.session, r, key_flags, tool_memory_.entries_in(key));
    const auto stats = disk_->stats();
    metrics_.set_disk_usage(stats.files, stats.bytes);
  }
  if (!path.empty()) metrics_.disk_save(reason_name(r));
}

Engine::Prefix Engine::reuse(Slot& slot, Job& job, std::string& trace) {
  Prefix p;
  const std::vector<int32_t> live(slot.session.tokens().begin(), slot.session.tokens().end());
  const std::string& prompt_text = job.prompt_text;
  auto extend = [&](std::vector<int32_t> base, std::string_view suffix) {
    const auto more = tokenizer_.encode(suffix, true);
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  trace += "live tokens: " + std::to_string(live.size()) + "\n";

  if (!slot.session.consistent()) {
    slot.session.reset();
    slot.visible_text.clear();
  } else if (!live.empty() && live.size() <= job.prompt_tokens.size() &&
             std::equal(live.begin(), live.end(), job.prompt_tokens.begin())) {
    p.tokens = job.prompt_tokens;
    p.cached = static_cast<int64_t>(live.size());
    p.source = "memory-token";
  } else if (!slot.visible_text.empty() && starts_with(prompt_text, slot.visible_text)) {
    p.tokens = live;
    p.tokens.insert(p.tokens.end(), slot.visible_pending.begin(), slot.visible_pending.end());
    p.tokens = extend(std::move(p.tokens), std::string_view(prompt_text).substr(slot.visible_text.size()));
    p.cached = static_cast<int64_t>(live.size());
    p.source = "visible";
  } else if (!live.empty()) {
    // Clients get invalid UTF-8 as U+FFFD and send it back that way.
    const std::string live_text = sanitize_utf8(tokenizer_.decode(live));
    if (starts_with(prompt_text, live_text)) {
      p.tokens = extend(live, std::string_view(prompt_text).substr(live_text.size()));
      p.cached = static_cast<int64_t>(live.size());
      p.source = "memory-text";
    } else {
      // Where the live text and the prompt part, for the trace.
      size_t at = 0;
      while (at < live_text.size() && at < prompt_text.size() && live_text[at] == prompt_text[at]) ++at;
      trace += "miss: live text and prompt differ at byte " + std::to_string(at) + " of " +
               std::to_string(live_text.size()) + "\n";
    }
  }

  if (p.source.empty()) {
    if (disk_ && slot.session.size() >= disk_->config().min_tokens) {
      uint8_t flags = 0;
      const std::string key = live_key(slot, &flags);
      save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Evict), key, flags);
      trace += "saved the live session (evict)\n";
    }
    slot.visible_text.clear();
    slot.visible_pending.clear();
    std::optional<runtime::KvDiskCache::Hit> hit;
    if (disk_) {
      std::lock_guard lock(disk_mutex_);
      hit = disk_->load_longest_prefix(prompt_text, slot.session);
    }
    if (hit) {
      for (const auto& [id, block] : hit->tool_blocks) tool_memory_.remember({id}, block);
      const std::vector<int32_t> loaded(slot.session.tokens().begin(), slot.session.tokens().end());
      p.tokens = extend(loaded, std::string_view(prompt_text).substr(hit->text_len));
      p.cached = static_cast<int64_t>(loaded.size());
      p.source = "disk";
      trace += "disk hit: " + hit->path + " (" + std::to_string(hit->text_len) + " bytes, " +
               std::to_string(hit->tokens) + " tokens)\n";
    } else {
      slot.session.reset();
      p.tokens = job.prompt_tokens;
      p.cached = 0;
      p.source = "cold";
    }
  }
  slot.last_frontier = std::max<int64_t>(slot.last_frontier, 0);
  trace += "cache_source: " + p.source + "\ncached tokens: " + std::to_string(p.cached) +
           "\nprompt tokens: " + std::to_string(p.tokens.size()) + "\n";
  return p;
}

void Engine::run(Job& job) {
  ReplyChannel& channel = *job.channel;
  const ChatRequest& req = job.request;
  const auto t_start = Clock::now();
  std::string trace;
  if (trace_) {
    const std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    trace += "===== request " + std::to_string(job.number) + " " + when + " =====\n";
    trace += std::string("api: ") + api_name(req.api) + "\nmodel: " + req.model + "\nthinking: " +
             mode_name(job.mode) + "\nstream: " + (req.stream ? "true" : "false") +
             "\ntools: " + (job.tools_active ? std::to_string(req.tools.size()) : std::string("0")) + "\n";
    trace += "--- cache decision ---\ntool_replay: " + job.tool_replay_stats + "\n";
  }

  std::unique_ptr<ReplyStream> stream;
  auto fail = [&](const RequestError& e) {
    // A stream's 200 headers are out already: the error goes as an SSE event.
    if (req.stream) {
      if (!stream) stream = make_reply_stream(req, job.ids);
      channel.write(stream->error(e.what()));
    }
    channel.set_error(e);
    channel.close();
    metrics_.request_done(api_name(req.api), e.status);
    std::fprintf(stderr, "ds4-server: request %lld api=%s status=%d error=\"%s\"\n",
                 static_cast<long long>(job.number), api_name(req.api), e.status, e.what());
    if (trace_) {
      trace += std::string("--- error ---\n") + e.what() + "\n===== end request " + std::to_string(job.number) +
               " =====\n";
      trace_->write_block(trace);
    }
  };
  if (channel.cancelled()) {
    fail(RequestError("client disconnected before the request ran", 499));
    return;
  }

  Slot& slot = choose_slot(job);
  cpu::Session& session = slot.session;
  Prefix prefix;
  try {
    prefix = reuse(slot, job, trace);
  } catch (const Error& e) {
    session.reset();
    slot.visible_text.clear();
    fail(RequestError(std::string("cache lookup failed: ") + e.what(), 500, "server_error"));
    return;
  }
  metrics_.cache_decision(prefix.source);
  const int64_t n_prompt = static_cast<int64_t>(prefix.tokens.size());
  if (req.stream) {
    job.ids.prompt_usage.prompt_tokens = n_prompt;
    job.ids.prompt_usage.cached_tokens = prefix.cached;
    stream = make_reply_stream(req, job.ids);
    channel.write(stream->begin());
  }
  if (n_prompt >= config_.n_ctx) {
    fail(context_overflow(req.api, n_prompt, config_.n_ctx));
    return;
  }
  // The live state is about to change: the old bindings go.
  slot.visible_text.clear();
  slot.visible_pending.clear();

  // Prefill what is not cached, in pieces ending where checkpoints are due.
  const auto t_prefill = Clock::now();
  const int64_t cached = prefix.cached;
  try {
    forward_.set_progress([&channel](int64_t, int64_t) { return !channel.cancelled(); });
    std::vector<int64_t> stops;
    int64_t cold_at = 0;
    const runtime::KvCacheConfig* kc = disk_ ? &disk_->config() : nullptr;
    if (kc && prefix.source == "cold") {
      cold_at = runtime::cold_save_length(prefix.tokens, tokenizer_.user(), tokenizer_.assistant(), *kc);
      if (cold_at > cached && cold_at < n_prompt) stops.push_back(cold_at);
    }
    const int64_t step = kc ? runtime::continued_step(*kc) : 0;
    if (step > 0) {
      for (int64_t at = (cached / step + 1) * step; at < n_prompt; at += step) {
        if (at >= kc->min_tokens) stops.push_back(at);
      }
    }
    std::sort(stops.begin(), stops.end());
    stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
    stops.push_back(n_prompt);
    int64_t pos = session.size();
    for (int64_t stop : stops) {
      if (stop <= pos) continue;
      forward_.eval(session, std::span<const int32_t>(prefix.tokens).subspan(static_cast<size_t>(pos),
                                                                             static_cast<size_t>(stop - pos)));
      pos = stop;
      if (stop == n_prompt) break;
      if (stop == cold_at) {
        save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Cold), tokenizer_.decode(session.tokens()), 0);
        slot.last_frontier = std::max(slot.last_frontier, stop);
        trace += "cold save at " + std::to_string(stop) + " tokens\n";
      } else if (step > 0 && stop % step == 0 && stop > slot.last_frontier) {
        save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Continued), tokenizer_.decode(session.tokens()),
                     0);
        slot.last_frontier = stop;
        trace += "continued save at " + std::to_string(stop) + " tokens\n";
      }
    }
    forward_.set_progress(nullptr);
  } catch (const Cancelled&) {
    forward_.set_progress(nullptr);
    session.reset();
    fail(RequestError("client disconnected during prefill", 499));
    return;
  } catch (const Error& e) {
    forward_.set_progress(nullptr);
    session.reset();
    fail(RequestError(std::string("prefill failed: ") + e.what(), 500, "server_error"));
    return;
  }
  const double prefill_seconds = seconds_since(t_prefill);
  channel.mark_generating();

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
  uint64_t seed = req.seed && *req.seed > 0 ? *req.seed
                                            : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) | 1;
  std::optional<runtime::Sampler> sampler;
  try {
    sampler.emplace(sp, seed);
  } catch (const Error& e) {
    fail(RequestError(e.what()));
    return;
  }

  runtime::GenerateLimits limits;
  const int64_t room = config_.n_ctx - session.size();
  limits.max_tokens = static_cast<int>(std::min<int64_t>({req.max_tokens.value_or(config_.max_tokens),
                                                          config_.max_tokens, room}));
  if (limits.max_tokens < 0) limits.max_tokens = 0;
  limits.stop_strings = req.stop;
  limits.greedy_syntax = job.tools_active;
  limits.stop_at_tool_block = job.tools_active;
  limits.thinking = job.mode != text::ThinkingMode::None;
  limits.assistant_prefix = req.response_prefix.value_or("");
  limits.logit_bias = req.logit_bias;
  limits.constraint = job.constraint.get();

  // The generated text → reasoning / content / tool calls, as events.
  ReplyAssembler assembler(req, job.tools_active, limits.thinking, stream.get(), channel, tool_memory_,
                           trace_ ? &trace : nullptr);
  assembler.feed_prefix(limits.assistant_prefix);

  const int64_t step = disk_ ? runtime::continued_step(disk_->config()) : 0;
  runtime::GenerateHooks hooks;
  hooks.cancelled = [&channel] { return channel.cancelled(); };
  hooks.on_token = [&](int32_t, std::string_view text) {
    assembler.feed(text);
    // Continued checkpoints during long replies, never inside a tool block.
    const int64_t pos = session.size();
    if (step > 0 && pos % step == 0 && pos > slot.last_frontier && pos >= disk_->config().min_tokens &&
        !assembler.in_tool_block()) {
      save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Continued), tokenizer_.decode(session.tokens()), 0);
      slot.last_frontier = pos;
    }
    return runtime::StopReason::None;
  };

  runtime::GenerateResult gen;
  try {
    gen = runtime::generate(forward_, session, tokenizer_, *sampler, limits, hooks);
  } catch (const Error& e) {
    session.reset();
    fail(RequestError(std::string("generation failed: ") + e.what(), 500, "server_error"));
    return;
  }
  if (gen.reason == runtime::StopReason::Cancelled) {
    // The client is gone: nothing to send. The session holds what was
    // evaluated and stays usable for the next request.
    fail(RequestError("client disconnected during generation", 499));
    return;
  }

  Reply reply = assembler.finish(gen, n_prompt, cached);
  const text::ParsedMessage& m = assembler.message();

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
  if (clean_end && limits.thinking && m.thinking_closed && !req.response_prefix && reply.finish != FinishReason::Error) {
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

  if (stream) channel.write(stream->finish(reply));
  const double total_seconds = seconds_since(t_start);
  const double gen_seconds = gen.seconds;
  metrics_.tokens(n_prompt, cached, reply.usage.completion_tokens, prefill_seconds, n_prompt - cached, gen_seconds);
  metrics_.request_done(api_name(req.api), 200);
  std::fprintf(stderr,
               "ds4-server: request %lld api=%s status=200 stream=%d thinking=%s prompt=%lld cached=%lld source=%s "
               "generated=%lld finish=%s prefill_tps=%.1f gen_tps=%.1f ms=%.0f\n",
               static_cast<long long>(job.number), api_name(req.api), req.stream ? 1 : 0, mode_name(job.mode),
               static_cast<long long>(n_prompt), static_cast<long long>(cached), prefix.source.c_str(),
               static_cast<long long>(reply.usage.completion_tokens), finish_name(reply.finish),
               prefill_seconds > 0 ? static_cast<double>(n_prompt - cached) / prefill_seconds : 0.0,
               gen_seconds > 0 ? static_cast<double>(reply.usage.completion_tokens) / gen_seconds : 0.0,
               total_seconds * 1000);
  if (trace_) {
    trace += "--- request ---\n" + job.raw_body + "\n--- rendered prompt ---\n" + job.prompt_text +
             "\n--- generated ---\n" + assembler.generated_text() + "\n--- parsed ---\nfinish: " + finish_name(reply.finish) +
             "\nprompt tokens: " + std::to_string(n_prompt) + "\ngenerated tokens: " +
             std::to_string(reply.usage.completion_tokens) + "\nreasoning: " + reply.reasoning +
             "\ncontent: " + reply.content + "\n";
    for (const auto& c : reply.tool_calls) trace += "tool call " + c.id + " " + c.name + " " + c.arguments_json + "\n";
    trace += "===== end request " + std::to_string(job.number) + " =====\n";
    trace_->write_block(trace);
  }
  channel.set_reply(std::move(reply));
  channel.close();
}

}  // namespace ds4::server
