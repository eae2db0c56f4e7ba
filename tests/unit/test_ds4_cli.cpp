// The ds4 command line, as outside checks use it: --dump-logits files (size,
// teacher forcing, independence from chunking and threads), --greedy on
// stdout, sessions saved in one process and continued in another, the memory
// report and the peak RSS line on stderr, --mlock and --warm-weights (same
// logits, every page of the file resident), and one "ds4: ..." line with exit
// status 1 and no output file for every bad input.
#include <gtest/gtest.h>

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

#ifndef DS4_BIN_DIR
#error "DS4_BIN_DIR must be defined"
#endif

namespace ds4 {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

// One tiny ds4-q2 model per test program.
const test::SyntheticModel& tiny() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 7);
  return m;
}
int n_vocab() { return static_cast<int>(tiny().hparams().n_vocab); }

test::ProcessResult ds4(std::vector<std::string> args) {
  args.insert(args.begin(), {"-m", tiny().path()});
  return test::run_app(DS4_BIN_DIR, "ds4", args);
}

// Deterministic ids in [0, n_vocab).
std::vector<int32_t> make_tokens(size_t n, uint32_t seed = 1) {
  std::vector<int32_t> t(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab()));
  }
  return t;
}

std::string write_tokens(const TempDir& dir, const std::string& name, const std::vector<int32_t>& t) {
  const std::string p = dir.file(name);
  test::write_text(p, nlohmann::json(t).dump());
  return p;
}

std::vector<float> read_floats(const std::string& path) {
  const std::vector<uint8_t> b = test::read_bytes(path);
  EXPECT_EQ(b.size() % 4, 0u);
  std::vector<float> f(b.size() / 4);
  if (!f.empty()) std::memcpy(f.data(), b.data(), f.size() * 4);  // an empty file: no rows (and null data)
  return f;
}

// Runs --dump-logits over `t` with extra args; the rows, n x n_vocab.
std::vector<float> dump(const TempDir& dir, const std::vector<int32_t>& t, std::vector<std::string> extra = {}) {
  static int counter = 0;
  const std::string id = std::to_string(counter++);
  const std::string tok = write_tokens(dir, "dump" + id + ".json", t), out = dir.file("dump" + id + ".bin");
  std::vector<std::string> args = {"--tokens-file", tok, "--dump-logits", out};
  args.insert(args.end(), extra.begin(), extra.end());
  const test::ProcessResult r = ds4(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  return read_floats(out);
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

int argmax(const float* row) {
  int best = 0;
  for (int i = 1; i < n_vocab(); ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

std::vector<int32_t> parse_ids(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_TRUE(j.is_array());
  return j.get<std::vector<int32_t>>();
}

TEST(Ds4Cli, DumpLogitsHasOneFiniteRowPerToken) {
  TempDir dir;
  const std::vector<float> rows = dump(dir, make_tokens(30), {"--threads", "2"});
  ASSERT_EQ(rows.size(), 30u * static_cast<size_t>(n_vocab()));
  for (float v : rows) ASSERT_TRUE(std::isfinite(v));
  // Rows differ from each other (the positions are really evaluated).
  EXPECT_FALSE(same_bits(rows.data(), rows.data() + n_vocab(), static_cast<size_t>(n_vocab())));
  // Only the output file is left next to the inputs (no temporary).
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 2u);
}

TEST(Ds4Cli, RowsAreTeacherForcedPrefixRuns) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(30, 2);
  const std::vector<float> all = dump(dir, t, {"--threads", "2"});
  const std::vector<float> prefix = dump(dir, std::vector<int32_t>(t.begin(), t.begin() + 10), {"--threads", "2"});
  ASSERT_EQ(all.size(), 30u * static_cast<size_t>(n_vocab()));
  ASSERT_EQ(prefix.size(), 10u * static_cast<size_t>(n_vocab()));
  EXPECT_TRUE(same_bits(all.data(), prefix.data(), prefix.size()));
}

// The memory report counts cached rows in the storage of the numerics in
// use: f16 by default (tiny preset: 388 bytes a token), f32 with --quality.
TEST(Ds4Cli, MemoryReportCountsTheKvStorageOfTheNumerics) {
  TempDir dir;
  const std::string tok = write_tokens(dir, "t.json", make_tokens(5, 8));
  const test::ProcessResult d = ds4({"--tokens-file", tok, "--greedy", "1", "--threads", "2"});
  const test::ProcessResult q = ds4({"--tokens-file", tok, "--greedy", "1", "--threads", "2", "--quality"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(d.err.find("kv state per token   388.0 bytes (f16, compressed + indexer rows)"), std::string::npos)
      << d.err;
  EXPECT_NE(q.err.find("kv state per token   776.0 bytes (f32, compressed + indexer rows)"), std::string::npos)
      << q.err;
}

TEST(Ds4Cli, PrefillChunkDoesNotChangeQualityLogits) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(30, 3);
  const std::vector<float> whole = dump(dir, t, {"--quality", "--threads", "2"});
  const std::vector<float> by7 = dump(dir, t, {"--quality", "--threads", "2", "--prefill-chunk", "7"});
  const std::vector<float> by29 = dump(dir, t, {"--quality", "--threads", "2", "--prefill-chunk", "29"});
  ASSERT_EQ(whole.size(), 30u * static_cast<size_t>(n_vocab()));
  ASSERT_EQ(by7.size(), whole.size());
  ASSERT_EQ(by29.size(), whole.size());
  EXPECT_TRUE(same_bits(whole.data(), by7.data(), whole.size()));
  EXPECT_TRUE(same_bits(whole.data(), by29.data(), whole.size()));
  // And --quality is a different computation from the default.
  const std::vector<float> def = dump(dir, t, {"--threads", "2"});
  ASSERT_EQ(def.size(), whole.size());
  EXPECT_FALSE(same_bits(whole.data(), def.data(), whole.size()));
}

TEST(Ds4Cli, ThreadCountDoesNotChangeLogits) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(24, 4);
  const std::vector<float> one = dump(dir, t, {"--threads", "1"});
  const std::vector<float> two = dump(dir, t, {"--threads", "2"});
  ASSERT_EQ(one.size(), 24u * static_cast<size_t>(n_vocab()));
  ASSERT_EQ(two.size(), one.size());
  EXPECT_TRUE(same_bits(one.data(), two.data(), one.size()));
}

TEST(Ds4Cli, GreedyPrintsOneJsonLineThatFollowsTheArgmax) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(20, 5);
  const std::string tok = write_tokens(dir, "t.json", t);
  const test::ProcessResult r = ds4({"--tokens-file", tok, "--greedy", "6", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stdout: exactly one line, a JSON array of 6 ids in range.
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
  const std::vector<int32_t> ids = parse_ids(r.out);
  ASSERT_EQ(ids.size(), 6u);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, n_vocab());
  }
  // stderr: the memory report and the speed lines.
  for (const char* s : {"memory:", "model file", "weights", "kv state per token", "raw window", "compressed",
                        "indexer", "frontiers", "threads 2", "numerics default", "prefill: 20 tokens",
                        "decode: 6 tokens", "tokens/s"})
    EXPECT_NE(r.err.find(s), std::string::npos) << s << "\n" << r.err;

  // Teacher forcing over the tokens and the first 5 generated ids: each
  // generated id is the argmax of the row before it.
  std::vector<int32_t> forced = t;
  forced.insert(forced.end(), ids.begin(), ids.end() - 1);
  const std::vector<float> rows = dump(dir, forced, {"--threads", "2"});
  ASSERT_EQ(rows.size(), forced.size() * static_cast<size_t>(n_vocab()));
  for (size_t k = 0; k < ids.size(); ++k)
    EXPECT_EQ(ids[k], argmax(rows.data() + (t.size() - 1 + k) * static_cast<size_t>(n_vocab()))) << "id " << k;
}

TEST(Ds4Cli, SessionSavedInOneProcessContinuesInAnother) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(60, 6);
  const std::vector<float> full = dump(dir, t, {"--threads", "2"});
  ASSERT_EQ(full.size(), 60u * static_cast<size_t>(n_vocab()));

  const std::string first = write_tokens(dir, "first.json", std::vector<int32_t>(t.begin(), t.begin() + 40));
  const std::string rest = write_tokens(dir, "rest.json", std::vector<int32_t>(t.begin() + 40, t.end()));
  const std::string ses = dir.file("s.ds4s"), out = dir.file("rest.bin");
  test::ProcessResult r = ds4({"--tokens-file", first, "--save-session", ses, "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_TRUE(fs::exists(ses));

  r = ds4({"--load-session", ses, "--tokens-file", rest, "--dump-logits", out, "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> cont = read_floats(out);
  ASSERT_EQ(cont.size(), 20u * static_cast<size_t>(n_vocab()));
  EXPECT_TRUE(same_bits(cont.data(), full.data() + 40 * static_cast<size_t>(n_vocab()), cont.size()));

  // --greedy straight from a loaded session (no --tokens-file) continues the
  // 40 saved tokens: its first id is the argmax after token 39.
  r = ds4({"--load-session", ses, "--greedy", "3", "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<int32_t> ids = parse_ids(r.out);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], argmax(full.data() + 39 * static_cast<size_t>(n_vocab())));
}

// ---- errors: exit 1, one "ds4: " line naming the problem, nothing written --

struct BadRun {
  test::ProcessResult r;
  std::set<std::string> files_after;
};

std::set<std::string> listing(const TempDir& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename().string());
  return names;
}

void expect_one_error_line(const test::ProcessResult& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.exit_code, 1) << r.describe() << " " << r.err;
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  EXPECT_EQ(r.err.rfind("ds4: ", 0), 0u) << r.err;
  for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << n << " not in: " << r.err;
}

// Writes `json` as T.json, runs ds4 with --tokens-file T.json --dump-logits
// out.bin plus extra, and checks the error and that no file appeared.
void expect_tokens_error(const std::string& json, const std::vector<std::string>& extra,
                         const std::vector<std::string>& needles) {
  TempDir dir;
  const std::string tok = dir.file("T.json");
  test::write_text(tok, json);
  std::vector<std::string> args = {"--tokens-file", tok, "--dump-logits", dir.file("out.bin")};
  args.insert(args.end(), extra.begin(), extra.end());
  const test::ProcessResult r = ds4(args);
  SCOPED_TRACE(json);
  expect_one_error_line(r, needles);
  EXPECT_EQ(listing(dir), std::set<std::string>{"T.json"});
}

TEST(Ds4CliErrors, TooManyTokensForCtx) {
  expect_tokens_error(nlohmann::json(make_tokens(30)).dump(), {"--ctx", "20"}, {"30 tokens do not fit --ctx 20"});
}

TEST(Ds4CliErrors, TokenIdsOutsideTheVocabulary) {
  const std::string v = std::to_string(n_vocab());
  expect_tokens_error("[1, 2, " + v + "]", {}, {"token 2", v});
  expect_tokens_error("[1, -5, 3]", {}, {"token 1", "-5"});
}

TEST(Ds4CliErrors, TokensFileThatIsNotAnArrayOfInt32) {
  expect_tokens_error("[1, 2", {}, {"T.json", "JSON"});
  expect_tokens_error("{\"a\": 1}", {}, {"T.json", "array"});
  expect_tokens_error("[1, 2.5]", {}, {"element 1", "2.5"});
  expect_tokens_error("[1, \"7\"]", {}, {"element 1", "string"});
  expect_tokens_error("[2147483648]", {}, {"element 0", "2147483648"});
  expect_tokens_error("[-2147483649]", {}, {"element 0", "-2147483649"});
  expect_tokens_error("", {}, {"T.json", "JSON"});
  expect_tokens_error("[]", {}, {"T.json", "empty"});
}

TEST(Ds4CliErrors, BadOptionValues) {
  const std::string ok = nlohmann::json(make_tokens(4)).dump();
  expect_tokens_error(ok, {"--threads", "0"}, {"--threads"});
  expect_tokens_error(ok, {"--prefill-chunk", "0"}, {"--prefill-chunk"});
  expect_tokens_error(ok, {"--ctx", "0"}, {"--ctx"});
  expect_tokens_error(ok, {"--greedy", "0"}, {"--greedy"});
  expect_tokens_error(ok, {"--threads", "many"}, {"--threads"});
  expect_tokens_error(ok, {"--no-such-option"}, {"--no-such-option"});
  // The GPU options need the GPU backend.
  expect_tokens_error(ok, {"--gpu-devices", "0"}, {"--gpu-devices", "--backend cuda"});
  expect_tokens_error(ok, {"--gpu-vram", "auto"}, {"--gpu-vram", "--backend cuda"});
  expect_tokens_error(ok, {"--gpu-tensor-parallel"}, {"--gpu-tensor-parallel", "--backend cuda"});
  expect_tokens_error(ok, {"--gpu-prefill", "f16"}, {"--gpu-prefill", "--backend cuda"});
  expect_tokens_error(ok, {"--backend", "cuda", "--gpu-prefill", "fp8"}, {"--gpu-prefill", "fp8"});
}

TEST(Ds4CliErrors, MissingOrConflictingOptions) {
  TempDir dir;
  const std::string tok = write_tokens(dir, "T.json", make_tokens(4));
  const std::set<std::string> before = listing(dir);
  expect_one_error_line(ds4({"--dump-logits", dir.file("out.bin")}), {"--dump-logits", "--tokens-file"});
  expect_one_error_line(ds4({"--tokens-file", tok}), {"nothing to do"});
  expect_one_error_line(ds4({"--greedy", "2"}), {"--tokens-file"});
  expect_one_error_line(
      ds4({"--tokens-file", tok, "--dump-logits", dir.file("x"), "--save-session", dir.file("x")}),
      {"conflicting", "--dump-logits", "--save-session"});
  expect_one_error_line(ds4({"--tokens-file", tok, "--dump-logits", tok}), {"conflicting"});
  expect_one_error_line(test::run_app(DS4_BIN_DIR, "ds4", {"--tokens-file", tok, "--greedy", "1"}), {"--model"});
  expect_one_error_line(ds4({"--tokens-file", tok, "--greedy", "1", "--load-session", dir.file("none.ds4s")}),
                        {"none.ds4s"});
  expect_one_error_line(ds4({"--tokens-file", tok, "--dump-logits", dir.file("no/such/folder/out.bin")}),
                        {"no/such/folder/out.bin"});
  expect_one_error_line(ds4({"--tokens-file", tok, "--save-session", dir.file("no/such/folder/s.ds4s")}),
                        {"no/such/folder/s.ds4s"});
  EXPECT_EQ(listing(dir), before);
}

TEST(Ds4CliErrors, MissingDirectoryOrTruncatedModel) {
  TempDir dir;
  const std::string tok = write_tokens(dir, "T.json", make_tokens(4));
  const auto run_model = [&](const std::string& m) {
    return test::run_app(DS4_BIN_DIR, "ds4", {"-m", m, "--tokens-file", tok, "--dump-logits", dir.file("out.bin")});
  };
  expect_one_error_line(run_model(dir.file("missing.gguf")), {"missing.gguf"});
  expect_one_error_line(run_model(dir.path().string()), {"directory"});
  const std::vector<uint8_t> bytes = test::read_bytes(tiny().path());
  const std::string cut = dir.file("cut.gguf");
  test::write_bytes(cut, std::span<const uint8_t>(bytes.data(), bytes.size() / 2));
  expect_one_error_line(run_model(cut), {"cut.gguf", "truncated"});
  EXPECT_EQ(listing(dir), (std::set<std::string>{"T.json", "cut.gguf"}));
}

// The two sizes of "peak RSS: A (model file B...)" in bytes; {0, 0} when absent.
std::pair<double, double> peak_rss_line(const std::string& err) {
  static const std::regex line(R"(peak RSS: ([0-9.]+) (bytes|KiB|MiB|GiB) \(model file ([0-9.]+) (bytes|KiB|MiB|GiB))");
  const auto bytes = [](const std::string& v, const std::string& unit) {
    double scale = 1;
    for (const char* u : {"KiB", "MiB", "GiB"}) {
      scale *= 1024;
      if (unit == u) return std::stod(v) * scale;
    }
    return std::stod(v);
  };
  std::smatch m;
  if (!std::regex_search(err, m, line)) return {0, 0};
  return {bytes(m[1], m[2]), bytes(m[3], m[4])};
}

bool may_lock(uint64_t bytes) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) == 0 &&
      (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0)
    return true;
  rlimit limit{};
  return ::getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= bytes);
}

// Every run that evaluates the model ends with the peak RSS against the file
// size; the weights are used in place, so a run that maps every page
// (--warm-weights, --huge-pages, --mlock) holds at least the file, and the logits do not change.
TEST(Ds4Cli, MlockWarmWeightsAndHugePagesKeepTheLogitsAndReportPeakRss) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(12, 9);
  const std::string tok = write_tokens(dir, "t.json", t);
  const double file_bytes = static_cast<double>(fs::file_size(tiny().path()));
  const auto run = [&](const std::string& flag, const std::string& out) {
    std::vector<std::string> args = {"--tokens-file", tok, "--dump-logits", dir.file(out), "--threads", "2"};
    if (!flag.empty()) args.push_back(flag);
    return ds4(args);
  };

  const test::ProcessResult plain = run("", "plain.bin");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto [plain_rss, plain_file] = peak_rss_line(plain.err);
  EXPECT_GT(plain_rss, 0) << plain.err;
  EXPECT_NEAR(plain_file, file_bytes, file_bytes * 0.005) << plain.err;
  EXPECT_EQ(plain.err.find("locked"), std::string::npos) << plain.err;
  const std::vector<float> base = read_floats(dir.file("plain.bin"));
  ASSERT_EQ(base.size(), t.size() * static_cast<size_t>(n_vocab()));

  // A run that maps every page holds at least the file and gives the same logits.
  const auto expect_all_paged_same_logits = [&](const test::ProcessResult& r, const std::string& out) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GE(peak_rss_line(r.err).first, file_bytes * 0.99) << r.err;
    const std::vector<float> rows = read_floats(dir.file(out));
    ASSERT_EQ(rows.size(), base.size());
    EXPECT_TRUE(same_bits(rows.data(), base.data(), base.size())) << out;
  };
  expect_all_paged_same_logits(run("--warm-weights", "warm.bin"), "warm.bin");
  // --huge-pages warms too (and may read the file again).
  expect_all_paged_same_logits(run("--huge-pages", "huge.bin"), "huge.bin");

  const test::ProcessResult locked = run("--mlock", "locked.bin");
  if (!may_lock(static_cast<uint64_t>(file_bytes))) {
    // This environment's ulimit -l is below the file: the failure must say so.
    expect_one_error_line(locked, {"cannot lock", "ulimit -l", "--mlock"});
    return;
  }
  expect_all_paged_same_logits(locked, "locked.bin");
  EXPECT_NE(locked.err.find("locked by --mlock)"), std::string::npos) << locked.err;
  EXPECT_NE(locked.err.find("locked in RAM"), std::string::npos) << locked.err;
}

// ds4 args run from a forked child that cannot lock memory past `limit`
// bytes (or the hard limit, when lower): CAP_IPC_LOCK leaves the bounding set (so a root exec does not get it
// back; unprivileged runs never have it) and RLIMIT_MEMLOCK is lowered.
test::ProcessResult ds4_under_memlock_limit(const std::vector<std::string>& args, rlim_t limit) {
  std::vector<std::string> all = {"-m", tiny().path()};  // the model is made here, not in the child
  all.insert(all.end(), args.begin(), args.end());
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    (void)::prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0);
    rlimit low{};
    ::getrlimit(RLIMIT_MEMLOCK, &low);  // unprivileged, it may only go down
    if (low.rlim_max == RLIM_INFINITY || low.rlim_max > limit) low.rlim_max = limit;
    low.rlim_cur = low.rlim_max;
    std::string msg;
    if (::setrlimit(RLIMIT_MEMLOCK, &low) != 0) {
      msg = "-2\nsetrlimit failed";
    } else {
      const test::ProcessResult r = test::run_app(DS4_BIN_DIR, "ds4", all);
      msg = std::to_string(r.exit_code) + "\n" + r.err;
    }
    const ssize_t n = ::write(fds[1], msg.data(), msg.size());
    ::_exit(n == static_cast<ssize_t>(msg.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[1024];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  test::ProcessResult r;
  const size_t nl = msg.find('\n');
  if (nl == std::string::npos) return r;
  r.exit_code = std::stoi(msg.substr(0, nl));
  r.err = msg.substr(nl + 1);
  return r;
}

TEST(Ds4CliErrors, MlockPastTheLockedMemoryLimit) {
  TempDir dir;
  const std::string tok = write_tokens(dir, "T.json", make_tokens(4));
  const test::ProcessResult r =
      ds4_under_memlock_limit({"--tokens-file", tok, "--dump-logits", dir.file("out.bin"), "--mlock"}, 64 * 1024);
  rlimit hard{};
  ::getrlimit(RLIMIT_MEMLOCK, &hard);
  const std::string limit = hard.rlim_max == RLIM_INFINITY || hard.rlim_max >= 64 * 1024 ? "64.00 KiB" : "";
  expect_one_error_line(r, {tiny().path(), "cannot lock", "of weights in RAM", "the locked-memory limit is " + limit,
                            "(ulimit -l)", "run without --mlock"});
  EXPECT_EQ(listing(dir), std::set<std::string>{"T.json"});
}

// --ssd-streaming (issue 24): the routed experts read from the file into a
// cache; the logits of every row are the resident run's, at 1 expert, a few
// and the automatic size, and the flags' mistakes are one error line.
TEST(Ds4Cli, SsdStreamingKeepsTheLogits) {
  TempDir dir;
  const std::vector<int32_t> t = make_tokens(14, 21);
  const std::vector<float> base = dump(dir, t, {"--threads", "2"});
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--ssd-streaming", "--ssd-streaming-cache-experts", "1"},
        std::vector<std::string>{"--ssd-streaming", "--ssd-streaming-cache-experts", "5"},
        std::vector<std::string>{"--ssd-streaming", "--ssd-streaming-cache-experts", "1MB"},
        std::vector<std::string>{"--ssd-streaming"}}) {
    std::vector<std::string> args = extra;
    args.insert(args.end(), {"--threads", "2"});
    const std::vector<float> rows = dump(dir, t, args);
    ASSERT_EQ(rows.size(), base.size()) << extra.back();
    EXPECT_TRUE(same_bits(rows.data(), base.data(), base.size())) << extra.back();
  }
  const std::string tok = write_tokens(dir, "s.json", t);
  const test::ProcessResult r =
      ds4({"--tokens-file", tok, "--greedy", "2", "--ssd-streaming", "--ssd-streaming-cache-experts", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("expert cache         3 experts"), std::string::npos) << r.err;

  rlimit memlock{};
  ::getrlimit(RLIMIT_MEMLOCK, &memlock);
  if (::geteuid() == 0 || memlock.rlim_cur == RLIM_INFINITY) {
    EXPECT_NE(r.err.find("(the resident weights, --ssd-streaming)"), std::string::npos)
        << "locked where the limit allows: " << r.err;
  }

  // Under a locked-memory limit too small for them they stay pageable: a warning, the same logits.
  const std::string out = dir.file("limited.bin");
  const test::ProcessResult limited =
      ds4_under_memlock_limit({"--tokens-file", tok, "--dump-logits", out, "--ssd-streaming", "--threads", "2"}, 64 * 1024);
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_NE(limited.err.find("the resident weights stay pageable"), std::string::npos) << limited.err;
  EXPECT_NE(limited.err.find("(ulimit -l)"), std::string::npos) << limited.err;
  EXPECT_EQ(limited.err.find("run without --mlock"), std::string::npos) << limited.err;
  const std::vector<float> rows = read_floats(out);
  ASSERT_EQ(rows.size(), t.size() * static_cast<size_t>(n_vocab()));
  EXPECT_TRUE(same_bits(rows.data(), dump(dir, t, {"--threads", "2"}).data(), rows.size()));

  expect_one_error_line(ds4({"--tokens-file", tok, "--greedy", "1", "--ssd-streaming-cache-experts", "3"}),
                        {"--ssd-streaming-cache-experts needs --ssd-streaming"});
  expect_one_error_line(
      ds4({"--tokens-file", tok, "--greedy", "1", "--ssd-streaming", "--ssd-streaming-cache-experts", "lots"}),
      {"--ssd-streaming-cache-experts", "lots"});
  expect_one_error_line(
      ds4({"--tokens-file", tok, "--greedy", "1", "--ssd-streaming", "--ssd-streaming-cache-experts", "1k"}),
      {"holds no expert"});
}

TEST(Ds4Cli, HelpDocumentsTheDefaults) {
  const test::ProcessResult r = test::run_app(DS4_BIN_DIR, "ds4", {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* s : {"--tokens-file", "--dump-logits", "--greedy", "--save-session", "--load-session", "--quality",
                        "--threads", "--ctx", "32768", "--prefill-chunk", "4096", "--mlock", "--warm-weights", "--huge-pages"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace ds4
