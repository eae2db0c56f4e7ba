// ds4-bench: prefill and decode speed at growing context (SYSTEMS.md 6.1).
//   ds4-bench -m MODEL --prompt-file F | --chat-prompt-file F | --tokens-file T.json
//             [--ctx-start 2048] [--ctx-max 32768] [--step-incr 2048 | --step-mul F]
//             [-n 128] [--csv FILE] [-t N] [--quality] [--warm-weights] [--mlock] [--huge-pages] [--warmup]
//             [--read-bandwidth 2g] [--sessions N]
// Walks frontiers through the prompt's tokens: at each one it evaluates only
// the tokens since the previous frontier (timed: prefill), copies the session
// (untimed), decodes -n tokens greedily with EOS excluded on the copy (timed:
// decode; with --sessions N, N copies in batched steps). One CSV row per frontier on stdout (and in
// --csv FILE); the setup and memory figures go to stderr, with --read-bandwidth
// also the machine's read bandwidth measured between the decode steps and
// decode's weight bandwidth as a share of it. Every failure is
// one line "ds4-bench: <message>" on stderr and exit status 1.
#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/read_bandwidth.h"
#include "core/thread_pool.h"
#include "dist/mpi_transport.h"
#include "engine/engine.h"
#include "runtime/sampler.h"
#include "version/version.h"

#include "bench_options.h"
#include "common/engine_flags.h"
#include "common/program_main.h"
#include "bench_prompt.h"

namespace {

using ds4::Error;
using namespace ds4::bench;
using Clock = std::chrono::steady_clock;

// ds4's columns; with --sessions N > 1 two more: N and the decode tokens/s of
// all sessions together (gen_tps is then each session's).
// With --ssd-streaming: the expert cache during the decode probe (shares of
// the experts served from the cache, those a prefetch had read, file bytes read
// per decoded token, milliseconds a token waited for reads).
constexpr const char* kCsvStreamingColumns =
    ",expert_hit_rate,expert_prefetch_rate,expert_read_bytes_per_token,expert_wait_ms_per_token";

// What the expert cache did between two readings.
struct StreamingDelta {
  uint64_t hits = 0, misses = 0, prefetch_hits = 0, prefetched = 0, bytes = 0;
  double seconds = 0;
  uint64_t served() const { return hits + prefetch_hits + misses; }
  double share(uint64_t part) const {
    return served() > 0 ? static_cast<double>(part) / static_cast<double>(served()) : 0;
  }
};

StreamingDelta streaming_delta(const ds4::engine::StreamingStats& a, const ds4::engine::StreamingStats& b) {
  return {b.hits - a.hits,         b.misses - a.misses,         b.prefetch_hits - a.prefetch_hits,
          b.prefetched - a.prefetched, b.bytes_read - a.bytes_read, b.read_seconds - a.read_seconds};
}

// Bytes of experts ds4-bench reads after the walk to measure the file's read
// rate (the cache's own reads, same queue depth).
constexpr uint64_t kDiskProbeBytes = uint64_t{512} << 20;

constexpr const char* kCsvHeaderStem = "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes";
constexpr const char* kCsvSessionColumns = ",sessions,aggregate_gen_tps";

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double per_second(int64_t n, double secs) { return secs > 0 ? static_cast<double>(n) / secs : 0.0; }

std::string json_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

// The CSV goes to stdout and, with --csv, to a file opened before any work
// (so an unwritable path fails first); each row is flushed as it is made.
class CsvOut {
 public:
  explicit CsvOut(const std::string& path) : path_(path) {
    if (path.empty()) return;
    file_ = std::fopen(path.c_str(), "w");
    if (!file_) throw Error("--csv " + path + ": cannot write: " + std::strerror(errno));
  }
  ~CsvOut() {
    if (file_) std::fclose(file_);
  }
  CsvOut(const CsvOut&) = delete;
  CsvOut& operator=(const CsvOut&) = delete;

  void line(const std::string& text) {
    if (std::fputs(text.c_str(), stdout) < 0 || std::fflush(stdout) != 0) throw Error("cannot write to stdout");
    if (file_ && (std::fputs(text.c_str(), file_) < 0 || std::fflush(file_) != 0))
      throw Error("--csv " + path_ + ": cannot write: " + std::strerror(errno));
  }
  void close() {
    if (!file_) return;
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) throw Error("--csv " + path_ + ": cannot write: " + std::strerror(errno));
  }

 private:
  std::string path_;
  FILE* file_ = nullptr;
};

// Argmax of the logits, lowest id on ties, never `eos` (when given).
int32_t argmax_except(std::span<const float> logits, std::optional<int32_t> eos) {
  return ds4::runtime::argmax_except(logits, eos ? *eos : -1);
}

// The k-th likeliest id (0: the argmax), lowest id first on ties, never
// `eos` (when given).
int32_t kth_likeliest_except(std::span<const float> logits, int k, std::optional<int32_t> eos) {
  if (k == 0) return argmax_except(logits, eos);
  std::vector<int32_t> ids;
  ids.reserve(logits.size());
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id)
    if (!eos || id != *eos) ids.push_back(id);
  const size_t want = std::min(ids.size(), static_cast<size_t>(k) + 1);
  if (want == 0) throw Error("no token to start decode session " + std::to_string(k) + " from");
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(want), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  return ids[want - 1];
}

// --ssd-streaming: the file's read rate through the cache's own reads,
// measured after the walk, and what it makes of decode's reads: the rate
// decode would reach if it did nothing but read its misses.
void report_io_bound(ds4::engine::Engine& engine, uint64_t read_bytes, double tokens, double secs) {
  const double rate = engine.measure_expert_read_rate(kDiskProbeBytes);
  const double per_token = tokens > 0 ? static_cast<double>(read_bytes) / tokens : 0;
  const double measured = secs > 0 ? tokens / secs : 0;
  std::fprintf(stderr, "expert reads: the file gave %.2f GB/s through the cache's reads (%s of experts, after the walk)",
               rate / 1e9, ds4::format_size(kDiskProbeBytes).c_str());
  if (per_token > 0 && rate > 0) {
    const double bound = rate / per_token;
    std::fprintf(stderr, "; decode read %s a token: an I/O bound of %.2f t/s, decode ran at %.2f t/s (%.0f %% of it)",
                 ds4::format_size(static_cast<uint64_t>(per_token)).c_str(), bound, measured, 100 * measured / bound);
  }
  std::fprintf(stderr, "\n");
}

// One frontier's decode probe: `sessions` copies of the session there
// (untimed) decode gen_tokens steps together, one batched evaluation per
// step (timed). Session i's first token is the (i+1)-th likeliest, the rest
// greedy, so session 0 follows exactly the single-session greedy path.
struct DecodeProbe {
  std::vector<std::vector<int32_t>> ids;  // per session
  double secs = 0;
  std::vector<double> read_gbps;
};

DecodeProbe decode_probe(ds4::backend::Backend& backend, const ds4::backend::Session& at_frontier, const Options& o,
                         std::optional<int32_t> eos, ds4::ReadBandwidth* read_probe, int read_every) {
  const auto n = static_cast<size_t>(o.sessions);
  std::vector<std::unique_ptr<ds4::backend::Session>> sessions(n);
  for (auto& s : sessions) s = at_frontier.snapshot();
  DecodeProbe out;
  out.ids.assign(n, {});
  std::vector<int32_t> next(n);
  for (size_t i = 0; i < n; ++i) next[i] = kth_likeliest_except(at_frontier.logits(), static_cast<int>(i), eos);
  std::vector<ds4::backend::Part> parts(n);
  for (size_t i = 0; i < n; ++i) parts[i] = {sessions[i].get(), std::span<const int32_t>(&next[i], 1)};
  for (int step = 0; step < o.gen_tokens; ++step) {
    if (read_probe && step % read_every == 0) out.read_gbps.push_back(read_probe->pass());
    const auto t_step = Clock::now();
    if (step > 0)
      for (size_t i = 0; i < n; ++i) next[i] = argmax_except(sessions[i]->logits(), eos);
    backend.eval(parts);
    out.secs += seconds_since(t_step);
    for (size_t i = 0; i < n; ++i) out.ids[i].push_back(next[i]);
  }
  if (read_probe) out.read_gbps.push_back(read_probe->pass());
  return out;
}

// Per hop, what the route's telemetry moved between two readings.
struct HopDelta {
  double eval_seconds = 0, wait_seconds = 0;
};

std::vector<HopDelta> hop_deltas(const std::optional<ds4::dist::RouteStatus>& a,
                                 const std::optional<ds4::dist::RouteStatus>& b) {
  std::vector<HopDelta> out;
  if (!a || !b) return out;
  for (size_t i = 0; i < b->stages.size() && i < a->stages.size(); ++i)
    out.push_back({b->stages[i].eval_seconds - a->stages[i].eval_seconds,
                   b->stages[i].wait_seconds - a->stages[i].wait_seconds});
  return out;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // KiB on Linux
}

int run(const Options& o) {
  validate(o);
  CsvOut csv(o.csv);

  // Loading (and --warm-weights / --mlock paging the file in) is not timed.
  ds4::engine::EngineOptions eo = o.engine;
  ds4::app::finish_dist_flags(eo, o.dist_layers, o.ctx_alloc.value_or(ctx_needed(o.ctx_max, o.gen_tokens) + 1));
  std::optional<ds4::dist::MpiRuntime> mpi;
  if (o.tensor_parallel) {
    if (!eo.dist_listen.empty()) throw Error("--tensor-parallel takes no --dist-listen (mpirun connects the ranks)");
    mpi.emplace(nullptr, nullptr);
    if (mpi->size() < 2) throw Error("--tensor-parallel needs 2 or more MPI ranks (mpirun -n 2 ds4-bench ...)");
    eo.dist_mpi = &*mpi;
    eo.dist_tensor_parallel = true;
    if (mpi->rank() > 0) {
      ds4::engine::Engine follower(eo);
      follower.follow_tensor_parallel();
      return 0;
    }
    std::fprintf(stderr, "ds4-bench: tensor parallel over %d MPI ranks\n", mpi->size());
  }
  const auto t_load = Clock::now();
  ds4::engine::Engine engine(eo);
  const double load_secs = seconds_since(t_load);
  const std::vector<ds4::dist::StageInfo> hops = ds4::app::wait_for_route(engine, o.dist_wait_seconds);
  const ds4::engine::ModelFacts& facts = engine.facts();
  const PromptTokens prompt = load_prompt(o, engine);
  const auto available = static_cast<int64_t>(prompt.ids.size());

  int64_t ctx_max = o.ctx_max;
  if (available < ctx_max) {
    if (available < o.ctx_start)
      throw Error("--ctx-start " + std::to_string(o.ctx_start) + " is above the " + std::to_string(available) +
                  " tokens " + prompt.source + " gives");
    std::fprintf(stderr, "ds4-bench: note: %s gives %lld tokens; --ctx-max lowered from %lld to %lld\n",
                 prompt.source.c_str(), static_cast<long long>(available), static_cast<long long>(ctx_max),
                 static_cast<long long>(available));
    ctx_max = available;
  }
  const int64_t needed = ctx_needed(ctx_max, o.gen_tokens);
  const int64_t ctx_alloc = o.ctx_alloc.value_or(needed + 1);
  if (ctx_alloc < needed)
    throw Error("--ctx-alloc " + std::to_string(ctx_alloc) + " is too small: the walk needs " +
                std::to_string(needed) + " tokens (--ctx-max " + std::to_string(ctx_max) + " + -n " +
                std::to_string(o.gen_tokens) + ")");
  const std::vector<int64_t> walk = frontiers(o.ctx_start, ctx_max, o.step_incr, o.step_mul);

  const uint64_t file_bytes = facts.file_bytes;
  std::fprintf(stderr, "model: %s, %s\n", o.engine.model_path.c_str(), ds4::format_bytes(file_bytes).c_str());
  std::fprintf(stderr, "threads %d, isa %s, numerics %s, prefill chunk %d\n", o.engine.threads,
               facts.kernel_isa.c_str(), ds4::app::quality(o.engine) ? "quality" : "default", o.engine.prefill_chunk);
  const uint64_t decode_bytes = facts.decode_weight_bytes_per_token;
  std::fprintf(stderr, "decode weight bytes/token: %llu (%s)\n", static_cast<unsigned long long>(decode_bytes),
               ds4::format_size(decode_bytes).c_str());
  std::fprintf(stderr, "prompt: %lld tokens from %s; %zu frontiers %lld..%lld, -n %d, ctx-alloc %lld%s\n",
               static_cast<long long>(available), prompt.source.c_str(), walk.size(),
               static_cast<long long>(walk.front()), static_cast<long long>(walk.back()), o.gen_tokens,
               static_cast<long long>(ctx_alloc), prompt.eos ? "" : "; no EOS id in the model: probes may pick any id");
  std::fflush(stderr);

  // Its buffer is written (untimed) before any timing. Read passes (untimed
  // for decode) come before a probe's first step, after its last and evenly
  // between: the machine's bandwidth over the same minutes.
  std::unique_ptr<ds4::ReadBandwidth> read_probe;
  const int read_every = std::max(1, o.gen_tokens / kReadPassesPerProbe);
  if (const uint64_t bytes = read_bandwidth_bytes(o)) {
    read_probe = std::make_unique<ds4::ReadBandwidth>(static_cast<size_t>(bytes), o.engine.threads);
    std::fprintf(stderr, "read bandwidth: %s buffer, %d threads, %s loads, %d passes around each probe's decode steps\n",
                 ds4::format_size(read_probe->bytes()).c_str(), o.engine.threads, read_probe->isa(),
                 (o.gen_tokens + read_every - 1) / read_every + 1);
  }

  ds4::backend::Backend& backend = engine.backend();
  const std::unique_ptr<ds4::backend::Session> session_ptr = engine.new_session(ctx_alloc);
  ds4::backend::Session& session = *session_ptr;

  if (o.engine.warm_weights || o.engine.mlock || o.engine.huge_pages)
    std::fprintf(stderr, "weights %s: %.3f s\n", o.engine.mlock ? "loaded and locked in RAM" : "paged in", load_secs);
  // What the kernels stream from: 4 KiB pages cost them a TLB miss every 4 KiB.
  const uint64_t huge = facts.huge_page_bytes;
  std::fprintf(stderr, "weights in 2 MiB pages: %s of %s (%.0f %%)\n", ds4::format_size(huge).c_str(),
               ds4::format_size(file_bytes).c_str(), 100.0 * static_cast<double>(huge) / static_cast<double>(file_bytes));

  if (o.warmup) {
    // As llama-bench's warm-up run: the first prefill of a process also pays
    // one-time costs (first touch of the pass buffers, the KV cache and the
    // tile scratch) that a long-running server pays once.
    const auto t_warm = Clock::now();
    backend.eval(session, std::span<const int32_t>(prompt.ids.data(), static_cast<size_t>(walk.front())));
    session.reset();
    std::fprintf(stderr, "warm-up: prefill of %lld tokens in %.3f s (untimed), session reset\n",
                 static_cast<long long>(walk.front()), seconds_since(t_warm));
  }

  const bool streaming = o.engine.ssd_streaming;
  std::string hop_columns;
  for (size_t i = 1; i <= hops.size(); ++i)
    hop_columns += ",hop" + std::to_string(i) + "_eval_ms_per_token,hop" + std::to_string(i) + "_wait_ms_per_token";
  csv.line(std::string(kCsvHeaderStem) + (o.sessions > 1 ? kCsvSessionColumns : "") +
           (streaming ? kCsvStreamingColumns : "") + hop_columns + "\n");
  int64_t done = 0;
  uint64_t decode_read_bytes = 0;  // --ssd-streaming: over every decode probe
  double decode_secs = 0, decode_tokens = 0;
  for (const int64_t frontier : walk) {
    const std::span<const int32_t> interval(prompt.ids.data() + done, static_cast<size_t>(frontier - done));
    const ds4::engine::StreamingStats before_prefill = engine.streaming_stats();
    const auto t_prefill = Clock::now();
    backend.eval(session, interval);
    const double prefill_secs = seconds_since(t_prefill);
    done = frontier;

    const auto route_before = engine.route();
    const ds4::engine::StreamingStats before_decode = engine.streaming_stats();
    DecodeProbe probe = decode_probe(backend, session, o, prompt.eos, read_probe.get(), read_every);
    const std::vector<HopDelta> hop = hop_deltas(route_before, engine.route());
    const StreamingDelta pre = streaming_delta(before_prefill, before_decode);
    const StreamingDelta dec = streaming_delta(before_decode, engine.streaming_stats());
    const double decoded = static_cast<double>(o.gen_tokens) * o.sessions;
    const double gen_secs = probe.secs;
    std::vector<double>& read_gbps = probe.read_gbps;

    // The effective weight bandwidth of decode: what each step reads / its time
    // (one session's step; with several the steps read more experts).
    const double gen_gbps = gen_secs > 0 ? static_cast<double>(decode_bytes) * o.gen_tokens / gen_secs / 1e9 : 0.0;
    if (o.sessions == 1) {
      std::fprintf(stderr,
                   "frontier %lld: prefill %zu tokens in %.3f s, decode %d tokens in %.3f s (%.2f GB/s of weights)\n",
                   static_cast<long long>(frontier), interval.size(), prefill_secs, o.gen_tokens, gen_secs, gen_gbps);
    } else {
      std::fprintf(stderr,
                   "frontier %lld: prefill %zu tokens in %.3f s, decode %d steps of %d sessions in %.3f s "
                   "(%.2f t/s each, %.2f t/s in all)\n",
                   static_cast<long long>(frontier), interval.size(), prefill_secs, o.gen_tokens, o.sessions,
                   gen_secs, per_second(o.gen_tokens, gen_secs),
                   per_second(static_cast<int64_t>(o.gen_tokens) * o.sessions, gen_secs));
    }
    if (read_probe) {
      std::sort(read_gbps.begin(), read_gbps.end());
      const size_t n = read_gbps.size();
      const double median = n % 2 ? read_gbps[n / 2] : (read_gbps[n / 2 - 1] + read_gbps[n / 2]) / 2;
      std::fprintf(stderr,
                   "frontier %lld: read bandwidth %.2f GB/s (median of %zu passes, %.2f..%.2f); decode weights at "
                   "%.0f %% of it\n",
                   static_cast<long long>(frontier), median, n, read_gbps.front(), read_gbps.back(),
                   median > 0 ? 100.0 * gen_gbps / median : 0.0);
    }
    if (streaming) {
      std::fprintf(stderr,
                   "frontier %lld: experts: prefill %.1f %% cached, %.1f %% prefetched, %llu read when needed, %s "
                   "read, %.3f s waited; decode %.1f %% cached, %.1f %% prefetched, %.1f %% read when needed, %s read "
                   "per token, %.1f ms a token waited\n",
                   static_cast<long long>(frontier), 100 * pre.share(pre.hits), 100 * pre.share(pre.prefetch_hits),
                   static_cast<unsigned long long>(pre.misses), ds4::format_size(pre.bytes).c_str(), pre.seconds,
                   100 * dec.share(dec.hits), 100 * dec.share(dec.prefetch_hits), 100 * dec.share(dec.misses),
                   ds4::format_size(static_cast<uint64_t>(static_cast<double>(dec.bytes) / decoded)).c_str(),
                   1e3 * dec.seconds / decoded);
      decode_read_bytes += dec.bytes;
      decode_secs += gen_secs;
      decode_tokens += decoded;
    }
    if (o.print_gen_tokens) {
      std::fprintf(stderr, "gen_ids %lld %s\n", static_cast<long long>(frontier), json_ids(probe.ids[0]).c_str());
      for (size_t i = 1; i < probe.ids.size(); ++i)
        std::fprintf(stderr, "gen_ids_session %zu %lld %s\n", i, static_cast<long long>(frontier),
                     json_ids(probe.ids[i]).c_str());
    }
    char row[256];
    int len = std::snprintf(row, sizeof row, "%lld,%lld,%.2f,%d,%.2f,%llu", static_cast<long long>(frontier),
                            static_cast<long long>(interval.size()),
                            per_second(static_cast<int64_t>(interval.size()), prefill_secs), o.gen_tokens,
                            per_second(o.gen_tokens, gen_secs), static_cast<unsigned long long>(session.state_bytes()));
    if (o.sessions > 1)
      len += std::snprintf(row + len, sizeof row - static_cast<size_t>(len), ",%d,%.2f", o.sessions,
                           per_second(static_cast<int64_t>(o.gen_tokens) * o.sessions, gen_secs));
    if (streaming)
      len += std::snprintf(row + len, sizeof row - static_cast<size_t>(len), ",%.4f,%.4f,%.0f,%.2f",
                           dec.share(dec.hits), dec.share(dec.prefetch_hits), static_cast<double>(dec.bytes) / decoded,
                           1e3 * dec.seconds / decoded);
    std::string hop_values;
    for (size_t i = 0; i < hops.size(); ++i) {
      const HopDelta d = i < hop.size() ? hop[i] : HopDelta{};
      char cell[64];
      std::snprintf(cell, sizeof cell, ",%.3f,%.3f", 1e3 * d.eval_seconds / o.gen_tokens, 1e3 * d.wait_seconds / o.gen_tokens);
      hop_values += cell;
      std::fprintf(stderr, "frontier %lld: hop %zu (layers %s): decode %.3f ms evaluating + %.3f ms transfer and "
                   "queueing a step\n", static_cast<long long>(frontier), i + 1,
                   ds4::dist::layer_range_text(hops[i].begin, hops[i].end).c_str(), 1e3 * d.eval_seconds / o.gen_tokens,
                   1e3 * d.wait_seconds / o.gen_tokens);
    }
    csv.line(std::string(row) + hop_values + "\n");
  }
  csv.close();
  if (streaming) report_io_bound(engine, decode_read_bytes, decode_tokens, decode_secs);
  if (!o.record_expert_usage.empty()) {
    const std::vector<ds4::backend::ExpertUse> usage = engine.expert_usage();
    ds4::backend::write_hot_list(o.record_expert_usage, usage);
    std::fprintf(stderr, "expert usage: %zu experts selected, written to %s\n", usage.size(),
                 o.record_expert_usage.c_str());
  }

  std::fprintf(stderr, "peak RSS: %s, model file %s\n", ds4::format_bytes(peak_rss_bytes()).c_str(),
               ds4::format_bytes(file_bytes).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // CLI11 takes only one-letter names after a single dash: -sys is --system.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i] == "-sys") args[i] = "--system";
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());

  CLI::App app{"Prefill and decode speed of DeepSeek V4 at growing context: one CSV row per frontier.", "ds4-bench"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", ds4::version_line("ds4-bench"), "Print the version and git commit and exit");
  Options o;
  o.engine.threads = ds4::default_thread_count();

  ds4::app::add_engine_flags(app, o.engine, "Model GGUF file")->required();
  app.add_option("--prompt-file", o.prompt_file, "Text to walk through: BOS + its tokens (no chat template)");
  app.add_option("--chat-prompt-file", o.chat_prompt_file,
                 "Text rendered as one user message (thinking off), with -sys as system prompt");
  app.add_option("--tokens-file", o.tokens_file, "JSON array of token ids to walk through, used as is");
  app.add_option("--system", o.system, "System prompt for --chat-prompt-file (also -sys)");
  app.add_option("--ctx-start", o.ctx_start, "First frontier (tokens)")->capture_default_str();
  app.add_option("--ctx-max", o.ctx_max, "Last frontier; lowered to the tokens the prompt gives")
      ->capture_default_str();
  app.add_option("--ctx-alloc", o.ctx_alloc, "Session context size (default: ctx-max + gen-tokens + 1)");
  app.add_option("--step-incr", o.step_incr, "Next frontier = previous + this")->capture_default_str();
  app.add_option("--step-mul", o.step_mul, "Next frontier = round(previous * this) (> 1; replaces --step-incr)");
  app.add_option("-n,--gen-tokens", o.gen_tokens, "Greedy tokens decoded (and timed) at every frontier")
      ->capture_default_str();
  app.add_option("--sessions", o.sessions,
                 "Decode this many sessions together at each frontier, one batched step for all (session i starts "
                 "from the (i+1)-th likeliest token, then greedy); adds the CSV columns sessions, aggregate_gen_tps")
      ->capture_default_str();
  app.add_option("--csv", o.csv, "Also write the CSV to this file");
  app.add_flag("--warmup", o.warmup,
               "Before the walk, prefill the first frontier once untimed and reset the session (as llama-bench's warm-up)");
  app.add_flag_callback(
      "--cpu", [&o] { o.engine.backend = "cpu"; }, "CPU backend (the same as --backend cpu)");
  ds4::app::add_backend_flags(app, o.engine);
  app.add_option("--read-bandwidth", o.read_bandwidth,
                 "Memory-read bandwidth, measured between decode steps over a buffer of this size (k/m/g; e.g. "
                 "2g, beyond the last-level cache) with -t threads; printed beside decode's weight bandwidth");
  app.add_option("--record-expert-usage", o.record_expert_usage,
                 "Write every routed expert's selections over the run to this file, most selected first: a hot "
                 "list for --ssd-streaming-hotlist");
  ds4::app::add_dist_flags(app, o.engine, &o.dist_layers);
  app.add_option("--dist-wait", o.dist_wait_seconds,
                 "with --dist-listen: seconds to wait for workers to serve every layer before the walk")
      ->capture_default_str();
  app.add_flag("--tensor-parallel", o.tensor_parallel,
               "under mpirun: every rank evaluates every layer with its share of the weights (routed expert e on "
               "rank e % K, the vocab head by rows); rank 0 prints");
  app.add_flag("--print-gen-tokens", o.print_gen_tokens, "Print each frontier's generated ids on stderr")->group("");

  return ds4::app::parse_and_run(app, static_cast<int>(arg_ptrs.size()), arg_ptrs.data(), "ds4-bench",
                                 [&o] { return run(o); });
}
