// The memory accounting block ds4 prints on stderr after loading a model:
// file and weight bytes (and the bytes --mlock locked, and those mapped in
// 2 MiB pages), the KV state one token
// adds and the whole state allocated for the context (raw window / compressed
// / indexer / frontiers); and the peak RSS line printed at exit.
// Cached rows take the bytes of the numerics' storage (cpu::kv_elem_bytes):
// f16 in default numerics, f32 in --quality; compressor frontiers are f32.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/numerics.h"
#include "core/byte_size.h"

namespace ds4::model {
class Deepseek4Model;
}

namespace ds4::app {

struct RunSettings {
  int64_t n_ctx = 0;
  int threads = 1;
  int prefill_chunk = 0;
  cpu::Numerics numerics = cpu::Numerics::Default;
};

using ds4::format_bytes;  // core/byte_size.h
using ds4::format_size;

// Multi-line block, every line ending in '\n'.
std::string memory_report(const model::Deepseek4Model& model, const RunSettings& s);

// The most RAM this process has held (getrusage ru_maxrss), in bytes. The
// weights are used in place from the file mapping, so the page-cache pages a
// run reads count here once, not as a copy.
uint64_t peak_rss_bytes();

// "peak RSS: 5.46 GiB (model file 5.20 GiB)\n", with ", 5.20 GiB locked by
// --mlock" before the ')' when locked_bytes > 0.
std::string peak_memory_line(uint64_t peak_rss, uint64_t model_file_bytes, uint64_t locked_bytes);

}  // namespace ds4::app
