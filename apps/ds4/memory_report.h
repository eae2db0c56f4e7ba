// The peak-memory line ds4 prints on stderr at exit (the memory accounting
// block printed after loading is the engine's: engine::Engine::memory_report).
#pragma once

#include <cstdint>
#include <string>

#include "core/byte_size.h"

namespace ds4::app {

using ds4::format_bytes;  // core/byte_size.h
using ds4::format_size;

// The most RAM this process has held (getrusage ru_maxrss), in bytes. The
// weights are used in place from the file mapping, so the page-cache pages a
// run reads count here once, not as a copy.
uint64_t peak_rss_bytes();

// "peak RSS: 5.46 GiB (model file 5.20 GiB)\n", with ", 5.20 GiB locked by
// --mlock" before the ')' when locked_bytes > 0.
std::string peak_memory_line(uint64_t peak_rss, uint64_t model_file_bytes, uint64_t locked_bytes);

}  // namespace ds4::app
