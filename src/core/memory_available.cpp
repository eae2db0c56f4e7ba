#include "core/memory_available.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace ds4 {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The cgroup folders of this process: (v2 path) or (v1 memory path).
struct CgroupPaths {
  std::optional<std::string> v2, v1_memory;
};

CgroupPaths own_cgroups() {
  CgroupPaths p;
  const auto text = read_text("/proc/self/cgroup");
  if (!text) return p;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) p.v2 = path;
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ','))
      if (c == "memory") p.v1_memory = path;
  }
  return p;
}

}  // namespace

std::optional<uint64_t> meminfo_available(std::string_view meminfo) {
  const size_t at = meminfo.find("MemAvailable:");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = meminfo.substr(at + 13);
  rest = rest.substr(0, rest.find('\n'));
  const size_t kb = rest.find("kB");
  if (kb != std::string_view::npos) rest = rest.substr(0, kb);
  const auto v = parse_u64(rest);
  if (!v) return std::nullopt;
  return *v * 1024;
}

std::optional<uint64_t> cgroup_limit_value(std::string_view text) {
  const auto v = parse_u64(text);
  if (!v) return std::nullopt;  // "max"
  if (*v >= (uint64_t{1} << 62)) return std::nullopt;  // v1's "no limit"
  return v;
}

uint64_t MemoryAvailable::bytes() const {
  uint64_t b = mem_available;
  if (cgroup_limit) b = std::min(b, *cgroup_limit > cgroup_usage ? *cgroup_limit - cgroup_usage : 0);
  return b;
}

MemoryAvailable memory_available() {
  MemoryAvailable m;
  if (const auto t = read_text("/proc/meminfo")) m.mem_available = meminfo_available(*t).value_or(0);
  const CgroupPaths own = own_cgroups();
  // The cgroup and every ancestor (a limit anywhere above binds too); the
  // tightest headroom wins. A container sees its own cgroup as the root.
  auto consider = [&](const std::string& root, const std::string& path, const char* limit_name,
                      const char* usage_name) {
    std::string dir = path;
    while (true) {
      const std::string folder = root + (dir == "/" ? "" : dir);
      if (const auto limit_text = read_text(folder + "/" + limit_name)) {
        if (const auto limit = cgroup_limit_value(*limit_text)) {
          const uint64_t usage = parse_u64(read_text(folder + "/" + usage_name).value_or("0")).value_or(0);
          const uint64_t room = *limit > usage ? *limit - usage : 0;
          if (!m.cgroup_limit || room < (*m.cgroup_limit > m.cgroup_usage ? *m.cgroup_limit - m.cgroup_usage : 0)) {
            m.cgroup_limit = limit;
            m.cgroup_usage = usage;
            m.cgroup = folder;
          }
        }
      }
      if (dir.empty() || dir == "/") break;
      const size_t slash = dir.rfind('/');
      dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
    }
  };
  if (own.v2) consider("/sys/fs/cgroup", *own.v2, "memory.max", "memory.current");
  if (own.v1_memory) consider("/sys/fs/cgroup/memory", *own.v1_memory, "memory.limit_in_bytes", "memory.usage_in_bytes");
  return m;
}

}  // namespace ds4
