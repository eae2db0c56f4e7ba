// Server counters for GET /metrics, in the Prometheus text exposition format
// (version 0.0.4): requests by API and status, tokens, prefill and decode
// time (tokens/s = tokens / seconds), cache decisions, queue depth.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace ds4::server {

class Metrics {
 public:
  void request_done(const std::string& api, int status);
  void tokens(int64_t prompt, int64_t cached, int64_t generated, double prefill_seconds, int64_t prefilled,
              double decode_seconds);
  // source: memory-token, memory-text, visible, disk, cold (miss).
  void cache_decision(const std::string& source);
  void disk_save(const std::string& reason);
  void set_queue_depth(int64_t queued, int64_t running);
  void set_disk_usage(uint64_t files, uint64_t bytes);

  std::string render();

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0, prefilled_tokens_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  double last_prefill_tps_ = 0, last_decode_tps_ = 0;
  std::map<std::string, uint64_t> cache_;
  std::map<std::string, uint64_t> disk_saves_;
  int64_t queued_ = 0, running_ = 0;
  uint64_t disk_files_ = 0, disk_bytes_ = 0;
};

}  // namespace ds4::server
