#include "run_worker.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "dist/coordinator.h"

namespace ds4::app {

sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

void run_worker(const std::string& program, engine::Engine& engine, std::unique_ptr<dist::Link> link,
                dist::WorkerOptions wo, const sigset_t& signals) {
  const int n_layer = static_cast<int>(engine.facts().n_layer);
  const std::string layers = dist::layer_range_text(wo.layers.begin, wo.layers.end);
  if (wo.layers.begin == 0) throw Error("--layers " + layers + ": layer 0 is the coordinator's (it holds the embedding)");
  if (wo.layers.begin >= n_layer || wo.layers.end > n_layer)
    throw Error("--layers " + layers + ": the model has " + std::to_string(n_layer) +
                " layers (the last stage is A:output, or A:" + std::to_string(n_layer) + " without the head)");
  engine.require_stage(wo.layers.begin, wo.layers.end);
  auto log = [program](const std::string& line) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), line.c_str());
    std::fflush(stderr);
  };
  if (wo.name.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    wo.name = std::string(host) + ":" + std::to_string(::getpid());
  }
  wo.fingerprint = engine.fingerprint();
  wo.log = log;
  const std::string where = link->describe();
  dist::Worker worker(engine.backend(), std::move(link), wo);
  log(engine.options().model_path + ": layers " + layers + ", " + std::to_string(engine.options().threads) +
      " thread" + (engine.options().threads == 1 ? "" : "s") + "; joining " + where);
  // The signal watcher checks every 200 ms whether the worker ended by
  // itself (a refusal), so it never outlives the worker.
  std::atomic<bool> ended{false};
  std::thread signal_thread([&] {
    const timespec nap{0, 200'000'000};
    while (!ended) {
      const int sig = sigtimedwait(&signals, nullptr, &nap);
      if (sig > 0) {
        log(std::string(strsignal(sig)) + ": stopping");
        worker.stop();
        return;
      }
    }
  });
  try {
    worker.run();
  } catch (...) {
    ended = true;
    signal_thread.join();
    throw;
  }
  ended = true;
  signal_thread.join();
  log("stopped");
}

}  // namespace ds4::app
