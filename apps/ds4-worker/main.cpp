// ds4-worker: a pipeline stage in another process or on another host
// (docs/distributed.md).
//   ds4-worker --gen-key FILE
//   ds4-worker -m MODEL --coordinator HOST:PORT --layers A:B|A:output --dist-key FILE [--ctx N] [-t N]
//              [--forward-listen HOST:PORT|none] ...
// Joins the coordinator (ds4-server --dist-listen), which checks that both
// run the same build, model file and numerics and that the layers fit the
// route; then evaluates its layers for every session until SIGINT/SIGTERM.
// If the coordinator goes away the worker keeps trying and rejoins when it
// returns. A refusal (another model, overlapping layers, ...) ends it with
// the coordinator's reason and exit status 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <thread>

#include "common/engine_flags.h"
#include "common/run_worker.h"
#include "core/error.h"
#include "dist/coordinator.h"
#include "dist/curve_key.h"
#include "dist/zmq_transport.h"
#include "engine/engine.h"
#include "version/version.h"

namespace {

using ds4::Error;

int run(int argc, char** argv) {
  ds4::engine::EngineOptions eo;
  eo.model_path = "ds4flash.gguf";
  eo.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string coordinator, layers, key_file, gen_key;
  ds4::dist::WorkerOptions wo;
  wo.n_ctx = 32768;
  CLI::App app{"ds4-worker: evaluate a range of layers for a ds4-server coordinator (pipeline parallel)", "ds4-worker"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", ds4::version_line("ds4-worker"), "print the version and git commit and exit");
  ds4::app::add_engine_flags(app, eo, "GGUF model file (the coordinator's file, or one with the same fingerprint)");
  app.add_option("--gen-key", gen_key, "write a new cluster key to FILE (mode 0600) and exit; copy it to every host");
  app.add_option("--coordinator", coordinator, "the coordinator's HOST:PORT (ds4-server --dist-listen)");
  app.add_option("--layers", layers,
                 "the layers this worker evaluates: A:B, or A:output for the last stage (A:N, N the layer count: the "
                 "last layer without the output head, which the coordinator then computes: smaller replies)");
  app.add_option("--dist-key", key_file, "the cluster key file (the coordinator's)");
  app.add_option("-c,--ctx", wo.n_ctx, "the most tokens one session may hold (at least the coordinator's --ctx)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
  app.add_option("--name", wo.name, "how the coordinator's log names this worker (default HOST:PID)");
  std::string forward_listen = "*:0";
  app.add_option("--forward-listen", forward_listen,
                 "where the previous stage hands this worker its hidden states directly (HOST:PORT, CURVE with the "
                 "cluster key; '*' any interface, port 0 any free one; the host other workers use is the address "
                 "the coordinator sees this worker at unless HOST is given), or 'none': everything through the "
                 "coordinator");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (!gen_key.empty()) {
    ds4::dist::write_curve_key(gen_key, ds4::dist::generate_curve_key());
    std::fprintf(stderr, "ds4-worker: wrote a new cluster key to %s (keep it secret: whoever holds it can join)\n",
                 gen_key.c_str());
    return 0;
  }
  if (coordinator.empty()) throw Error("--coordinator HOST:PORT is required (or --gen-key FILE)");
  if (layers.empty()) throw Error("--layers A:B or A:output is required");
  if (key_file.empty()) throw Error("--dist-key FILE is required (make one with ds4-worker --gen-key FILE)");
  ds4::app::check_engine_flags(eo);
  ds4::dist::parse_layer_range(layers, &wo.layers.begin, &wo.layers.end);
  const ds4::dist::CurveKey key = ds4::dist::read_curve_key(key_file);
  const std::string endpoint = ds4::dist::zmq_endpoint(coordinator);

  const sigset_t signals = ds4::app::block_stop_signals();
  eo.partial_shards = true;  // a stage's host may keep only its own shards
  ds4::engine::Engine engine(eo);
  ds4::app::run_worker(
      "ds4-worker", engine,
      ds4::dist::make_zmq_link(endpoint, key, forward_listen == "none" ? "" : ds4::dist::zmq_endpoint(forward_listen)),
      wo, signals);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-worker: %s\n", e.what());
    return 1;
  }
}
