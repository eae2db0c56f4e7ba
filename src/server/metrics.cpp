#include "server/metrics.h"

#include <cstdio>

namespace ds4::server {

void Metrics::request_done(const std::string& api, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{api, status}];
}

void Metrics::tokens(int64_t prompt, int64_t cached, int64_t generated, double prefill_seconds, int64_t prefilled,
                     double decode_seconds) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  cached_tokens_ += static_cast<uint64_t>(cached);
  generated_tokens_ += static_cast<uint64_t>(generated);
  prefilled_tokens_ += static_cast<uint64_t>(prefilled);
  prefill_seconds_ += prefill_seconds;
  decode_seconds_ += decode_seconds;
  if (prefilled > 0 && prefill_seconds > 0) last_prefill_tps_ = static_cast<double>(prefilled) / prefill_seconds;
  if (generated > 0 && decode_seconds > 0) last_decode_tps_ = static_cast<double>(generated) / decode_seconds;
}

void Metrics::cache_decision(const std::string& source) {
  std::lock_guard lock(mutex_);
  ++cache_[source];
}

void Metrics::disk_save(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++disk_saves_[reason];
}

void Metrics::set_route(const dist::RouteStatus& route) {
  std::lock_guard lock(mutex_);
  has_route_ = true;
  route_ = route;
}

void Metrics::set_queue_depth(int64_t queued, int64_t running) {
  std::lock_guard lock(mutex_);
  queued_ = queued;
  running_ = running;
}

void Metrics::set_disk_usage(uint64_t files, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  disk_files_ = files;
  disk_bytes_ = bytes;
}

void Metrics::set_ram_cache(uint64_t entries, uint64_t bytes, uint64_t stores, uint64_t evictions) {
  std::lock_guard lock(mutex_);
  ram_entries_ = entries;
  ram_bytes_ = bytes;
  ram_stores_ = stores;
  ram_evictions_ = evictions;
}

void Metrics::set_expert_cache(const engine::StreamingStats& stats) {
  std::lock_guard lock(mutex_);
  experts_ = stats;
}

void Metrics::queue_wait(double seconds) {
  std::lock_guard lock(mutex_);
  queue_wait_.add(seconds);
}

void Metrics::batch_step(int64_t sessions, int64_t tokens, double seconds) {
  std::lock_guard lock(mutex_);
  step_sessions_.add(static_cast<double>(sessions));
  step_seconds_.add(seconds);
  step_tokens_ += static_cast<uint64_t>(tokens);
  last_step_sessions_ = sessions;
}

void Metrics::set_slot(int slot, bool busy, int64_t tokens, uint64_t requests, uint64_t generated) {
  std::lock_guard lock(mutex_);
  slots_[slot] = SlotState{busy, tokens, requests, generated};
}

void Metrics::Histogram::add(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void value(std::string& out, const std::string& name_and_labels, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.17g\n", v);
  out += name_and_labels;
  out += buf;
}

// A metric with one unlabelled sample: its HELP/TYPE header and the value
// (a count or a time), the name written once.
template <class Number>
void scalar(std::string& out, const char* name, const char* type, const char* help, Number v) {
  metric(out, name, type, help);
  value(out, name, static_cast<double>(v));
}

// The SSD expert cache's gauge and counters (docs/streaming.md), one row of
// the table each.
void expert_cache_metrics(std::string& out, const engine::StreamingStats& st) {
  struct Row {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Row rows[] = {
      {"slots", "gauge", "Routed experts the SSD streaming cache holds (0: not streaming).",
       static_cast<double>(st.slots)},
      {"hits_total", "counter", "Routed experts found in the cache when a layer needed them.",
       static_cast<double>(st.hits)},
      {"prefetch_hits_total", "counter", "Routed experts a prefetch had read (or was reading) when a layer needed them.",
       static_cast<double>(st.prefetch_hits)},
      {"misses_total", "counter", "Routed experts read from the file when a layer needed them.",
       static_cast<double>(st.misses)},
      {"prefetched_total", "counter", "Routed experts read ahead by prefetch.", static_cast<double>(st.prefetched)},
      {"prefetch_unused_total", "counter", "Prefetched experts no layer asked for before the next tokens.",
       static_cast<double>(st.prefetch_unused)},
      {"read_bytes_total", "counter", "Bytes of routed experts read from the model file.",
       static_cast<double>(st.bytes_read)},
      {"wait_seconds_total", "counter", "Time evaluations waited for expert reads.", st.read_seconds},
  };
  for (const Row& r : rows) scalar(out, (std::string("ds4_expert_cache_") + r.name).c_str(), r.type, r.help, r.value);
}

// Per stage of a distributed route, labelled by its layers.
void route_metrics(std::string& out, const dist::RouteStatus& route) {
  scalar(out, "ds4_dist_route_complete", "gauge", "1 while workers serve every layer after the coordinator's.",
         route.complete ? 1 : 0);
  struct Column {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const dist::StageInfo&);
  };
  static const Column columns[] = {
      {"requests_total", "counter", "Evaluations the stage answered.",
       [](const dist::StageInfo& s) { return static_cast<double>(s.requests); }},
      {"eval_seconds_total", "counter", "Time the stage's worker spent evaluating.",
       [](const dist::StageInfo& s) { return s.eval_seconds; }},
      {"wait_seconds_total", "counter", "Round-trip time to the stage beyond its evaluation (transfer, queueing).",
       [](const dist::StageInfo& s) { return s.wait_seconds; }},
      {"sent_bytes_total", "counter", "Bytes sent to the stage.",
       [](const dist::StageInfo& s) { return static_cast<double>(s.bytes_sent); }},
      {"received_bytes_total", "counter", "Bytes received from the stage.",
       [](const dist::StageInfo& s) { return static_cast<double>(s.bytes_received); }},
  };
  for (const Column& c : columns) {
    const std::string name = std::string("ds4_dist_stage_") + c.name;
    metric(out, name.c_str(), c.type, c.help);
    for (const dist::StageInfo& s : route.stages)
      value(out, name + "{layers=\"" + dist::layer_range_text(s.begin, s.end) + "\"}", c.get(s));
  }
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void Metrics::Histogram::render(std::string& out, const std::string& name) const {
  uint64_t below = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    below += counts[i];
    value(out, name + "_bucket{le=\"" + number(bounds[i]) + "\"}", static_cast<double>(below));
  }
  value(out, name + "_bucket{le=\"+Inf\"}", static_cast<double>(count));
  value(out, name + "_sum", sum);
  value(out, name + "_count", static_cast<double>(count));
}

std::string Metrics::render() {
  std::lock_guard lock(mutex_);
  std::string out;
  metric(out, "ds4_requests_total", "counter", "Requests answered, by API and HTTP status.");
  for (const auto& [key, n] : requests_) {
    value(out, "ds4_requests_total{api=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
          static_cast<double>(n));
  }
  scalar(out, "ds4_prompt_tokens_total", "counter", "Prompt tokens of executed requests.", prompt_tokens_);
  scalar(out, "ds4_cached_prompt_tokens_total", "counter", "Prompt tokens reused from the KV cache.", cached_tokens_);
  scalar(out, "ds4_prefill_tokens_total", "counter", "Prompt tokens evaluated (not reused).", prefilled_tokens_);
  scalar(out, "ds4_generated_tokens_total", "counter", "Tokens generated.", generated_tokens_);
  scalar(out, "ds4_prefill_seconds_total", "counter", "Time spent evaluating prompts.", prefill_seconds_);
  scalar(out, "ds4_decode_seconds_total", "counter", "Time spent generating.", decode_seconds_);
  scalar(out, "ds4_prefill_tokens_per_second", "gauge",
         "Prefill speed of the last request that evaluated prompt tokens.",
         last_prefill_tps_);
  scalar(out, "ds4_decode_tokens_per_second", "gauge", "Generation speed of the last request that generated tokens.",
         last_decode_tps_);
  metric(out, "ds4_cache_decisions_total", "counter",
         "Where each request's prompt prefix came from (cold = cache miss).");
  for (const char* s : {"memory-token", "memory-text", "visible", "ram", "disk", "cold"}) {
    const auto it = cache_.find(s);
    value(out, std::string("ds4_cache_decisions_total{source=\"") + s + "\"}",
          it == cache_.end() ? 0.0 : static_cast<double>(it->second));
  }
  metric(out, "ds4_cache_hits_total", "counter", "Requests that reused a cached prefix.");
  metric(out, "ds4_cache_misses_total", "counter", "Requests that reused nothing.");
  {
    uint64_t hits = 0, misses = 0;
    for (const auto& [s, n] : cache_) (s == "cold" ? misses : hits) += n;
    value(out, "ds4_cache_hits_total", static_cast<double>(hits));
    value(out, "ds4_cache_misses_total", static_cast<double>(misses));
  }
  metric(out, "ds4_kv_disk_saves_total", "counter", "KV cache files written, by reason.");
  for (const auto& [reason, n] : disk_saves_) {
    value(out, "ds4_kv_disk_saves_total{reason=\"" + reason + "\"}", static_cast<double>(n));
  }
  scalar(out, "ds4_kv_disk_files", "gauge", "KV cache files in the cache folder.", disk_files_);
  scalar(out, "ds4_kv_disk_bytes", "gauge", "Bytes of KV cache files in the cache folder.", disk_bytes_);
  scalar(out, "ds4_ram_cache_entries", "gauge", "Session states held by the RAM prefix cache.", ram_entries_);
  scalar(out, "ds4_ram_cache_bytes", "gauge", "Bytes held by the RAM prefix cache.", ram_bytes_);
  scalar(out, "ds4_ram_cache_stores_total", "counter", "Session states stored in the RAM prefix cache.", ram_stores_);
  scalar(out, "ds4_ram_cache_evictions_total", "counter", "RAM prefix cache states dropped to make room.",
         ram_evictions_);
  expert_cache_metrics(out, experts_);
  if (has_route_) route_metrics(out, route_);
  scalar(out, "ds4_queue_depth", "gauge", "Requests waiting for a free slot.", queued_);
  scalar(out, "ds4_requests_running", "gauge", "Requests running on slots (prefilling or generating).", running_);
  metric(out, "ds4_queue_wait_seconds", "histogram", "Time requests waited for a free slot.");
  queue_wait_.render(out, "ds4_queue_wait_seconds");
  metric(out, "ds4_batch_sessions", "histogram",
         "Sessions per batched step (generating requests plus a prefilling prompt).");
  step_sessions_.render(out, "ds4_batch_sessions");
  metric(out, "ds4_batch_step_seconds", "histogram", "Time of one batched step.");
  step_seconds_.render(out, "ds4_batch_step_seconds");
  scalar(out, "ds4_batch_tokens_total", "counter", "Tokens evaluated by batched steps (decode and prefill).",
         step_tokens_);
  scalar(out, "ds4_batch_size", "gauge", "Sessions in the last batched step.", last_step_sessions_);
  metric(out, "ds4_slot_busy", "gauge", "1 while a request runs on the slot.");
  for (const auto& [i, st] : slots_) value(out, "ds4_slot_busy{slot=\"" + std::to_string(i) + "\"}", st.busy ? 1 : 0);
  metric(out, "ds4_slot_tokens", "gauge", "Tokens in the slot's live KV.");
  for (const auto& [i, st] : slots_)
    value(out, "ds4_slot_tokens{slot=\"" + std::to_string(i) + "\"}", static_cast<double>(st.tokens));
  metric(out, "ds4_slot_requests_total", "counter", "Requests the slot ran.");
  for (const auto& [i, st] : slots_)
    value(out, "ds4_slot_requests_total{slot=\"" + std::to_string(i) + "\"}", static_cast<double>(st.requests));
  metric(out, "ds4_slot_generated_tokens_total", "counter", "Tokens the slot generated.");
  for (const auto& [i, st] : slots_)
    value(out, "ds4_slot_generated_tokens_total{slot=\"" + std::to_string(i) + "\"}",
          static_cast<double>(st.generated));
  return out;
}

}  // namespace ds4::server
