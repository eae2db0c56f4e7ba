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
  std::string model = "ds4flash.gguf";
  bool model_given = false;
  int64_t ctx = 32768;
  int threads = 1;
  bool quality = false;
  int prefill_chunk = engine::kDefaultPrefillChunk;
  struct {
    bool mlock = false, warm = false, huge_pages = false;
  } load;  // --mlock, --warm-weights, --huge-pages
  std::string chdir;
  std::string trace;
  std::string kv_disk_dir;  // "" = no disk cache
  int64_t kv_disk_space_mb = 4096;
  runtime::KvCacheConfig kv;
  server::EngineConfig engine;
  server::HttpConfig http;
};

// Parses argv; prints help/version and exits through CLI11 for --help. A
// ds4::Error names the bad option.
ServerOptions parse_server_options(int argc, char** argv, bool* exit_now, int* exit_code);

}  // namespace ds4::app
