// The flags every program that opens a model shares, bound straight to the
// engine::EngineOptions the program opens it with: -m, -t, --quality,
// --prefill-chunk, --mlock, --warm-weights, --huge-pages, --ssd-streaming,
// --ssd-streaming-cache-experts.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ds4::app {

// Adds the flags to `app`, bound to `eo`; their shown defaults are eo's values
// now (set the program's defaults first). Returns -m, for the program's own
// settings (required, its help) and to tell whether it was given.
CLI::Option* add_engine_flags(CLI::App& app, engine::EngineOptions& eo, const std::string& model_help);

// ds4::Error naming the flag for values no model can make valid.
void check_engine_flags(const engine::EngineOptions& eo);

// --backend cpu|cuda and the GPU flags (--gpu-devices, --gpu-vram,
// --gpu-ctx); check_engine_flags refuses the GPU flags without --backend cuda.
void add_backend_flags(CLI::App& app, engine::EngineOptions& eo);

// The coordinator's flags (docs/distributed.md): --dist-listen, --dist-key,
// --layers 0:N, --dist-prefill-chunk, --dist-prefill-window,
// --dist-activation-bits, bound to `eo` (--layers into *layers).
void add_dist_flags(CLI::App& app, engine::EngineOptions& eo, std::string* layers);
// After parsing: checks them together and fills eo.dist_first_remote and
// eo.dist_ctx (sessions of up to ctx tokens); ds4::Error naming the flag.
void finish_dist_flags(engine::EngineOptions& eo, const std::string& layers, int64_t ctx);

// With --dist-listen: waits up to `seconds` until workers serve every layer
// after this process's (ds4::Error "--dist-wait N: no worker serves layers
// ..." otherwise) and names each stage on stderr; the stages in route order.
// Empty at once for one process.
std::vector<dist::StageInfo> wait_for_route(const engine::Engine& engine, double seconds);

inline bool quality(const engine::EngineOptions& eo) { return eo.numerics == backend::Numerics::Quality; }

}  // namespace ds4::app
