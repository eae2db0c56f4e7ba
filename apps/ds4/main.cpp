// ds4: DeepSeek V4 on the CPU.
//   ds4 [-m MODEL]                                            interactive chat
//   ds4 [-m MODEL] -p TEXT | --prompt-file F                  one chat turn (--dump-logprobs OUT.json)
//   ds4 [-m MODEL] --dump-tokens -p TEXT                      the token ids of TEXT as written
//   ds4 -m MODEL --tokens-file T.json --dump-logits OUT.bin   all-position logits (f32 LE, n x n_vocab)
//   ds4 -m MODEL --tokens-file T.json --greedy N              N greedy ids as one JSON line on stdout
// plus --save-session / --load-session, --mlock, --warm-weights and --huge-pages. stdout
// carries only results (ids, generated text); the memory accounting, progress
// and speed lines, and the peak RSS at exit, go to stderr. Every failure is one line "ds4: <message>" on stderr and exit
// status 1.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_map.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "runtime/tokens_file.h"
#include "version/version.h"

#include "chat_cli.h"
#include "common/engine_flags.h"
#include "common/program_main.h"
#include "logits_file.h"
#include "memory_report.h"
#include "options.h"

namespace {

using ds4::Error;
using namespace ds4::app;
using Clock = std::chrono::steady_clock;

// Rows of logits buffered per eval() call while dumping: one prefill chunk,
// but at most about 1 GiB of floats (the result does not depend on it).
constexpr uint64_t kMaxLogitsBufferBytes = uint64_t{1} << 30;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void print_speed(const char* what, int64_t n, double secs) {
  std::fprintf(stderr, "%s: %lld tokens in %.3f s, %.2f tokens/s\n", what, static_cast<long long>(n), secs,
               secs > 0 ? static_cast<double>(n) / secs : 0.0);
}

// ds4::Error when the folder `path` would be created in is missing or not writable.
void check_writable_folder(const std::string& path, const char* option) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  if (::access(folder.c_str(), W_OK) != 0)
    throw Error(std::string("cannot write ") + option + " " + path + ": " + std::strerror(errno));
}

std::string json_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

int run_tokens(const Options& o) {
  std::vector<int32_t> tokens;
  if (!o.tokens_file.empty()) tokens = ds4::runtime::read_tokens_file(o.tokens_file);
  if (tokens.empty() && !o.dump_logits.empty()) throw Error(o.tokens_file + ": the token list is empty");
  if (tokens.empty() && o.load_session.empty())
    throw Error(o.tokens_file + ": the token list is empty and no --load-session gives a context");
  check_model_present(o);

  ds4::engine::Engine engine(o.engine);
  ds4::app::wait_for_route(engine, o.dist_wait_seconds);
  const ds4::engine::ModelFacts& facts = engine.facts();
  ds4::runtime::check_token_range(tokens, facts.n_vocab, o.tokens_file);

  const int64_t n_new = static_cast<int64_t>(tokens.size());
  const std::string file_detail = std::to_string(n_new) + " from " + (o.tokens_file.empty() ? "no file" : o.tokens_file) +
                                  (o.greedy ? " + " + std::to_string(*o.greedy - 1) + " fed back by --greedy" : "");
  const int64_t needed_before_load = tokens_needed(0, n_new, o.greedy);
  const int64_t n_ctx = choose_ctx(o, facts.n_ctx_train, needed_before_load);
  check_fits(needed_before_load, n_ctx, file_detail);

  // Output places are checked before anything is printed, so that a bad one
  // is the only line on stderr.
  std::unique_ptr<AtomicFloatFile> logits_out;
  if (!o.dump_logits.empty()) logits_out = std::make_unique<AtomicFloatFile>(o.dump_logits);
  if (!o.save_session.empty()) check_writable_folder(o.save_session, "--save-session");

  ds4::backend::Backend& backend = engine.backend();
  const std::unique_ptr<ds4::backend::Session> session_ptr = engine.new_session(n_ctx);
  ds4::backend::Session& session = *session_ptr;

  if (!o.load_session.empty()) {
    engine.load_session(o.load_session, session);
    const int64_t loaded = session.size();
    check_fits(tokens_needed(loaded, n_new, o.greedy), n_ctx,
               std::to_string(loaded) + " loaded from " + o.load_session + " + " + file_detail);
    if (loaded == 0 && tokens.empty()) throw Error(o.load_session + ": the session holds no tokens to continue from");
  }

  std::fputs(engine.memory_report(n_ctx).c_str(), stderr);
  std::fflush(stderr);

  if (!tokens.empty()) {
    double eval_secs = 0;
    if (!o.dump_logits.empty()) {
      const uint64_t row_bytes = uint64_t{facts.n_vocab} * sizeof(float);
      const size_t piece = static_cast<size_t>(
          std::max<uint64_t>(1, std::min<uint64_t>(static_cast<uint64_t>(o.engine.prefill_chunk), kMaxLogitsBufferBytes / row_bytes)));
      std::vector<float> rows(std::min(piece, tokens.size()) * facts.n_vocab);
      AtomicFloatFile& out = *logits_out;
      for (size_t start = 0; start < tokens.size(); start += piece) {
        const size_t n = std::min(piece, tokens.size() - start);
        const auto t0 = Clock::now();
        backend.eval(session, std::span<const int32_t>(tokens).subspan(start, n), rows.data());
        eval_secs += seconds_since(t0);
        out.write(std::span<const float>(rows.data(), n * facts.n_vocab));
      }
      out.commit();
    } else {
      const auto t0 = Clock::now();
      backend.eval(session, tokens);
      eval_secs = seconds_since(t0);
    }
    print_speed("prefill", n_new, eval_secs);
  }

  if (!o.save_session.empty()) engine.save_session(o.save_session, session);

  if (o.greedy) {
    const auto t0 = Clock::now();
    const std::vector<int32_t> ids = backend.generate_greedy(session, *o.greedy);
    print_speed("decode", static_cast<int64_t>(ids.size()), seconds_since(t0));
    const std::string line = json_ids(ids) + "\n";
    if (std::fputs(line.c_str(), stdout) < 0 || std::fflush(stdout) != 0) throw Error("cannot write to stdout");
  }
  return 0;
}

int run_mode(const Options& o) {
  switch (mode_of(o)) {
    case Mode::Tokens: return run_tokens(o);
    case Mode::DumpTokens: return run_dump_tokens(o);
    case Mode::OneShot: return run_one_shot(o);
    case Mode::Interactive: return run_interactive(o);
  }
  return 1;
}

// The peak RSS against the model file after a run that evaluated the model
// (the weights are used in place, so RSS holds the pages read, not a copy).
// --mlock either locked the whole file or failed the run (with
// --ssd-streaming only the resident part, which the memory report states).
void print_peak_memory(const Options& o) {
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(o.engine.model_path, ec);
  if (ec) return;
  const uint64_t locked = o.engine.mlock && !o.engine.ssd_streaming ? (file_bytes + ds4::page_bytes() - 1) / ds4::page_bytes() * ds4::page_bytes() : 0;
  std::fputs(peak_memory_line(peak_rss_bytes(), file_bytes, locked).c_str(), stderr);
  std::fflush(stderr);
}

int run(const Options& o) {
  validate(o);
  const int status = run_mode(o);
  if (mode_of(o) != Mode::DumpTokens) print_peak_memory(o);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DeepSeek V4 Flash on the CPU: interactive chat (no prompt), one-shot (-p), and token-id tools.", "ds4"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", ds4::version_line("ds4"), "Print the version and git commit and exit");
  Options o;
  o.engine.threads = ds4::default_thread_count();

  ds4::app::add_backend_flags(app, o.engine);
  ds4::app::add_engine_flags(app, o.engine, "Model GGUF file (download one with ./download_model.sh)")
      ->capture_default_str();
  app.add_option("-p,--prompt", o.prompt, "Run one chat turn with this user message and exit");
  app.add_option("--prompt-file", o.prompt_file, "Like -p, with the message read from a file");
  app.add_option("--system", o.system, "System prompt (\"\" for none)")->capture_default_str();
  app.add_option("-n,--tokens", o.max_tokens, "Most tokens generated per reply")->capture_default_str();
  app.add_flag("--ignore-eos", o.ignore_eos, "Never end a reply at EOS (replies run to -n; for benchmarks and tests)");
  app.add_option("--stop", o.stop_strings, "End a reply where this text appears (cut before it); repeatable")
      ->allow_extra_args(false);
  app.add_option("--temp", o.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-p", o.top_p, "Nucleus sampling: keep the smallest set of tokens with this total probability")
      ->capture_default_str();
  app.add_option("--min-p", o.min_p, "Drop tokens less likely than this fraction of the most likely one")
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "Keep only the k most likely tokens (0 = off)")->capture_default_str();
  app.add_option("--seed", o.seed, "Sampling seed (default: from the clock); the same seed repeats a run");
  app.add_flag_callback("--think", [&o] { o.think = Think::High; }, "Reason inside <think> before answering (default)");
  app.add_flag_callback("--nothink", [&o] { o.think = Think::None; }, "Answer directly, without reasoning");
  app.add_flag_callback("--think-max", [&o] { o.think = Think::Max; },
                        "Maximum reasoning effort (only with --ctx of at least 393216; otherwise normal thinking)");
  app.add_flag("--dump-tokens", o.dump_tokens,
               "Print the token ids of the -p/--prompt-file text as written (special tokens recognised, no BOS "
               "added) as one JSON array and exit");
  app.add_option("--dump-logprobs", o.dump_logprobs,
                 "With -p: write the greedy continuation (-n tokens) with the top alternatives of every step to this "
                 "JSON file");
  app.add_option("--logprobs-top-k", o.logprobs_top_k, "Alternatives per step in --dump-logprobs")
      ->capture_default_str();
  app.add_flag_callback("--no-color", [&o] { o.color = false; }, "No grey reasoning or progress bar on a terminal");

  app.add_option("--tokens-file", o.tokens_file,
                 "JSON array of token ids, evaluated as given (nothing added); may be left out with --load-session "
                 "and --greedy");
  app.add_option("--dump-logits", o.dump_logits,
                 "Write the logits after every token of --tokens-file: float32 little-endian, n_tokens x n_vocab, "
                 "row i after token i (written to a temporary file and renamed)");
  app.add_option("--greedy", o.greedy, "Generate N ids greedily after the tokens; prints them as one JSON array on stdout");
  app.add_option("--save-session", o.save_session, "After evaluating the tokens, save the session to this file");
  app.add_option("--load-session", o.load_session,
                 "Before evaluating, load this session; the tokens of --tokens-file follow its tokens");
  app.add_option("-c,--ctx", o.ctx,
                 "Context size in tokens (default: min(model n_ctx_train, 32768), raised to the tokens the run "
                 "needs)");
  ds4::app::add_dist_flags(app, o.engine, &o.dist_layers);
  app.add_option("--dist-wait", o.dist_wait_seconds,
                 "with --dist-listen: seconds to wait for workers to serve every layer before starting")
      ->capture_default_str();

  return ds4::app::parse_and_run(app, argc, argv, "ds4", [&] {
    o.model_given = app.count("-m") > 0;
    // Workers must hold sessions as long as ours: --ctx, else the default cap.
    ds4::app::finish_dist_flags(o.engine, o.dist_layers, o.ctx.value_or(ds4::app::kDefaultCtxCap));
    return run(o);
  });
}
