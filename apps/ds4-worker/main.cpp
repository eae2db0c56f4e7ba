// ds4-worker: a pipeline stage in another process or on another host
// (docs/distributed.md).
//   ds4-worker --gen-key FILE
//   ds4-worker -m MODEL --coordinator HOST:PORT --layers A:B|A:output --dist-key FILE [--ctx N] [-t N] ...
// Joins the coordinator (ds4-server --dist-listen), which checks that both
// run the same build, model file and numerics and that the layers fit the
// route; then evaluates its layers for every session until SIGINT/SIGTERM.
// If the coordinator goes away the worker keeps trying and rejoins when it
// returns. A refusal (another model, overlapping layers, ...) ends it with
// the coordinator's reason and exit status 1.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "common/engine_flags.h"
#include "core/error.h"
#include "dist/coordinator.h"
#include "dist/curve_key.h"
#include "dist/worker.h"
#include "dist/zmq_transport.h"
#include "engine/engine.h"
#include "version/version.h"

namespace {

using ds4::Error;

void log_line(const std::string& line) {
  std::fprintf(stderr, "ds4-worker: %s\n", line.c_str());
  std::fflush(stderr);
}

int run(int argc, char** argv) {
  ds4::engine::EngineOptions eo;
  eo.model_path = "ds4flash.gguf";
  eo.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string coordinator, layers, key_file, gen_key, name;
  int64_t ctx = 32768;
  CLI::App app{"ds4-worker: evaluate a range of layers for a ds4-server coordinator (pipeline parallel)", "ds4-worker"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", ds4::version_line("ds4-worker"), "print the version and git commit and exit");
  ds4::app::add_engine_flags(app, eo, "GGUF model file (the coordinator's file, or one with the same fingerprint)");
  app.add_option("--gen-key", gen_key, "write a new cluster key to FILE (mode 0600) and exit; copy it to every host");
  app.add_option("--coordinator", coordinator, "the coordinator's HOST:PORT (ds4-server --dist-listen)");
  app.add_option("--layers", layers, "the layers this worker evaluates: A:B, or A:output for the last stage (A:N, N the layer count: the last "
                 "layer without the output head, which the coordinator then computes: smaller replies)");
  app.add_option("--dist-key", key_file, "the cluster key file (the coordinator's)");
  app.add_option("-c,--ctx", ctx, "the most tokens one session may hold (at least the coordinator's --ctx)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
  app.add_option("--name", name, "how the coordinator's log names this worker (default HOST:PID)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (!gen_key.empty()) {
    ds4::dist::write_curve_key(gen_key, ds4::dist::generate_curve_key());
    log_line("wrote a new cluster key to " + gen_key + " (keep it secret: whoever holds it can join)");
    return 0;
  }
  if (coordinator.empty()) throw Error("--coordinator HOST:PORT is required (or --gen-key FILE)");
  if (layers.empty()) throw Error("--layers A:B or A:output is required");
  if (key_file.empty()) throw Error("--dist-key FILE is required (make one with ds4-worker --gen-key FILE)");
  ds4::app::check_engine_flags(eo);
  ds4::dist::WorkerOptions wo;
  ds4::dist::parse_layer_range(layers, &wo.layers.begin, &wo.layers.end);
  if (wo.layers.begin == 0) throw Error("--layers " + layers + ": layer 0 is the coordinator's (it holds the embedding)");
  const ds4::dist::CurveKey key = ds4::dist::read_curve_key(key_file);
  const std::string endpoint = ds4::dist::zmq_endpoint(coordinator);

  // Signals go to one thread (sigwait), never to the evaluation.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ds4::engine::Engine engine(eo);
  if (wo.layers.begin >= static_cast<int>(engine.facts().n_layer) ||
      (wo.layers.end >= 0 && wo.layers.end > static_cast<int>(engine.facts().n_layer)))
    throw Error("--layers " + layers + ": the model has " + std::to_string(engine.facts().n_layer) +
                " layers (the last stage is A:output)");
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  wo.name = name.empty() ? std::string(host) + ":" + std::to_string(::getpid()) : name;
  wo.n_ctx = ctx;
  wo.fingerprint = engine.fingerprint();
  wo.log = log_line;
  ds4::dist::Worker worker(engine.backend(), ds4::dist::make_zmq_link(endpoint, key), wo);
  log_line(eo.model_path + ": layers " + ds4::dist::layer_range_text(wo.layers.begin, wo.layers.end) + ", " +
           std::to_string(eo.threads) + " thread" + (eo.threads == 1 ? "" : "s") + "; joining " + endpoint +
           " (CURVE)");

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log_line(std::string(strsignal(sig)) + ": stopping");
    worker.stop();
  });
  signal_thread.detach();
  worker.run();
  log_line("stopped");
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
