// Running a pipeline stage (ds4-worker, and the worker ranks of
// `mpirun ... ds4-server --dist mpi`): the engine's backend behind a
// dist::Worker on `link`, until SIGINT or SIGTERM (which the caller has
// blocked in every thread: `signals`). Log lines go to stderr as
// "PROGRAM: ...". ds4::Error when the coordinator refuses the worker.
#pragma once

#include <signal.h>

#include <memory>
#include <string>

#include "dist/transport.h"
#include "dist/worker.h"
#include "engine/engine.h"

namespace ds4::app {

// Blocks SIGINT and SIGTERM in this thread (and the threads it starts).
sigset_t block_stop_signals();

// wo.layers, wo.n_ctx and (optionally) wo.name set by the caller; the name,
// fingerprint and log are filled in here.
void run_worker(const std::string& program, engine::Engine& engine, std::unique_ptr<dist::Link> link,
                dist::WorkerOptions wo, const sigset_t& signals);

}  // namespace ds4::app
