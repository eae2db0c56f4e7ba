#include "engine_flags.h"

#include <string>

#include "core/error.h"

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
  return model;
}

void check_engine_flags(const engine::EngineOptions& eo) {
  if (eo.threads < 1) throw Error("--threads must be at least 1 (got " + std::to_string(eo.threads) + ")");
  if (eo.prefill_chunk < 1) {
    throw Error("--prefill-chunk must be at least 1 (got " + std::to_string(eo.prefill_chunk) + ")");
  }
}

}  // namespace ds4::app
