#include "memory_report.h"

#include <sys/resource.h>

#include <cstdio>

#include "backend/cpu/kv_rows.h"
#include "model/deepseek4_memory.h"
#include "model/deepseek4_model.h"

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

std::string memory_report(const model::Deepseek4Model& m, const RunSettings& s) {
  const model::Deepseek4HParams& hp = m.hparams();
  const model::WeightBytes w = model::weight_bytes(m.weights());
  const uint32_t elem = cpu::kv_elem_bytes(s.numerics);
  const model::KvStateBytes kv = model::kv_state_bytes(hp, static_cast<uint64_t>(s.n_ctx), elem);
  const double per_token = model::kv_bytes_per_token(hp, elem);

  std::string out = "memory:\n";
  out += "  model file           " + format_bytes(m.file().file_size()) + "\n";
  if (m.locked_bytes() > 0) out += "  locked in RAM        " + format_bytes(m.locked_bytes()) + " (--mlock)\n";
  // The kernels stream weights faster from 2 MiB pages (--huge-pages).
  if (const uint64_t huge = m.huge_page_bytes(); huge > 0)
    out += "  in 2 MiB pages       " + format_bytes(huge) + "\n";
  out += "  weights              " + format_bytes(w.total()) + " (routed experts " + format_bytes(w.routed()) +
         ", other " + format_bytes(w.non_routed()) + ")\n";
  char buf[128];
  std::snprintf(buf, sizeof buf, "  kv state per token   %.1f bytes (%s, compressed + indexer rows)\n", per_token,
                elem == 2 ? "f16" : "f32");
  out += buf;
  out += "  kv state for ctx " + std::to_string(s.n_ctx) + ": " + format_bytes(kv.total()) + "\n";
  out += "    raw window         " + format_bytes(kv.raw_window) + "\n";
  out += "    compressed         " + format_bytes(kv.compressed_attn) + "\n";
  out += "    indexer            " + format_bytes(kv.compressed_index) + "\n";
  out += "    frontiers          " + format_bytes(kv.frontiers) + "\n";
  out += "  weights + kv state   " + format_bytes(w.total() + kv.total()) + "\n";
  out += "threads " + std::to_string(s.threads) + ", numerics " +
         (s.numerics == cpu::Numerics::Quality ? "quality" : "default") + ", ctx " + std::to_string(s.n_ctx) +
         " (n_ctx_train " + std::to_string(hp.n_ctx_train) + "), prefill chunk " + std::to_string(s.prefill_chunk) +
         "\n";
  return out;
}

}  // namespace ds4::app
