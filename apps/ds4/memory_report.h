// The memory accounting block ds4 prints on stderr after loading a model:
// file and weight bytes, the KV state one token adds and the whole state
// allocated for the context (raw window / compressed / indexer / frontiers).
// Cached rows take the bytes of the numerics' storage (cpu::kv_elem_bytes):
// f16 in default numerics, f32 in --quality; compressor frontiers are f32.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/numerics.h"

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

// "12345 bytes (12.1 KiB)".
std::string format_bytes(uint64_t bytes);

// Multi-line block, every line ending in '\n'.
std::string memory_report(const model::Deepseek4Model& model, const RunSettings& s);

}  // namespace ds4::app
