// The ds4-server command line (PROTOCOL.md §5.11).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "runtime/kv_disk_cache.h"
#include "server/engine.h"
#include "server/http_server.h"

namespace ds4::app {

struct ServerOptions {
  // -m, -t, --quality, --prefill-chunk, --mlock, --warm-weights, --huge-pages:
  // how the model is loaded (apps/common/engine_flags.h).
  engine::EngineOptions load = default_load();
  bool model_given = false;
  int64_t ctx = 32768;
  std::string chdir;
  std::string trace;
  std::string kv_disk_dir;  // "" = no disk cache
  int64_t kv_disk_space_mb = 4096;
  runtime::KvCacheConfig kv;
  server::EngineConfig engine;
  server::HttpConfig http;
  // --dist mpi (under mpirun): one layer range per rank, rank 0's first
  // (0:N), the other ranks' in rank order.
  bool dist_mpi = false;
  std::vector<std::pair<int, int>> mpi_layers;

  static engine::EngineOptions default_load() {
    engine::EngineOptions e;
    e.model_path = "ds4flash.gguf";
    return e;
  }
};

// Parses argv; prints help/version and exits through CLI11 for --help. A
// ds4::Error names the bad option.
ServerOptions parse_server_options(int argc, char** argv, bool* exit_now, int* exit_code);

}  // namespace ds4::app
