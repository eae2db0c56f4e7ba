#include "core/byte_size.h"

#include <cstdio>
#include <iterator>

namespace ds4 {

std::string format_size(uint64_t bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return format_size(bytes);
  return std::to_string(bytes) + " bytes (" + format_size(bytes) + ")";
}

}  // namespace ds4
