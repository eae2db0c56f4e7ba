// Pipeline parallel inference over the ZeroMQ transport (issue 25), in one
// process: the coordinator's PipelineBackend and workers on threads, talking
// CURVE over TCP on 127.0.0.1. The truth is one process evaluating every
// layer (itself held to llama.cpp by the reference tests): logits after a
// prompt (every row), after each decode step, for batched sessions, with
// two and three stages and in both numerics, must be bit-identical. Then
// the door: a wrong key never joins, a wrong model or overlapping layers are
// refused naming the mismatch; and faults: a worker that stops makes the
// next evaluation fail as Unavailable within the heartbeat timeout, and a
// worker that comes back serves the same sessions again (replayed).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_split.h"
#include "dist/coordinator.h"
#include "dist/curve_key.h"
#include "dist/messages.h"
#include "dist/pipeline_backend.h"
#include "dist/worker.h"
#include "dist/zmq_transport.h"
#include "model/deepseek4_fingerprint.h"
#include "model/deepseek4_model.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4::dist {
namespace {

using backend::Numerics;
using test::random_tokens;
using namespace std::chrono_literals;

constexpr int64_t kCtx = 256;

// A worker on a thread with its own CPU backend over `layers`.
class WorkerThread {
 public:
  WorkerThread(const model::Deepseek4Model& m, Numerics numerics, const std::string& endpoint, const CurveKey& key,
               backend::LayerRange layers, std::array<uint8_t, 32> fingerprint, int64_t n_ctx = kCtx)
      : forward_(m, numerics, nullptr) {
    forward_.set_prefill_chunk(7);
    WorkerOptions o;
    o.layers = layers;
    o.n_ctx = n_ctx;
    o.name = "test-" + std::to_string(layers.begin);
    o.fingerprint = fingerprint;
    o.inline_budget = 60s;  // however slow this machine: the inline path is what the tests check
    worker_ = std::make_unique<Worker>(forward_, make_zmq_link(endpoint, key), o);
    thread_ = std::thread([this] {
      try {
        worker_->run();
      } catch (const Error& e) {
        std::lock_guard lock(mutex_);
        error_ = e.what();
      }
    });
  }
  ~WorkerThread() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    worker_->stop();
    thread_.join();
  }
  // Waits for run() to end by itself (a refusal) at most `timeout`.
  std::string error_after(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard lock(mutex_);
        if (!error_.empty()) return error_;
      }
      std::this_thread::sleep_for(10ms);
    }
    return "";
  }
  const Worker& worker() const { return *worker_; }

 private:
  cpu::Forward forward_;
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
  std::mutex mutex_;
  std::string error_;
};

struct Cluster {
  CurveKey key = generate_curve_key();
  std::unique_ptr<Coordinator> coordinator;
  std::string endpoint;
  std::vector<std::string> log;
  std::mutex log_mutex;

  Cluster(const backend::Backend& local, std::array<uint8_t, 32> fp, int first_remote) {
    auto hub = make_zmq_hub("tcp://127.0.0.1:*", key);
    endpoint = hub->endpoint();
    CoordinatorOptions o;
    o.log = [this](const std::string& line) {
      std::lock_guard lock(log_mutex);
      log.push_back(line);
    };
    coordinator = std::make_unique<Coordinator>(std::move(hub), expectation_for(local, fp, kCtx, first_remote), o);
  }
  bool logged(const std::string& part) {
    std::lock_guard lock(log_mutex);
    for (const auto& l : log)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
};

// What most tests start from: a tiny model, one process's backend over every
// layer (the truth), the coordinator's backend over 0:first_remote and its
// cluster (default numerics).
struct Route {
  test::SyntheticModel m;
  std::array<uint8_t, 32> fp;
  int64_t nv;
  cpu::Forward whole, local;
  Cluster c;
  Route(uint64_t seed, int first_remote)
      : m(model::preset_tiny(), model::QuantMix::Ds4Q2, seed),
        fp(model::fingerprint(m.model())),
        nv(m.hparams().n_vocab),
        whole(m.model(), Numerics::Default, nullptr),
        local(m.model(), Numerics::Default, nullptr),
        c(local, fp, first_remote) {}
  std::unique_ptr<WorkerThread> worker(backend::LayerRange layers) {
    return std::make_unique<WorkerThread>(m.model(), Numerics::Default, c.endpoint, c.key, layers, fp);
  }
};

// Logits of one process: `prompts` prefilled (every row), then `steps`
// greedy tokens batched over the sessions, the logits after each.
struct Transcript {
  std::vector<std::vector<float>> prompt_rows;  // per session
  std::vector<std::vector<float>> steps;        // per step, sessions' logits concatenated
};

Transcript run(backend::Backend& b, const std::vector<std::vector<int32_t>>& prompts, int steps) {
  const auto nv = static_cast<size_t>(b.n_vocab());
  Transcript t;
  std::vector<std::unique_ptr<backend::Session>> sessions;
  std::vector<backend::Part> parts;
  t.prompt_rows.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    sessions.push_back(b.new_session(kCtx));
    t.prompt_rows[i].assign(prompts[i].size() * nv, 0.0f);
    parts.push_back({sessions[i].get(), prompts[i], t.prompt_rows[i].data()});
  }
  b.eval(parts);
  std::vector<int32_t> next(prompts.size());
  for (int s = 0; s < steps; ++s) {
    parts.clear();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto l = sessions[i]->logits();
      next[i] = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      parts.push_back({sessions[i].get(), std::span<const int32_t>(&next[i], 1)});
    }
    b.eval(parts);
    std::vector<float> all;
    for (auto& sess : sessions) all.insert(all.end(), sess->logits().begin(), sess->logits().end());
    t.steps.push_back(std::move(all));
  }
  return t;
}

void expect_same(const Transcript& a, const Transcript& b) {
  ASSERT_EQ(a.prompt_rows.size(), b.prompt_rows.size());
  for (size_t i = 0; i < a.prompt_rows.size(); ++i)
    EXPECT_EQ(0, std::memcmp(a.prompt_rows[i].data(), b.prompt_rows[i].data(), a.prompt_rows[i].size() * 4))
        << "prompt rows of session " << i;
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s)
    EXPECT_EQ(0, std::memcmp(a.steps[s].data(), b.steps[s].data(), a.steps[s].size() * 4)) << "decode step " << s;
}

class PipelineTest : public testing::TestWithParam<Numerics> {};

TEST_P(PipelineTest, TwoAndThreeStagesEqualOneProcess) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 41);
  const auto fp = model::fingerprint(m.model());
  const int64_t nv = m.hparams().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(nv, 29, 1), random_tokens(nv, 11, 2)};
  cpu::Forward whole(m.model(), GetParam(), nullptr);
  const Transcript truth = run(whole, prompts, 5);

  // The last stage with the head (end -1), or without it (end n_layer: the
  // coordinator's eval_head makes the logits from the returned rows).
  struct Split {
    std::vector<int> cuts;
    int last_end;
  };
  const int n_layer = static_cast<int>(m.hparams().n_layer);
  for (const Split& split : {Split{{2}, -1}, Split{{1, 4}, -1}, Split{{3}, n_layer}}) {
    const std::vector<int>& cuts = split.cuts;
    SCOPED_TRACE("cuts at " + std::to_string(cuts[0]) + (cuts.size() > 1 ? "," + std::to_string(cuts[1]) : "") +
                 ", last stage ends at " + std::to_string(split.last_end));
    cpu::Forward local(m.model(), GetParam(), nullptr);
    Cluster c(local, fp, cuts[0]);
    std::vector<std::unique_ptr<WorkerThread>> workers;
    for (size_t i = 0; i < cuts.size(); ++i) {
      const int end = i + 1 < cuts.size() ? cuts[i + 1] : split.last_end;
      workers.push_back(std::make_unique<WorkerThread>(m.model(), GetParam(), c.endpoint, c.key,
                                                       backend::LayerRange{cuts[i], end}, fp));
    }
    ASSERT_TRUE(c.coordinator->wait_for_route(10s)) << c.coordinator->route().missing;
    PipelineOptions po;
    po.first_remote = cuts[0];
    po.wave_tokens = 6;  // the prompts go in several waves, some straddling both sessions
    po.window = 2;
    PipelineBackend pipe(local, *c.coordinator, po);
    expect_same(truth, run(pipe, prompts, 5));
    const RouteStatus route = c.coordinator->route();
    ASSERT_EQ(route.stages.size(), cuts.size());
    EXPECT_GT(route.stages[0].requests, 0u);
    // Small batches (the 6-token waves, the 2-token decode steps) after the
    // first (timed on the evaluation thread) were evaluated on the workers'
    // I/O threads: at least the last 4 decode steps.
    for (const auto& w : workers) EXPECT_GE(w->worker().inline_evaluations(), 4u);
  }
}

INSTANTIATE_TEST_SUITE_P(Numerics, PipelineTest, testing::Values(Numerics::Default, Numerics::Quality),
                         [](const auto& info) { return info.param == Numerics::Default ? "Default" : "Quality"; });

// Each stage's host keeps only the first shard and its own (ds4-gguf split
// --split-layers 2 --no-tensor-first-split): the coordinator's process has
// the embedding and layers 0-1, the worker's layers 2-3 and the head; the
// handshake agrees they run one model (the recorded fingerprint) and the
// logits are one process's, bit for bit.
TEST(DistPipeline, StagesHoldingOnlyTheirShardsEqualOneProcess) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 47);
  test::TempDir dir("ds4-stage-shards-");
  const gguf::File src = gguf::File::open(m.path());
  gguf::SplitOptions o;
  o.by = gguf::SplitOptions::By::Layers;
  o.layer_starts = {2};
  o.no_tensor_first_split = true;
  const std::vector<std::string> shards = gguf::write_split(src, gguf::plan_split(src, o), dir.file("m"), true);
  ASSERT_EQ(shards.size(), 3u);
  auto host = [&](const std::string& name, size_t own) {
    const std::string d = dir.file(name);
    std::filesystem::create_directories(d);
    for (size_t k : {size_t{0}, own})
      std::filesystem::copy_file(shards[k], d + "/" + std::filesystem::path(shards[k]).filename().string());
    model::LoadOptions load;
    load.partial_shards = true;
    return model::Deepseek4Model::open(d + "/" + std::filesystem::path(shards[0]).filename().string(), load);
  };
  const model::Deepseek4Model first = host("first", 1), second = host("second", 2);
  ASSERT_FALSE(first.file().missing_shards().empty());
  ASSERT_FALSE(second.file().missing_shards().empty());

  const int64_t nv = m.hparams().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(nv, 17, 8), random_tokens(nv, 9, 9)};
  cpu::Forward whole(m.model(), Numerics::Default, nullptr);
  const Transcript truth = run(whole, prompts, 4);

  cpu::Forward local(first, Numerics::Default, nullptr);
  Cluster c(local, model::fingerprint(first), 2);
  WorkerThread w(second, Numerics::Default, c.endpoint, c.key, {2, -1}, model::fingerprint(second));
  ASSERT_TRUE(c.coordinator->wait_for_route(10s)) << c.coordinator->route().missing;
  PipelineOptions po;
  po.first_remote = 2;
  po.wave_tokens = 5;
  po.window = 2;
  PipelineBackend pipe(local, *c.coordinator, po);
  expect_same(truth, run(pipe, prompts, 4));
}

TEST(DistPipeline, SnapshotAndRestoreAcrossTheRoute) {
  Route r(43, 3);
  auto& whole = r.whole;
  const auto w = r.worker({3, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {3, 8, 2});

  const auto a = random_tokens(r.nv, 13, 5), b = random_tokens(r.nv, 6, 6);
  auto truth = whole.new_session(kCtx);
  whole.eval(*truth, a);
  auto s = pipe.new_session(kCtx);
  pipe.eval(*s, a);
  const auto snap = s->snapshot();
  pipe.eval(*s, b);  // diverge, then come back
  s->restore(*snap);
  ASSERT_EQ(s->size(), static_cast<int64_t>(a.size()));
  whole.eval(*truth, b);
  pipe.eval(*s, b);
  ASSERT_EQ(truth->logits().size(), s->logits().size());
  EXPECT_EQ(0, std::memcmp(truth->logits().data(), s->logits().data(), s->logits().size() * 4));
}

// Saving across the route writes one ordinary payload (and session file):
// byte-identical to one process's after the same tokens; loading one splits
// it over the stages and evaluation continues exactly.
TEST(DistPipeline, SessionStateAcrossTheRouteIsOneOrdinaryPayload) {
  Route r(45, 1);
  auto& whole = r.whole;
  const auto w1 = r.worker({1, 4});
  const auto w2 = r.worker({4, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const auto a = random_tokens(r.nv, 21, 9), b = random_tokens(r.nv, 5, 10);

  auto truth = whole.new_session(kCtx);
  whole.eval(*truth, a);
  auto s = pipe.new_session(kCtx);
  pipe.eval(*s, a);
  const std::vector<uint8_t> payload = pipe.save_state(*s);
  EXPECT_EQ(payload, whole.save_state(*truth));

  auto loaded = pipe.new_session(kCtx);
  pipe.load_state(payload, *loaded);
  EXPECT_EQ(loaded->size(), static_cast<int64_t>(a.size()));
  // The coordinator keeps only its own layers' rows of a loaded session, as
  // of one it evaluated.
  EXPECT_EQ(loaded->state_bytes(), s->state_bytes());
  EXPECT_LT(loaded->state_bytes(), truth->state_bytes());
  whole.eval(*truth, b);
  pipe.eval(*loaded, b);
  EXPECT_EQ(0, std::memcmp(truth->logits().data(), loaded->logits().data(), truth->logits().size() * 4));

  test::TempDir dir;
  const std::string path = (dir.path() / "route.ds4s").string();
  pipe.save_session_file(path, *loaded);
  auto one = whole.new_session(kCtx);
  whole.load_session_file(path, *one);  // an ordinary session file
  EXPECT_EQ(whole.save_state(*one), whole.save_state(*truth));
  auto back = pipe.new_session(kCtx);
  pipe.load_session_file(path, *back);
  EXPECT_EQ(pipe.save_state(*back), whole.save_state(*truth));
}

TEST(DistPipeline, AWorkerThatStopsFailsTheRequestAndOneThatReturnsServesAgain) {
  Route r(47, 2);
  auto& whole = r.whole;
  auto& c = r.c;
  auto w = r.worker({2, -1});
  ASSERT_TRUE(c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *c.coordinator, {2, 8, 2});
  const auto a = random_tokens(r.nv, 17, 7), b = random_tokens(r.nv, 3, 8);
  auto s = pipe.new_session(kCtx);
  pipe.eval(*s, a);

  w.reset();  // the worker is gone (its thread stopped, its socket closed)
  const auto t0 = std::chrono::steady_clock::now();
  bool unavailable = false;
  std::string what;
  // The first request may still be queued toward the closed socket; it fails
  // when the heartbeat timeout notices, and so does every one after it.
  try {
    pipe.eval(*s, b);
  } catch (const Unavailable& e) {
    unavailable = true;
    what = e.what();
  }
  EXPECT_TRUE(unavailable);
  EXPECT_NE(what.find("2:output"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(s->size(), static_cast<int64_t>(a.size())) << "a failed evaluation leaves the session's tokens";
  EXPECT_FALSE(c.coordinator->route().complete);
  EXPECT_EQ(c.coordinator->route().missing, "2:output");

  // A worker for the same layers returns: the session is replayed on it.
  w = r.worker({2, -1});
  ASSERT_TRUE(c.coordinator->wait_for_route(10s));
  pipe.eval(*s, b);
  auto truth = whole.new_session(kCtx);
  whole.eval(*truth, a);
  whole.eval(*truth, b);
  EXPECT_EQ(0, std::memcmp(truth->logits().data(), s->logits().data(), s->logits().size() * 4));
}

TEST(DistDoor, AWorkerWithAnotherKeyNeverJoinsAndIsLogged) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 53);
  const auto fp = model::fingerprint(m.model());
  cpu::Forward local(m.model(), Numerics::Default, nullptr);
  Cluster c(local, fp, 2);
  WorkerThread intruder(m.model(), Numerics::Default, c.endpoint, generate_curve_key(), {2, -1}, fp);
  EXPECT_FALSE(c.coordinator->wait_for_route(1500ms));
  EXPECT_TRUE(c.logged("handshake with") || c.logged("refused")) << "the failed handshake is logged";
  // The right key joins the same coordinator.
  WorkerThread member(m.model(), Numerics::Default, c.endpoint, c.key, {2, -1}, fp);
  EXPECT_TRUE(c.coordinator->wait_for_route(10s));
}

TEST(DistDoor, AnotherModelOrOverlappingLayersAreRefusedByName) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 59);
  test::SyntheticModel other(model::preset_tiny(), model::QuantMix::Ds4Q2, 60);
  const auto fp = model::fingerprint(m.model());
  cpu::Forward local(m.model(), Numerics::Default, nullptr);
  Cluster c(local, fp, 2);
  {
    WorkerThread w(other.model(), Numerics::Default, c.endpoint, c.key, {2, -1}, model::fingerprint(other.model()));
    const std::string e = w.error_after(10s);
    EXPECT_NE(e.find("another model file"), std::string::npos) << e;
  }
  {
    WorkerThread w(m.model(), Numerics::Quality, c.endpoint, c.key, {2, -1}, fp);
    EXPECT_NE(w.error_after(10s).find("numerics"), std::string::npos);
  }
  {
    WorkerThread w(m.model(), Numerics::Default, c.endpoint, c.key, {1, 4}, fp);
    EXPECT_NE(w.error_after(10s).find("overlap the coordinator's own 0:2"), std::string::npos);
  }
  WorkerThread first(m.model(), Numerics::Default, c.endpoint, c.key, {2, 4}, fp);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (c.coordinator->route().stages.empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(c.coordinator->route().missing, "4:output");
  {
    WorkerThread w(m.model(), Numerics::Default, c.endpoint, c.key, {3, -1}, fp);
    EXPECT_NE(w.error_after(10s).find("overlap those of worker test-2 (2:4)"), std::string::npos);
  }
  {
    WorkerThread w(m.model(), Numerics::Default, c.endpoint, c.key, {4, -1}, fp, kCtx / 2);
    EXPECT_NE(w.error_after(10s).find("a context of 128 tokens"), std::string::npos);
  }
}

TEST(DistHandshake, EachMismatchIsNamed) {
  Expectation e;
  e.version = "0.1.0";
  e.commit = "abc";
  e.n_layer = 6;
  e.hidden_size = 64;
  e.n_ctx = 100;
  e.first_remote = 2;
  Hello h;
  h.version = e.version;
  h.commit = e.commit;
  h.n_layer = 6;
  h.hidden_size = 64;
  h.n_ctx = 100;
  h.layer_begin = 2;
  h.layer_end = -1;
  EXPECT_EQ(handshake_problem(h, e), "");
  auto problem = [&](auto change) {
    Hello x = h;
    change(x);
    return handshake_problem(x, e);
  };
  EXPECT_NE(problem([](Hello& x) { x.commit = "def"; }).find("another build"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.fingerprint[0] = 1; }).find("another model file"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.n_layer = 7; }).find("7 layers"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.numerics = 1; }).find("numerics"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.hidden_size = 32; }).find("hidden states of 32"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.n_ctx = 99; }).find("context of 99"), std::string::npos);
  EXPECT_EQ(problem([](Hello& x) { x.layer_end = 6; }), "") << "the last layer without the head";
  EXPECT_NE(problem([](Hello& x) { x.layer_end = 7; }).find("do not fit"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.layer_end = 2; }).find("do not fit"), std::string::npos);
  EXPECT_NE(problem([](Hello& x) { x.layer_begin = 1; }).find("overlap the coordinator's own 0:2"), std::string::npos);
  EXPECT_EQ(problem([](Hello& x) { x.layer_end = 5; }), "");
}

TEST(DistMessages, RoundTripAndEveryTruncationIsAnError) {
  Eval e;
  e.request = 77;
  e.layer_begin = 2;
  e.layer_end = -1;
  e.bits = HiddenBits::F16;
  EvalPart p;
  p.session = 5;
  p.prefix_hash = 99;
  p.pos0 = 12;
  p.skip_logits = true;
  p.tokens = {1, 2, 3};
  e.parts.push_back(p);
  e.hidden = {1.0f, -2.5f, 0.1f};
  const std::vector<uint8_t> bytes = encode(e);
  const Eval back = decode_eval(bytes, "test");
  EXPECT_EQ(back.request, 77u);
  EXPECT_EQ(back.layer_end, -1);
  ASSERT_EQ(back.parts.size(), 1u);
  EXPECT_EQ(back.parts[0].tokens, p.tokens);
  EXPECT_TRUE(back.parts[0].skip_logits);
  EXPECT_FALSE(back.parts[0].reset);
  // f16 on the wire: 1 and -2.5 exact, 0.1 rounded to the nearest half.
  EXPECT_EQ(back.hidden[0], 1.0f);
  EXPECT_EQ(back.hidden[1], -2.5f);
  EXPECT_EQ(back.hidden[2], 0.0999755859375f);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode_eval(std::span<const uint8_t>(bytes.data(), n), "test"), Error) << n << " bytes";
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(decode_eval(longer, "test"), Error);
  std::vector<uint8_t> other = bytes;
  other[4] = 2;  // protocol version
  try {
    decode_eval(other, "worker x");
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("protocol version 2"), std::string::npos) << err.what();
  }
  EXPECT_THROW(decode_result(bytes, "test"), Error);  // an EVAL is not a RESULT
}

TEST(DistMessages, PrefixHashIsFnv1aOverLittleEndianIds) {
  EXPECT_EQ(token_prefix_hash({}), 1469598103934665603ull);
  const int32_t one[] = {1};
  EXPECT_EQ(token_prefix_hash(one), 10473572386864919714ull);  // FNV-1a of 01 00 00 00
  const int32_t two[] = {7, -1};
  EXPECT_EQ(token_prefix_hash(two), 156489177749728096ull);
  EXPECT_EQ(token_prefix_hash(std::span<const int32_t>(two + 1, 1), token_prefix_hash(std::span<const int32_t>(two, 1))),
            token_prefix_hash(two));
}

TEST(DistKey, WrittenReadBackAndRefusedWhenExposedOrDamaged) {
  test::TempDir dir;
  const std::string path = (dir.path() / "cluster.key").string();
  const CurveKey k = generate_curve_key();
  write_curve_key(path, k);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const CurveKey back = read_curve_key(path);
  EXPECT_EQ(back.public_z85, k.public_z85);
  EXPECT_EQ(back.secret_z85, k.secret_z85);
  EXPECT_THROW(write_curve_key(path, k), Error) << "an existing key is not overwritten";

  ::chmod(path.c_str(), 0644);
  try {
    read_curve_key(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  ::chmod(path.c_str(), 0600);
  const CurveKey other = generate_curve_key();
  {
    std::ofstream f(path, std::ios::trunc);
    f << "ds4-dist-key 1\npublic " << other.public_z85 << "\nsecret " << k.secret_z85 << "\n";
  }
  try {
    read_curve_key(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not belong"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(path, std::ios::trunc);
    f << "hello\n";
  }
  EXPECT_THROW(read_curve_key(path), Error);
  EXPECT_THROW(read_curve_key((dir.path() / "missing.key").string()), Error);
}

}  // namespace
}  // namespace ds4::dist
