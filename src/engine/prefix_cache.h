// Session states kept in RAM and keyed by the exact tokens they hold, so
// that a prompt starting with the same tokens (a shared system prompt and
// tool list, a repeated request, a conversation whose session was handed to
// another client) starts from the stored state instead of prefilling it
// again. The RAM tier in front of the disk KV cache (llama.cpp's
// --cache-ram, vLLM's prefix caching): bounded by bytes, least recently
// used entries go first. States are kept as the DSV4 session payload
// (Backend::save_state), whose size follows the tokens held, not the
// session's context. Not thread-safe: one owner (the server's worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ds4::backend {
class Backend;
class Session;
}  // namespace ds4::backend

namespace ds4::engine {

class PrefixCache {
 public:
  struct Stats {
    size_t entries = 0;
    size_t bytes = 0;  // payloads and keys
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t stores = 0;
    uint64_t evictions = 0;
  };

  // budget_bytes 0 disables the cache (store and find do nothing);
  // min_tokens >= 1: shorter states are not kept.
  PrefixCache(const backend::Backend& backend, size_t budget_bytes, int64_t min_tokens);

  bool enabled() const { return budget_ > 0; }
  int64_t min_tokens() const { return min_tokens_; }

  // Keeps a copy of `session`'s state unless it is shorter than min_tokens,
  // inconsistent, without logits, already held (then only marked as used)
  // or larger than the whole budget; older entries make room. True when a
  // new entry was stored.
  bool store(const backend::Session& session);

  // The length of the longest held state whose tokens begin `prompt` (all of
  // it is fine: a state holds the logits after its last token), or nullopt
  // (counted as a miss).
  std::optional<int64_t> find(std::span<const int32_t> prompt);
  // Puts the state of `length` tokens that find() returned for `prompt` into
  // `session` (counted as a hit); ds4::Error, session unchanged, when there is
  // none or it does not fit the session's context.
  void load(std::span<const int32_t> prompt, int64_t length, backend::Session& session);

  Stats stats() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
    uint64_t last_used = 0;
    size_t bytes() const { return payload.size() + tokens.size() * sizeof(int32_t); }
  };
  Entry* match(std::span<const int32_t> prompt, int64_t length);
  void make_room(size_t bytes);

  const backend::Backend& backend_;
  size_t budget_;
  int64_t min_tokens_;
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  Stats counts_;
};

}  // namespace ds4::engine
