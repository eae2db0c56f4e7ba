#include "server/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <set>

#include "backend/backend.h"
#include "core/utf8.h"
#include "core/error.h"
#include "runtime/generate.h"
#include "runtime/kv_disk_cache.h"
#include "runtime/sampler.h"
#include "runtime/tool_call_constraint.h"
#include "server/engine_internal.h"
#include "server/metrics.h"
#include "server/reply_assembler.h"
#include "server/trace_log.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

namespace ds4::server {

namespace {

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

Engine::Engine(const text::Tokenizer& tokenizer, backend::Backend& backend, EngineConfig config,
               std::unique_ptr<runtime::KvDiskCache> disk, Metrics& metrics, TraceLog* trace)
    : tokenizer_(tokenizer),
      backend_(backend),
      config_(std::move(config)),
      disk_(std::move(disk)),
      metrics_(metrics),
      trace_(trace),
      tool_memory_(config_.exact_tool_replay ? config_.tool_memory_max_ids : 0, config_.tool_memory_max_bytes),
      ram_(backend, config_.cache_ram_bytes,
           config_.cache_ram_min_tokens >= 1 ? config_.cache_ram_min_tokens
                                             : throw Error("--cache-ram-min-tokens must be at least 1")) {
  if (config_.batched_sessions < 1) throw Error("--batched-session must be at least 1");
  if (!(config_.max_decode_stall >= 1.0)) throw Error("--max-decode-stall must be at least 1");
  for (int i = 0; i < config_.batched_sessions; ++i) {
    slots_.push_back(std::make_unique<Slot>(backend_.new_session(config_.n_ctx), i));
  }
  engine::SchedulerOptions so;
  so.max_running = slots_.size();
  so.queue_max = config_.queue_max;
  so.max_decode_stall = config_.max_decode_stall;
  so.on_step = [this](int64_t sessions, int64_t tokens, double seconds) {
    metrics_.batch_step(sessions, tokens, seconds);
    if (config_.streaming_stats) metrics_.set_expert_cache(config_.streaming_stats());
  };
  so.on_queue = [this](size_t queued, size_t running) { publish_metrics(queued, running); };
  scheduler_ = std::make_unique<engine::Scheduler>(backend_, std::move(so));
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
  switch (scheduler_->submit(std::make_shared<Active>(*this, job))) {
    case engine::Scheduler::Submitted::Queued: break;
    case engine::Scheduler::Submitted::Stopping: throw RequestError("server is shutting down", 503, "server_error");
    case engine::Scheduler::Submitted::Full: {
      RequestError e("server busy: " + std::to_string(scheduler_->queued()) + " requests are waiting; retry later",
                     503, "server_error");
      e.code = "queue_full";
      throw e;
    }
  }
  metrics_.set_queue_depth(static_cast<int64_t>(scheduler_->queued()), static_cast<int64_t>(scheduler_->running()));
}

void Engine::shutdown() { std::call_once(shutdown_once_, [this] { shutdown_now(); }); }

void Engine::shutdown_now() {
  // Queued requests get 503, running ones finish; then the worker is gone.
  scheduler_->stop();
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

Engine::Slot& Engine::choose_slot(const Job& job) {
  // Among the free slots: the one whose live state the prompt extends
  // furthest; else an empty one; else the least recently used. The worker
  // admits a job only when a slot is free.
  Slot* best = nullptr;
  int64_t best_len = 0;
  for (auto& s : slots_) {
    if (s->busy) continue;
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
      if (!s->busy && s->session.size() == 0) {
        best = s.get();
        break;
      }
    }
    if (best == nullptr) {
      for (auto& s : slots_) {
        if (!s->busy && (best == nullptr || s->last_used < best->last_used)) best = s.get();
      }
    }
    if (best == nullptr) throw Error("engine: no free slot (a request was admitted beyond the slots)");
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
        backend_.eval(slot.session, slot.visible_pending);
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

void Engine::evict_live(Slot& slot, std::string& trace) {
  if (slot.session.size() == 0) return;
  store_in_ram(slot);
  if (disk_ && slot.session.size() >= disk_->config().min_tokens) {
    uint8_t flags = 0;
    const std::string key = live_key(slot, &flags);
    save_to_disk(slot, static_cast<int>(runtime::KvSaveReason::Evict), key, flags);
    trace += "saved the live session (evict)\n";
  }
  slot.visible_text.clear();
  slot.visible_pending.clear();
  slot.session.reset();
}

void Engine::store_in_ram(const Slot& slot) {
  if (!ram_.enabled()) return;
  try {
    ram_.store(slot.session);
  } catch (const Error& e) {
    // Losing a cache entry loses no request: say so and go on.
    std::fprintf(stderr, "ds4-server: RAM prefix cache: state of slot %d not kept: %s\n", slot.index, e.what());
  }
  const engine::PrefixCache::Stats st = ram_.stats();
  metrics_.set_ram_cache(st.entries, st.bytes, st.stores, st.evictions);
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

  // A RAM state longer than what the live session gives wins over it; the
  // disk is asked only when neither holds anything for this prompt.
  const std::optional<int64_t> ram = ram_.find(job.prompt_tokens);
  if (ram && *ram > p.cached) {
    evict_live(slot, trace);
    try {
      ram_.load(job.prompt_tokens, *ram, slot.session);
      p.tokens = job.prompt_tokens;
      p.cached = *ram;
      p.source = "ram";
      trace += "ram hit: " + std::to_string(*ram) + " tokens\n";
    } catch (const Error& e) {
      slot.session.reset();
      trace += std::string("ram hit not loaded: ") + e.what() + "\n";
    }
  }
  if (p.source.empty()) {
    evict_live(slot, trace);
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

}  // namespace ds4::server
