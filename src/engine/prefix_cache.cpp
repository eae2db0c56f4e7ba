#include "engine/prefix_cache.h"

#include <algorithm>

#include "backend/backend.h"
#include "core/error.h"

namespace ds4::engine {

namespace {

bool begins_with(std::span<const int32_t> prompt, std::span<const int32_t> key) {
  if (key.size() > prompt.size() || key.empty()) return false;
  // The last token differs first more often than the first (shared heads).
  return key.back() == prompt[key.size() - 1] && std::equal(key.begin(), key.end(), prompt.begin());
}

}  // namespace

PrefixCache::PrefixCache(const backend::Backend& backend, size_t budget_bytes, int64_t min_tokens)
    : backend_(backend), budget_(budget_bytes), min_tokens_(min_tokens) {
  if (min_tokens < 1) throw Error("prefix cache: min tokens must be >= 1, got " + std::to_string(min_tokens));
}

bool PrefixCache::store(const backend::Session& session) {
  if (!enabled() || session.size() < min_tokens_ || !session.consistent() || session.logits().empty()) return false;
  const std::span<const int32_t> tokens = session.tokens();
  for (Entry& e : entries_) {
    if (e.tokens.size() == tokens.size() && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) {
      e.last_used = ++clock_;
      return false;
    }
  }
  Entry e;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.payload = backend_.save_state(session);
  e.last_used = ++clock_;
  if (e.bytes() > budget_) return false;
  make_room(e.bytes());
  bytes_ += e.bytes();
  entries_.push_back(std::move(e));
  ++counts_.stores;
  return true;
}

void PrefixCache::make_room(size_t bytes) {
  while (!entries_.empty() && bytes_ + bytes > budget_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    bytes_ -= oldest->bytes();
    entries_.erase(oldest);
    ++counts_.evictions;
  }
}

std::optional<int64_t> PrefixCache::find(std::span<const int32_t> prompt) {
  if (!enabled()) return std::nullopt;
  const Entry* best = nullptr;
  for (const Entry& e : entries_) {
    if ((best == nullptr || e.tokens.size() > best->tokens.size()) && begins_with(prompt, e.tokens)) best = &e;
  }
  if (best == nullptr) {
    ++counts_.misses;
    return std::nullopt;
  }
  return static_cast<int64_t>(best->tokens.size());
}

PrefixCache::Entry* PrefixCache::match(std::span<const int32_t> prompt, int64_t length) {
  for (Entry& e : entries_) {
    if (static_cast<int64_t>(e.tokens.size()) == length && begins_with(prompt, e.tokens)) return &e;
  }
  return nullptr;
}

void PrefixCache::load(std::span<const int32_t> prompt, int64_t length, backend::Session& session) {
  Entry* e = match(prompt, length);
  if (e == nullptr) {
    throw Error("prefix cache: no state of " + std::to_string(length) + " tokens begins this prompt");
  }
  if (length > session.n_ctx()) {
    throw Error("prefix cache: a state of " + std::to_string(length) + " tokens does not fit a context of " +
                std::to_string(session.n_ctx()));
  }
  backend_.load_state(e->payload, session);
  e->last_used = ++clock_;
  ++counts_.hits;
}

PrefixCache::Stats PrefixCache::stats() const {
  Stats s = counts_;
  s.entries = entries_.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace ds4::engine
