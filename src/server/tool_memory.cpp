#include "server/tool_memory.h"

#include <memory>

namespace ds4::server {

ToolMemory::ToolMemory(size_t max_ids, size_t max_bytes) : max_ids_(max_ids), max_bytes_(max_bytes) {}

void ToolMemory::touch(std::list<Entry>::iterator it) { lru_.splice(lru_.begin(), lru_, it); }

void ToolMemory::remember(const std::vector<std::string>& ids, const std::string& block) {
  if (ids.empty() || max_ids_ == 0) return;
  std::lock_guard lock(mutex_);
  auto shared = std::make_shared<const std::string>(block);
  for (const std::string& id : ids) {
    if (auto it = by_id_.find(id); it != by_id_.end()) {
      bytes_ -= it->second->id.size() + it->second->block->size();
      lru_.erase(it->second);
      by_id_.erase(it);
    }
    lru_.push_front(Entry{id, shared});
    by_id_[id] = lru_.begin();
    // Blocks shared by several ids are counted once per id: a bound, not an
    // exact figure, and it keeps pruning simple.
    bytes_ += id.size() + block.size();
  }
  prune();
}

void ToolMemory::prune() {
  while (!lru_.empty() && (lru_.size() > max_ids_ || bytes_ > max_bytes_)) {
    const Entry& e = lru_.back();
    bytes_ -= e.id.size() + e.block->size();
    by_id_.erase(e.id);
    lru_.pop_back();
  }
}

std::optional<std::string> ToolMemory::exact_block(const std::vector<std::string>& ids) {
  if (ids.empty()) return std::nullopt;
  std::lock_guard lock(mutex_);
  const std::string* block = nullptr;
  for (const std::string& id : ids) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    if (block != nullptr && *block != *it->second->block) return std::nullopt;
    block = it->second->block.get();
  }
  for (const std::string& id : ids) touch(by_id_[id]);
  return *block;
}

bool ToolMemory::contains(const std::string& id) {
  std::lock_guard lock(mutex_);
  return by_id_.count(id) != 0;
}

std::vector<std::pair<std::string, std::string>> ToolMemory::entries_in(const std::string& text) {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::string, std::string>> out;
  // Ids of one parallel block share its string: search each block once.
  std::unordered_map<const std::string*, bool> found;
  for (const Entry& e : lru_) {
    auto [it, fresh] = found.try_emplace(e.block.get(), false);
    if (fresh) it->second = text.find(*e.block) != std::string::npos;
    if (it->second) out.emplace_back(e.id, *e.block);
  }
  return out;
}

size_t ToolMemory::size() {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

size_t ToolMemory::bytes() {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace ds4::server
