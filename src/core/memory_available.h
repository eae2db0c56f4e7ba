// How much memory this process can still take: the kernel's MemAvailable and,
// inside a memory cgroup, its limit less what it has charged (page cache
// included). The SSD expert streaming cache sizes itself from this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ds4 {

struct MemoryAvailable {
  uint64_t mem_available = 0;             // /proc/meminfo MemAvailable
  std::optional<uint64_t> cgroup_limit;   // memory.max (v2) / memory.limit_in_bytes (v1), when limited
  uint64_t cgroup_usage = 0;              // memory.current / memory.usage_in_bytes
  std::string cgroup;                     // the limiting cgroup's folder, "" when none
  // min(mem_available, cgroup_limit - cgroup_usage).
  uint64_t bytes() const;
};

MemoryAvailable memory_available();

// The pieces, for tests: MemAvailable of a meminfo text (bytes; nullopt
// without the line), and a cgroup limit file's value (nullopt for "max" or a
// v1 "no limit" of 2^63 rounded to pages).
std::optional<uint64_t> meminfo_available(std::string_view meminfo);
std::optional<uint64_t> cgroup_limit_value(std::string_view text);

}  // namespace ds4
