#include "common/mpi_pipeline.h"

#include "common/run_worker.h"
#include "core/error.h"
#include "dist/coordinator.h"
#include "dist/worker.h"

namespace ds4::app {

std::vector<std::pair<int, int>> parse_mpi_layers(const std::string& layers) {
  std::vector<std::pair<int, int>> ranges;
  size_t at = 0;
  while (at <= layers.size()) {
    const size_t comma = std::min(layers.find(',', at), layers.size());
    int begin = 0, end = 0;
    dist::parse_layer_range(layers.substr(at, comma - at), &begin, &end);
    const int want = ranges.empty() ? 0 : ranges.back().second;
    if (begin != want || (!ranges.empty() && ranges.back().second < 0))
      throw Error("--layers " + layers + ": each range starts where the one before ends, the first at 0 (" +
                  dist::layer_range_text(begin, end) + " follows " + std::to_string(want) + ")");
    ranges.emplace_back(begin, end);
    at = comma + 1;
  }
  if (ranges.size() < 2) throw Error("--layers " + layers + ": at least two ranges (rank 0 and one worker)");
  if (ranges.front().second < 0) throw Error("--layers " + layers + ": rank 0 keeps the first layers, 0:N");
  return ranges;
}

bool serve_mpi_stage(const std::string& program, const dist::MpiRuntime& mpi,
                     const std::vector<std::pair<int, int>>& layers, engine::EngineOptions eo, int64_t n_ctx,
                     const sigset_t& signals) {
  if (static_cast<size_t>(mpi.size()) != layers.size())
    throw Error("--layers lists " + std::to_string(layers.size()) + " ranges for " + std::to_string(mpi.size()) +
                " MPI ranks (mpirun -n " + std::to_string(layers.size()) + ")");
  if (mpi.rank() == 0) return false;
  eo.partial_shards = true;  // a stage's host may keep only its own shards
  engine::Engine engine(eo);
  dist::WorkerOptions wo;
  const auto& range = layers[static_cast<size_t>(mpi.rank())];
  wo.layers = {range.first, range.second};
  wo.n_ctx = n_ctx;
  wo.name = "rank " + std::to_string(mpi.rank());
  run_worker(program + " rank " + std::to_string(mpi.rank()), engine, dist::make_mpi_link(mpi), wo, signals);
  return true;
}

}  // namespace ds4::app
