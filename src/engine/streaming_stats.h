// The SSD expert streaming cache's figures as the engine reports them
// (Engine::streaming_stats; docs/streaming.md): what programs print and
// ds4-server's /metrics serve, without the cache's own types.
#pragma once

#include <cstdint>

namespace ds4::engine {

// The SSD streaming cache's figures (all zero without --ssd-streaming).
struct StreamingStats {
  int64_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t locked_bytes = 0;  // of the slots
  uint64_t hits = 0, misses = 0;
  uint64_t prefetched = 0, prefetch_hits = 0, prefetch_unused = 0;
  uint64_t bytes_read = 0;
  double read_seconds = 0;  // evaluations waiting for reads
  bool direct_io = false, io_uring = false;
};

}  // namespace ds4::engine
