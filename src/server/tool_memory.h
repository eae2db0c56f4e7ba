// Exact DSML replay by tool-call id (PROTOCOL.md §3.7): every call id the
// server hands out maps to the raw DSML block the model sampled for it, so
// that when a client sends the call back in its history the prompt holds the
// sampled bytes, not a canonical re-rendering (which would miss the KV cache
// and show the model text it never wrote). Bounded by entry count and bytes,
// least recently used entries dropped first. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ds4::server {

class ToolMemory {
 public:
  ToolMemory(size_t max_ids, size_t max_bytes);

  // Remembers `block` for every id (a parallel call block has several).
  void remember(const std::vector<std::string>& ids, const std::string& block);
  // The block when every id maps to the same block; nullopt otherwise.
  std::optional<std::string> exact_block(const std::vector<std::string>& ids);
  bool contains(const std::string& id);

  // (id, block) pairs whose block occurs in `text` (for KV file trailers).
  std::vector<std::pair<std::string, std::string>> entries_in(const std::string& text);

  size_t size();
  size_t bytes();

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const std::string> block;
  };
  void touch(std::list<Entry>::iterator it);
  void prune();

  std::mutex mutex_;
  size_t max_ids_, max_bytes_;
  size_t bytes_ = 0;
  std::list<Entry> lru_;  // front = most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
};

}  // namespace ds4::server
