// The memory accounting block ds4 prints on stderr after loading a model:
// file and weight bytes, the KV state one token adds and the whole state
// allocated for the context (raw window / compressed / indexer / frontiers).
// The CPU backend keeps its state in f32 (4 bytes a value).
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/numerics.h"

namespace ds4::model {
class Deepseek4Model;
}

namespace ds4::app {

inline constexpr uint32_t kStateElemBytes = 4;  // f32 KV state

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
