#include "server_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <thread>

#include "common/engine_flags.h"
#include "common/mpi_pipeline.h"
#include "core/error.h"
#include "dist/coordinator.h"
#include "version/version.h"

namespace ds4::app {

namespace {

// The settings that follow from the parsed flags together.
ServerOptions finish(ServerOptions& o, bool no_replay, int64_t cache_ram_mb) {
  o.engine.exact_tool_replay = !no_replay;
  o.engine.cache_ram_bytes = static_cast<size_t>(cache_ram_mb) << 20;
  o.engine.n_ctx = o.ctx;
  o.http.n_ctx = o.ctx;
  o.http.max_tokens = o.engine.max_tokens;
  if (o.http.api_key.empty()) {
    if (const char* k = std::getenv("DS4_API_KEY")) o.http.api_key = k;
  }
  o.kv.dir = o.kv_disk_dir;
  o.kv.space_bytes = static_cast<uint64_t>(o.kv_disk_space_mb) << 20;
  return o;
}

}  // namespace

ServerOptions parse_server_options(int argc, char** argv, bool* exit_now, int* exit_code) {
  ServerOptions o;
  *exit_now = false;
  CLI::App app{
      "ds4-server: DeepSeek V4 Flash behind OpenAI- and Anthropic-compatible HTTP APIs "
      "(/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages)",
      "ds4-server"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", ds4::version_line("ds4-server"), "print the version and git commit and exit");
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  o.load.threads = static_cast<int>(hw);
  auto* m = add_engine_flags(app, o.load, "GGUF model file");
  add_backend_flags(app, o.load);
  app.add_option("-c,--ctx", o.ctx, "context size in tokens (per resident session)")->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
  app.add_option("-n,--tokens", o.engine.max_tokens, "default and largest reply length in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--chdir", o.chdir, "change to this folder first (relative paths start there)");
  app.add_option("--host", o.http.host, "address to listen on (127.0.0.1 = this machine only)");
  app.add_option("--port", o.http.port, "TCP port (0 = any free port, printed at start)")->check(CLI::Range(0, 65535));
  app.add_flag("--cors", o.http.cors, "allow browser pages from any origin (Access-Control-Allow-* headers)");
  app.add_option("--api-key", o.http.api_key,
                 "require this key (Authorization: Bearer KEY or x-api-key: KEY); also read from DS4_API_KEY");
  app.add_option("--max-body-mb", o.http.max_body_bytes, "largest request body")->transform([](std::string s) {
    return std::to_string(std::stoull(s) << 20);
  });
  app.add_option("--trace", o.trace, "append rendered prompts, cache decisions, generated text and parser events here");
  app.add_option("--batched-session", o.engine.batched_sessions,
                 "resident sessions (each holds its own KV): requests run at once, decoded in one batch")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-decode-stall", o.engine.max_decode_stall,
                 "a step that prefills a prompt beside running streams takes at most this many decode steps")
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--queue-max", o.engine.queue_max,
                 "requests allowed to wait for a free slot; more get 503 with Retry-After")
      ->check(CLI::Range(size_t{0}, size_t{1} << 20));
  app.add_option("--http-threads", o.http.threads, "connections served at once")->check(CLI::Range(4, 4096));
  int64_t cache_ram_mb = static_cast<int64_t>(o.engine.cache_ram_bytes >> 20);
  app.add_option("--cache-ram", cache_ram_mb,
                 "RAM prefix cache in MiB (0 = off): session states at prompt heads, prompt ends and evicted "
                 "slots, reused by prompts that begin with their tokens")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--cache-ram-min-tokens", o.engine.cache_ram_min_tokens, "shortest state the RAM prefix cache keeps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--kv-disk-dir", o.kv_disk_dir, "folder of the disk KV cache (enables it)");
  app.add_option("--kv-disk-space-mb", o.kv_disk_space_mb, "disk KV cache budget in MiB")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--kv-cache-min-tokens", o.kv.min_tokens, "smallest prefix worth a KV file")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--kv-cache-cold-max-tokens", o.kv.cold_max_tokens,
                 "largest prompt that gets a cold save (0 = none); hits above it consume their file")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--kv-cache-continued-interval-tokens", o.kv.continued_interval_tokens,
                 "save a checkpoint every this many tokens (rounded up to the alignment; 0 = never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--kv-cache-boundary-trim-tokens", o.kv.boundary_trim_tokens, "tokens left off a cold save's end")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--kv-cache-boundary-align-tokens", o.kv.boundary_align_tokens,
                 "cold saves and checkpoints at multiples of this (0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_flag("--kv-cache-reject-different-quant", o.kv.reject_different_quant,
               "never load KV files written with another routed-expert quantization");
  bool no_replay = false;
  app.add_flag("--disable-exact-dsml-tool-replay", no_replay, "always re-render tool calls canonically");
  app.add_option("--tool-memory-max-ids", o.engine.tool_memory_max_ids, "tool-call ids remembered for exact replay")
      ->check(CLI::Range(size_t{0}, size_t{1} << 30));
  std::string layers, transport;
  add_dist_flags(app, o.load, &layers);
  app.add_option("--dist", transport,
                 "mpi: run under mpirun, rank 0 serving and coordinating, the other ranks workers; --layers then "
                 "lists one range per rank (0:A,A:B,...,X:output). MPI is not encrypted: trusted networks only")
      ->check(CLI::IsMember({"mpi"}));
  bool tensor_parallel = false;
  app.add_flag("--tensor-parallel", tensor_parallel,
               "with --dist mpi: every rank evaluates every layer with its share of the weights (routed expert e on "
               "rank e % K, the vocab head by rows; attention on every rank); rank 0 serves. Takes no --layers");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_now = true;
    *exit_code = app.exit(e);
    return o;
  }
  o.model_given = m->count() > 0;
  check_engine_flags(o.load);
  if (transport == "mpi") {
    if (!o.load.dist_listen.empty() || !o.load.dist_key.empty())
      throw Error("--dist mpi takes neither --dist-listen nor --dist-key (mpirun connects the ranks)");
    o.dist_mpi = true;
    if (tensor_parallel) {
      if (!layers.empty()) throw Error("--tensor-parallel takes no --layers: every rank evaluates every layer");
      o.load.dist_tensor_parallel = true;
      o.load.dist_ctx = o.ctx;
      return finish(o, no_replay, cache_ram_mb);
    }
    if (layers.empty())
      throw Error("--dist mpi needs --layers 0:A,A:B,...,X:output (one range per rank), or --tensor-parallel");
    o.mpi_layers = parse_mpi_layers(layers);
    o.load.dist_first_remote = o.mpi_layers.front().second;
    o.load.dist_ctx = o.ctx;
  } else {
    if (tensor_parallel) throw Error("--tensor-parallel needs --dist mpi (under mpirun)");
    finish_dist_flags(o.load, layers, o.ctx);
  }
  return finish(o, no_replay, cache_ram_mb);
}

}  // namespace ds4::app
