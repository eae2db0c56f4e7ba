// The pipeline under Open MPI (`mpirun -n K PROGRAM --dist mpi --layers
// 0:A,A:B,...,X:output`, docs/distributed.md): every rank runs the same
// program; rank 0 coordinates (ds4-server serves, ds4-bench measures), rank r
// evaluates the r-th range as a worker. Shared by ds4-server and ds4-bench.
#pragma once

#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "dist/mpi_transport.h"
#include "engine/engine.h"

namespace ds4::app {

// "0:A,A:B,...,X:output": one range per rank, each starting where the one
// before ends, the first at 0 and ending at N (rank 0 keeps the embedding),
// at least two. ds4::Error naming the flag's text otherwise.
std::vector<std::pair<int, int>> parse_mpi_layers(const std::string& layers);

// On a worker rank: evaluates its range of `layers` for rank 0 (an engine
// over `eo`, which may hold only that stage's shards) until SIGINT/SIGTERM
// (`signals`, blocked by the caller), and returns true. On rank 0 returns
// false at once: the caller coordinates (eo.dist_mpi = &mpi,
// eo.dist_first_remote = the end of range 0). ds4::Error when the ranks do
// not match the ranges.
bool serve_mpi_stage(const std::string& program, const dist::MpiRuntime& mpi,
                     const std::vector<std::pair<int, int>>& layers, engine::EngineOptions eo, int64_t n_ctx,
                     const sigset_t& signals);

}  // namespace ds4::app
