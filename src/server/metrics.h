// Server counters for GET /metrics, in the Prometheus text exposition format
// (version 0.0.4): requests by API and status, tokens, prefill and decode
// time (tokens/s = tokens / seconds), cache decisions, queue depth and
// wait, the worker's batched steps (sessions and tokens per step) and each
// slot's state.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dist/coordinator.h"
#include "engine/streaming_stats.h"

namespace ds4::server {

class Metrics {
 public:
  void request_done(const std::string& api, int status);
  void tokens(int64_t prompt, int64_t cached, int64_t generated, double prefill_seconds, int64_t prefilled,
              double decode_seconds);
  // source: memory-token, memory-text, visible, ram, disk, cold (miss).
  void cache_decision(const std::string& source);
  void disk_save(const std::string& reason);
  void set_queue_depth(int64_t queued, int64_t running);
  void set_disk_usage(uint64_t files, uint64_t bytes);
  // The RAM prefix cache (--cache-ram): entries and bytes held now, states
  // stored and dropped for room so far.
  void set_ram_cache(uint64_t entries, uint64_t bytes, uint64_t stores, uint64_t evictions);
  // The SSD expert cache (--ssd-streaming; all zero without it).
  void set_expert_cache(const engine::StreamingStats& stats);
  // The distributed route (a coordinator's): whether it is complete and
  // each stage's per-hop telemetry.
  void set_route(const dist::RouteStatus& route);
  // How long an admitted request waited in the queue.
  void queue_wait(double seconds);
  // One batched evaluation: sessions in it, tokens it evaluated, its time.
  void batch_step(int64_t sessions, int64_t tokens, double seconds);
  // A slot's state: whether a request runs on it, its live tokens, requests
  // it ran and tokens it generated (counters).
  void set_slot(int slot, bool busy, int64_t tokens, uint64_t requests, uint64_t generated);

  std::string render();

 private:
  // A Prometheus histogram: counts per upper bound (cumulative on output).
  struct Histogram {
    explicit Histogram(std::vector<double> bounds) : bounds(std::move(bounds)), counts(this->bounds.size() + 1) {}
    void add(double v);
    void render(std::string& out, const std::string& name) const;
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // the last: above every bound
    double sum = 0;
    uint64_t count = 0;
  };
  struct SlotState {
    bool busy = false;
    int64_t tokens = 0;
    uint64_t requests = 0, generated = 0;
  };

  std::mutex mutex_;
  engine::StreamingStats experts_;
  bool has_route_ = false;
  dist::RouteStatus route_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0, prefilled_tokens_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  double last_prefill_tps_ = 0, last_decode_tps_ = 0;
  std::map<std::string, uint64_t> cache_;
  std::map<std::string, uint64_t> disk_saves_;
  int64_t queued_ = 0, running_ = 0;
  uint64_t disk_files_ = 0, disk_bytes_ = 0;
  uint64_t ram_entries_ = 0, ram_bytes_ = 0, ram_stores_ = 0, ram_evictions_ = 0;
  Histogram queue_wait_{{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram step_sessions_{{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}};
  Histogram step_seconds_{{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}};
  uint64_t step_tokens_ = 0;
  int64_t last_step_sessions_ = 0;
  std::map<int, SlotState> slots_;
};

}  // namespace ds4::server
