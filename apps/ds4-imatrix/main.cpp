// ds4-imatrix: an importance matrix from our forward pass over a text, in
// llama.cpp's imatrix GGUF format (what llama-imatrix writes and both
// ds4-quantize and llama-quantize read).
//   ds4-imatrix -m MODEL -f TEXT [-o imatrix.gguf] [-c 512] [--chunks N] [--chunk SKIP] [--process-output]
//               [--per-group] [--ds4-numerics] [--in-file F]... [--output-format gguf|dat]
//   ds4-imatrix --in-file F --show-statistics
// Without -f the --in-file matrices are only combined (llama-imatrix's rules);
// --show-statistics prints one matrix's statistics as llama-imatrix does.
// The text is fed as llama-imatrix feeds it (engine/imatrix_run.h), in
// llama.cpp's arithmetic (--quality) unless --ds4-numerics. Errors: one line
// "ds4-imatrix: <error>" and exit 1; usage errors exit 2.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/engine_flags.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/imatrix_run.h"
#include "model/imatrix.h"
#include "model/imatrix_statistics.h"
#include "version/version.h"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ds4::Error("cannot open the text file " + path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw ds4::Error("cannot read the text file " + path);
  // One trailing newline dropped, as llama.cpp's -f does: the same file
  // gives llama-imatrix and us the same tokens.
  std::string text = s.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// One line per chunk on a terminal redrawn in place, else every 10 %.
class ChunkProgress {
 public:
  explicit ChunkProgress(bool quiet) : quiet_(quiet), tty_(::isatty(STDERR_FILENO) == 1) {}
  bool operator()(const ds4::engine::ImatrixProgress& p) {
    if (quiet_) return true;
    const int decile = static_cast<int>(10 * p.chunk / std::max<int64_t>(1, p.n_chunks));
    const bool last = p.chunk == p.n_chunks;
    if (!tty_ && decile == last_decile_ && !last) return true;
    last_decile_ = decile;
    const double per_chunk = p.seconds / static_cast<double>(p.chunk);
    const double eta = per_chunk * static_cast<double>(p.n_chunks - p.chunk);
    std::fprintf(stderr, "%schunk %lld/%lld  ppl %.4f  %.2f s/chunk  ETA %.0f s%s", tty_ ? "\r\033[K" : "",
                 static_cast<long long>(p.chunk), static_cast<long long>(p.n_chunks), p.perplexity, per_chunk, eta,
                 tty_ && !last ? "" : "\n");
    return true;
  }

 private:
  bool quiet_, tty_;
  int last_decile_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Collect an importance matrix (llama.cpp's imatrix GGUF) from the forward pass over a text",
               "ds4-imatrix"};
  app.set_version_flag("--version", ds4::version_line("ds4-imatrix"), "Print the version and git commit and exit");
  ds4::engine::EngineOptions eo;
  // llama-imatrix's arithmetic and ubatch unless asked otherwise.
  eo.numerics = ds4::backend::Numerics::Quality;
  eo.prefill_chunk = 512;
  CLI::Option* model = ds4::app::add_engine_flags(app, eo, "model GGUF");
  ds4::engine::ImatrixRunOptions ro;
  std::string text_path, out_path = "imatrix.gguf", format = "gguf";
  std::vector<std::string> in_files;
  bool ds4_numerics = false, quiet = false, show_statistics = false;
  app.add_option("-f,--file", text_path,
                 "Text to evaluate (tokenized as llama-imatrix does: control-token literals stay text); without it, "
                 "the --in-file matrices are only combined");
  app.add_option("--in-file", in_files,
                 "Imatrix (GGUF or legacy .dat, ours or llama-imatrix's) to add to (repeatable; as llama-imatrix)");
  app.add_option("--output-format", format, "gguf, or dat: llama-imatrix's legacy format")
      ->capture_default_str()
      ->check(CLI::IsMember({"gguf", "dat"}));
  app.add_option("-o,--output", out_path, "Imatrix GGUF to write")->capture_default_str();
  app.add_option("-c,--ctx", ro.chunk_tokens, "Tokens per chunk (each a fresh context starting with BOS)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--chunks", ro.max_chunks, "At most this many chunks (default: every whole chunk)");
  app.add_option("--chunk", ro.skip_chunks, "Skip this many chunks at the start of the text")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--process-output", ro.process_output, "Collect the vocab head (output.weight) too");
  app.add_flag("--per-group", ro.per_group,
               "attn_output_a's statistics per output group, exactly as llama-imatrix writes them (ds4-quantize "
               "uses them per group; llama-quantize refuses them). Default: the groups' mean, which both accept");
  app.add_flag("--ds4-numerics", ds4_numerics,
               "ds4's faster arithmetic instead of llama.cpp's; routed experts' down inputs are then weighted by "
               "their route weight (ds4 applies it before down)");
  app.add_flag("-q,--quiet", quiet, "No progress on stderr");
  app.add_flag("--show-statistics", show_statistics,
               "Print the statistics of the one --in-file matrix (per tensor and per layer, as llama-imatrix "
               "--show-statistics) and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "ds4-imatrix: " << e.what() << " (see ds4-imatrix --help)\n";
    return 2;
  }
  if (show_statistics && (in_files.size() != 1 || !text_path.empty())) {
    std::cerr << "ds4-imatrix: --show-statistics needs exactly one --in-file imatrix and no -f (see --help)\n";
    return 2;
  }
  if (text_path.empty() && in_files.empty()) {
    std::cerr << "ds4-imatrix: give a text (-f) to collect from, or --in-file matrices to combine (see --help)\n";
    return 2;
  }
  if (!text_path.empty() && model->count() == 0) {
    std::cerr << "ds4-imatrix: -m MODEL is needed to collect from a text (see --help)\n";
    return 2;
  }
  try {
    const auto chunk = static_cast<uint32_t>(ro.chunk_tokens);
    ds4::model::Imatrix total;
    for (const std::string& f : in_files) total.add(ds4::model::Imatrix::load(f), chunk);
    if (show_statistics) {
      const ds4::model::ImatrixStatistics stats = ds4::model::imatrix_statistics(total);
      for (const std::string& why : stats.skipped) std::fprintf(stderr, "ds4-imatrix: %s\n", why.c_str());
      if (stats.tensors.empty()) throw ds4::Error("no statistics can be computed for " + in_files[0]);
      std::fputs(ds4::model::format_imatrix_statistics(stats, in_files[0]).c_str(), stdout);
      return 0;
    }
    if (!text_path.empty()) {
      if (ds4_numerics) eo.numerics = ds4::backend::Numerics::Default;
      eo.prefill_chunk = static_cast<int>(std::min<int64_t>(eo.prefill_chunk, ro.chunk_tokens));
      ds4::app::check_engine_flags(eo);
      ro.dataset = text_path;
      const std::string text = read_text(text_path);
      ds4::engine::Engine engine(eo);
      ChunkProgress progress(quiet);
      const ds4::engine::ImatrixRunResult r = ds4::engine::run_imatrix(engine, text, ro, std::ref(progress));
      total.add(r.imatrix, chunk);
      std::fprintf(stderr, "ds4-imatrix: %lld tokens, %lld chunks of %lld, ppl %.4f\n", static_cast<long long>(r.n_tokens),
                   static_cast<long long>(r.n_chunks), static_cast<long long>(ro.chunk_tokens), r.perplexity);
    }
    if (format == "dat")
      total.save_legacy(out_path);
    else
      total.save(out_path);
    std::fprintf(stderr, "ds4-imatrix: %zu entries (%u chunks of %u) written to %s\n", total.entries.size(),
                 total.chunk_count, total.chunk_size, out_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ds4-imatrix: " << e.what() << "\n";
    return 1;
  }
}
