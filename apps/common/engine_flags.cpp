#include "engine_flags.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "dist/coordinator.h"

namespace ds4::app {

CLI::Option* add_engine_flags(CLI::App& app, engine::EngineOptions& eo, const std::string& model_help) {
  CLI::Option* model = app.add_option("-m,--model", eo.model_path, model_help);
  app.add_option("-t,--threads", eo.threads, "compute threads")->capture_default_str();
  app.add_flag_callback(
      "--quality", [&eo] { eo.numerics = backend::Numerics::Quality; },
      "quality numerics (llama.cpp's op order) instead of the default numerics; slower");
  app.add_option("--prefill-chunk", eo.prefill_chunk,
                 "tokens per layer-major prefill chunk (part of the KV file format)")
      ->capture_default_str();
  app.add_flag("--mlock", eo.mlock,
               "lock the weights in RAM (mlock) so the kernel never pages them out; fails at start with the limit "
               "to raise when ulimit -l is too low");
  app.add_flag("--warm-weights", eo.warm_weights,
               "read the whole model file in at start, so the first tokens do not wait on page faults");
  app.add_flag("--huge-pages", eo.huge_pages,
               "have the weights in 2 MiB pages: read again (once) the file pages the page cache holds in 4 KiB "
               "pages; implies --warm-weights");
  app.add_flag("--ssd-streaming", eo.ssd_streaming,
               "keep the routed experts on disk: a RAM cache of experts filled from the model file on demand "
               "(io_uring, O_DIRECT), everything else resident; for models larger than RAM");
  app.add_option_function<std::string>(
      "--ssd-streaming-cache-experts",
      [&eo](const std::string& v) {
        if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) {
          eo.ssd_cache_slots = std::stoll(v);
          if (eo.ssd_cache_slots < 1) throw CLI::ValidationError("--ssd-streaming-cache-experts", "N must be >= 1");
          return;
        }
        std::string size = v;
        if (!size.empty() && (size.back() == 'B' || size.back() == 'b')) size.pop_back();
        const std::optional<uint64_t> bytes = parse_size(size);
        if (!bytes || *bytes == 0 || size.empty() || size.find_first_not_of("0123456789") == std::string::npos) {
          throw CLI::ValidationError("--ssd-streaming-cache-experts",
                                     "'" + v + "' is neither a count of experts (N) nor a size (NGB, NMB)");
        }
        eo.ssd_cache_bytes = *bytes;
      },
      "with --ssd-streaming: the expert cache's size, NGB / NMB (bytes) or N (exactly N experts); default: "
      "what the memory available to the process leaves");
  app.add_option("--ssd-streaming-hotlist", eo.ssd_hotlist,
                 "with --ssd-streaming: read these experts into the cache at start, most selected first (a file "
                 "`ds4-bench --record-expert-usage` writes)");
  app.add_flag("--ssd-streaming-cold", eo.ssd_cold, "with --ssd-streaming: start with an empty cache (no hot list)");
  return model;
}

void add_backend_flags(CLI::App& app, engine::EngineOptions& eo) {
  app.add_option("--backend", eo.backend, "cpu, or cuda: the model on NVIDIA GPUs (builds where nvcc was found)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--gpu-devices", eo.gpu_devices,
                 "with --backend cuda: the GPUs, in layer order (\"0,1\", \"all\"); default GPU 0");
  app.add_option("--gpu-vram", eo.gpu_vram,
                 "with --backend cuda: memory per GPU, \"auto\" (free memory less 512 MiB) or GiB per GPU "
                 "(\"70,70\")");
  app.add_option("--gpu-ctx", eo.gpu_ctx,
                 "with --backend cuda: the longest session context; its KV state is reserved on the GPUs")
      ->capture_default_str();
  app.add_flag("--gpu-tensor-parallel", eo.gpu_tensor_parallel,
               "with --backend cuda: GPUs in pairs splitting each layer's routed experts; --gpu-devices lists the "
               "homes, then their partners in the same order (\"0,2,1,3\" pairs 0 with 1 and 2 with 3); default: "
               "all GPUs");
  app.add_option("--gpu-prefill", eo.gpu_prefill,
                 "with --backend cuda: prefill products of quantized weights on the int8 tensor cores (int8: the "
                 "CPU's sums, exact) or dequantized to f16 through cuBLAS (f16)")
      ->check(CLI::IsMember({"int8", "f16"}))
      ->capture_default_str();
}

void check_engine_flags(const engine::EngineOptions& eo) {
  if (eo.backend != "cuda" &&
      (!eo.gpu_devices.empty() || !eo.gpu_vram.empty() || eo.gpu_tensor_parallel || eo.gpu_prefill != "int8"))
    throw Error(std::string(!eo.gpu_devices.empty()  ? "--gpu-devices"
                            : !eo.gpu_vram.empty()   ? "--gpu-vram"
                            : eo.gpu_tensor_parallel ? "--gpu-tensor-parallel"
                                                     : "--gpu-prefill") +
                " needs --backend cuda");
  if (eo.gpu_ctx < 1) throw Error("--gpu-ctx must be at least 1 (got " + std::to_string(eo.gpu_ctx) + ")");
  if (eo.threads < 1) throw Error("--threads must be at least 1 (got " + std::to_string(eo.threads) + ")");
  if (!eo.ssd_streaming && (eo.ssd_cache_slots > 0 || eo.ssd_cache_bytes > 0)) {
    throw Error("--ssd-streaming-cache-experts needs --ssd-streaming");
  }
  if (!eo.ssd_streaming && (!eo.ssd_hotlist.empty() || eo.ssd_cold)) {
    throw Error(std::string(eo.ssd_cold ? "--ssd-streaming-cold" : "--ssd-streaming-hotlist") + " needs --ssd-streaming");
  }
  if (eo.prefill_chunk < 1) {
    throw Error("--prefill-chunk must be at least 1 (got " + std::to_string(eo.prefill_chunk) + ")");
  }
}

void add_dist_flags(CLI::App& app, engine::EngineOptions& eo, std::string* layers) {
  app.add_option("--dist-listen", eo.dist_listen,
                 "coordinate a pipeline across processes: listen for ds4-worker on HOST:PORT (ZeroMQ, CURVE "
                 "encrypted and authenticated with --dist-key; port 0: any free one, printed)");
  app.add_option("--dist-key", eo.dist_key, "with --dist-listen: the cluster key file (ds4-worker --gen-key FILE)");
  app.add_option("--layers", *layers,
                 "with --dist-listen: the layers this process evaluates, 0:N (workers serve N:output)");
  app.add_option("--dist-prefill-chunk", eo.dist_wave_tokens,
                 "with --dist-listen: prompt tokens per wave along the route (several waves in flight keep every "
                 "stage busy)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--dist-prefill-window", eo.dist_window, "with --dist-listen: waves in flight")
      ->check(CLI::Range(1, 64));
  app.add_option("--dist-activation-bits", eo.dist_activation_bits,
                 "with --dist-listen: hidden states on the wire, 32 (f32, results identical to one process) or 16 "
                 "(half the bytes)")
      ->check(CLI::IsMember({32, 16}));
  app.add_flag("--dist-no-forward", eo.dist_no_forward,
               "with --dist-listen: every stage's hidden states come back here and go out to the next stage (two "
               "transfers per worker) instead of workers handing them to each other (one)");
}

void finish_dist_flags(engine::EngineOptions& eo, const std::string& layers, int64_t ctx) {
  if (eo.dist_listen.empty()) {
    if (!layers.empty()) throw Error("--layers needs --dist-listen");
    if (!eo.dist_key.empty()) throw Error("--dist-key needs --dist-listen");
    return;
  }
  if (layers.empty()) throw Error("--dist-listen needs --layers 0:N (the layers this process evaluates)");
  int begin = 0, end = 0;
  dist::parse_layer_range(layers, &begin, &end);
  if (begin != 0 || end < 0)
    throw Error("--layers " + layers +
                ": the coordinator evaluates the first layers, 0:N (the last worker serves N:output)");
  eo.dist_first_remote = end;
  eo.dist_ctx = ctx;
}

std::vector<dist::StageInfo> wait_for_route(const engine::Engine& engine, double seconds) {
  if (!engine.route()) return {};
  std::fprintf(stderr, "dist: waiting up to %.0f s for workers to serve every layer\n", seconds);
  std::fflush(stderr);
  if (!engine.wait_for_route(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000))))
    throw Error("--dist-wait " + std::to_string(static_cast<int64_t>(seconds)) + ": no worker serves layers " +
                engine.route()->missing);
  const std::vector<dist::StageInfo> stages = engine.route()->stages;
  for (size_t i = 0; i < stages.size(); ++i) {
    // The first stage always takes its input from the coordinator.
    const std::string handed =
        i > 0 && !stages[i].forward.empty() ? ", handed over by the stage before at " + stages[i].forward : "";
    std::fprintf(stderr, "dist: hop %zu: layers %s on worker %s at %s%s\n", i + 1,
                 dist::layer_range_text(stages[i].begin, stages[i].end).c_str(), stages[i].name.c_str(),
                 stages[i].address.c_str(), handed.c_str());
  }
  std::fflush(stderr);
  return stages;
}

}  // namespace ds4::app
