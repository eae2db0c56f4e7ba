// SSD expert streaming (issue 24): the routed experts live in a RAM cache of
// whole experts (one layer's gate, up and down matrices in one slot) and are
// read from the GGUF file when a token selects one that is not there. Slots
// sit in slabs of anonymous memory; a miss is read with io_uring (liburing),
// O_DIRECT straight into its slot, every miss of a layer in flight at once
// while the cached experts compute, each computing as soon as its read is in.
// Prefetch (a hint from the caller: the hash-routed layers' experts from the
// token ids, the next layer's from its router) reads experts before they are
// acquired, behind the reads an acquire waits for, into at most half of the
// slots; those stay protected from eviction until acquired or until the next
// tokens begin; the slots' memory is taken when the cache is made (locked
// where the locked-memory limit allows);
// where O_DIRECT is refused (tmpfs, some overlay filesystems) reads go
// through the page cache and the pages are dropped after (said once on
// stderr); where io_uring is unavailable, pread. Eviction takes the slot of
// the least often selected expert (selection counts halve every 16 tokens;
// ties: least recently used), never one the current acquire still needs.
// The cache changes where the bytes come from, never what they are: logits
// are bit-identical to the resident run at every size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/expert_source.h"
#include "backend/hot_list.h"

namespace ds4::model {
class Deepseek4Model;
}

namespace ds4::cpu {

struct ExpertCacheOptions {
  // Exactly this many slots when > 0; otherwise budget_bytes / slot size
  // (ds4::Error when that is below one slot).
  int64_t slots = 0;
  uint64_t budget_bytes = 0;
  // The file the experts are read from: the model's own when empty (another
  // path is for tests: a copy, a truncated one).
  std::string path;
  // Reads in flight at most (io_uring queue depth).
  unsigned queue_depth = 64;
  // The read paths tried first; off forces the fallbacks (buffered reads with
  // the pages dropped after, pread) as a file system or a seccomp profile
  // that refuses them would.
  bool direct_io = true;
  bool io_uring = true;
};

struct ExpertCacheStats {
  int64_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t hits = 0;        // experts served from a slot
  uint64_t misses = 0;      // experts read from the file when acquired
  uint64_t prefetched = 0;      // experts read by prefetch
  uint64_t prefetch_hits = 0;   // acquired after prefetch read them (or while it did)
  uint64_t prefetch_unused = 0; // prefetched, not acquired before the next tokens
  uint64_t bytes_read = 0;  // including the alignment slack of direct reads
  double read_seconds = 0;  // acquires waiting for reads
  uint64_t locked_bytes = 0;  // of the slots, locked in RAM (the rest is populated)
  bool direct_io = false;   // O_DIRECT reads
  bool io_uring = false;    // io_uring (else pread)
};

class ExpertCache final : public ExpertSource {
 public:
  // The model (its mapping and tensor views) must outlive the cache. Opens the
  // file, checks its size against the model's, allocates the slots.
  // ds4::Error naming the problem.
  ExpertCache(const model::Deepseek4Model& model, const ExpertCacheOptions& options);
  ~ExpertCache() override;
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Bytes one slot takes for this model (the largest expert of any layer,
  // with room for aligned direct reads).
  static uint64_t slot_bytes(const model::Deepseek4Model& model);

  size_t acquire(const model::LayerWeights& layer, std::span<int> experts, std::span<ExpertMatrices> out,
                 size_t* ready) override;
  size_t wait(size_t ready) override;
  void done_with(size_t from, size_t to) override;
  void release() override;
  void begin_tokens(int64_t n) override;
  bool wants_prefetch() const override;
  void prefetch(const model::LayerWeights& layer, std::span<const int> experts) override;

  // Reads the experts of `hot` (most wanted first) into free slots until the
  // cache is full; returns how many were loaded. ds4::Error for an entry
  // outside the model or a failed read.
  size_t preload(std::span<const backend::ExpertUse> hot);

  // The file's read rate in bytes per second with this cache's reads (same
  // queue depth, same read path): `n` experts not in the cache, picked at
  // random with `seed`, read into the slots of the least wanted ones (they
  // stay cached). What ds4-bench compares decode's reads with.
  double measure_read_rate(int64_t n, uint64_t seed);

  ExpertCacheStats stats() const;

 private:
  size_t acquire_slots(const model::LayerWeights& layer, std::span<int> experts, std::span<ExpertMatrices> out,
                       size_t* ready);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::cpu
