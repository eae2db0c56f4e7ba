#include "memory_report.h"

#include <sys/resource.h>


namespace ds4::app {

uint64_t peak_rss_bytes() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string peak_memory_line(uint64_t peak_rss, uint64_t model_file_bytes, uint64_t locked_bytes) {
  std::string line = "peak RSS: " + format_size(peak_rss) + " (model file " + format_size(model_file_bytes);
  if (locked_bytes > 0) line += ", " + format_size(locked_bytes) + " locked by --mlock";
  return line + ")\n";
}

}  // namespace ds4::app
