// Decode's matrix-vector products as weight streams: for each weight type, one
// matrix far beyond the last-level cache (default 1 GiB of weight bytes, 4096
// columns) times one activation (--acts N: N of them, as prefill meets an expert),
// through ds4::cpu::matmul on a T-thread pool, the way the forward pass runs every
// weight. Reports the median GB/s of weight bytes over R
// repeats, one JSON line per type: the figure to hold against ds4-bench-bandwidth's
// plain read bandwidth with the same T.
//
// Run: ds4-bench-matvec [--threads T] [--bytes N[k|m|g]] [--cols C] [--repeats R] [--types q8_0,iq2_xxs,...]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/cpu/matvec.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "core/scratch_vector.h"
#include "core/thread_pool.h"
#include "model/deepseek4_weights.h"
#include "quant/quant.h"
#include "version/version.h"

namespace ds4::bench {
namespace {

// 64 distinct rows quantized from normal floats, repeated down the matrix: valid
// blocks (finite scales) for every type; the speed does not depend on the values.
void fill(ScratchVector<uint8_t>& w, GgmlType type, int64_t cols, uint64_t row_bytes) {
  constexpr int kDistinct = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> row(static_cast<size_t>(cols));
  const std::vector<float> importance(static_cast<size_t>(cols), 1.0f);
  const uint64_t rows = w.size() / row_bytes;
  for (uint64_t r = 0; r < std::min<uint64_t>(kDistinct, rows); ++r) {
    for (float& v : row) v = normal(rng) * 0.02f;
    quant::quantize_row(type, row.data(), w.data() + r * row_bytes, cols, importance.data());
  }
  for (uint64_t r = kDistinct; r < rows; ++r) std::memcpy(w.data() + r * row_bytes, w.data() + (r % kDistinct) * row_bytes, row_bytes);
}

}  // namespace
}  // namespace ds4::bench

int main(int argc, char** argv) {
  using namespace ds4;
  using namespace ds4::bench;
  CLI::App app{"decode's matrix-vector products as weight streams (GB/s of weight bytes)", "ds4-bench-matvec"};
  app.set_version_flag("--version", version_line("ds4-bench-matvec"), "print the version and git commit and exit");
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string bytes_arg = "1g", types_arg = "q8_0,mxfp4,iq2_xxs,q2_k,q4_k,f16,bf16";
  int64_t cols = 4096;
  int repeats = 7;
  int acts = 1;
  app.add_option("-t,--threads", threads, "threads (default: logical CPUs)")->check(CLI::PositiveNumber);
  app.add_option("--bytes", bytes_arg, "weight bytes per matrix, k/m/g suffix allowed (default 1g)");
  app.add_option("--cols", cols, "row length (default 4096)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed products per type (default 7)")->check(CLI::PositiveNumber);
  app.add_option("--acts", acts, "activations per product (default 1, decode; more: a prefill-shaped matmul)")
      ->check(CLI::PositiveNumber);
  app.add_option("--types", types_arg, "comma-separated weight types");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::optional<uint64_t> want_or = parse_size(bytes_arg);
    if (!want_or) throw Error("--bytes '" + bytes_arg + "' is not a byte count (digits, then k, m or g)");
    const uint64_t want = *want_or;
    ThreadPool pool(threads);
    std::stringstream list(types_arg);
    for (std::string name; std::getline(list, name, ',');) {
      const std::optional<GgmlType> type = ggml_type_from_name(name);
      if (!type) throw Error("--types: unknown type " + name);
      const std::optional<uint64_t> row_bytes_or = ggml_nbytes(*type, static_cast<uint64_t>(cols));
      if (!row_bytes_or) throw Error("--cols is not a whole number of " + name + " blocks");
      const uint64_t row_bytes = *row_bytes_or;
      const uint64_t rows = std::max<uint64_t>(64, want / row_bytes / 64 * 64);
      // In 2 MiB pages, as the engine asks for its weight mapping (core/file_map.h).
      ScratchVector<uint8_t> w(rows * row_bytes);
      fill(w, *type, cols, row_bytes);
      model::TensorView view;
      view.name = "bench";
      view.type = *type;
      view.ne = {static_cast<uint64_t>(cols), rows, 1, 1};
      view.data = w.data();
      view.nbytes = w.size();
      view.row_bytes = row_bytes;
      view.n_rows = rows;
      std::vector<float> x(static_cast<size_t>(cols) * static_cast<size_t>(acts)), y(rows * static_cast<uint64_t>(acts));
      std::mt19937 rng(1);
      std::normal_distribution<float> normal;
      for (float& v : x) v = normal(rng);
      cpu::ActivationBatch batch;
      batch.reset(x.data(), acts, cols, cols, cpu::Numerics::Default);
      auto product = [&] { cpu::matmul(view, -1, batch, y.data(), static_cast<int64_t>(rows), &pool); };
      product();  // warm-up: activation forms, page tables
      std::vector<double> gbps;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        product();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gbps.push_back(static_cast<double>(w.size()) / s / 1e9);
      }
      std::sort(gbps.begin(), gbps.end());
      nlohmann::json line{{"type", name}, {"threads", threads}, {"acts", acts},          {"rows", rows},
                          {"cols", cols},          {"bytes", w.size()},           {"median_gbps", gbps[gbps.size() / 2]},
                          {"max_gbps", gbps.back()}, {"checksum", static_cast<double>(y[rows / 2])}};
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-bench-matvec: %s\n", e.what());
    return 1;
  }
  return 0;
}
