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
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
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

// A link that offers another forward address than the one it listens on
// (a worker the previous stage cannot reach: a firewall, a wrong address).
class OfferingElsewhere final : public Link {
 public:
  OfferingElsewhere(std::unique_ptr<Link> inner, std::string offered)
      : inner_(std::move(inner)), offered_(std::move(offered)) {}
  void send(Bytes bytes) override { inner_->send(std::move(bytes)); }
  std::optional<Received> receive(std::chrono::milliseconds timeout) override { return inner_->receive(timeout); }
  std::vector<std::string> take_security_events() override { return inner_->take_security_events(); }
  std::string describe() const override { return inner_->describe(); }
  std::string forward_address() const override { return offered_; }
  void send_to(const std::string& address, Bytes bytes) override { inner_->send_to(address, std::move(bytes)); }
  std::vector<Undelivered> take_undelivered() override { return inner_->take_undelivered(); }

 private:
  std::unique_ptr<Link> inner_;
  std::string offered_;
};

// A link whose connection to the next stage breaks at the first hand-over:
// the message is lost on the way (both workers still reach the
// coordinator), and the link says the connection broke.
class LosingHandOvers final : public Link {
 public:
  explicit LosingHandOvers(std::unique_ptr<Link> inner) : inner_(std::move(inner)) {}
  void send(Bytes bytes) override { inner_->send(std::move(bytes)); }
  std::optional<Received> receive(std::chrono::milliseconds timeout) override { return inner_->receive(timeout); }
  std::vector<std::string> take_security_events() override { return inner_->take_security_events(); }
  std::string describe() const override { return inner_->describe(); }
  std::string forward_address() const override { return inner_->forward_address(); }
  void send_to(const std::string& address, Bytes bytes) override {
    std::lock_guard lock(mutex_);
    if (!broke_) {
      broke_ = true;
      lost_.emplace_back(address, "the connection to the next stage at " + address + " closed (test)");
      return;
    }
    inner_->send_to(address, std::move(bytes));
  }
  std::vector<Undelivered> take_undelivered() override { return inner_->take_undelivered(); }
  std::vector<std::pair<std::string, std::string>> take_lost_connections() override {
    std::lock_guard lock(mutex_);
    return std::exchange(lost_, {});
  }

 private:
  std::unique_ptr<Link> inner_;
  std::mutex mutex_;
  bool broke_ = false;
  std::vector<std::pair<std::string, std::string>> lost_;
};

// A link on which every EVAL from the coordinator is followed by another copy
// of the coordinator's first WELCOME: the answers to the HELLOs a worker said
// while no coordinator listened (one every 500 ms; ZeroMQ queues them and
// delivers them all once the coordinator binds, and each is answered).
class StaleWelcomes final : public Link {
 public:
  explicit StaleWelcomes(std::unique_ptr<Link> inner) : inner_(std::move(inner)) {}
  void send(Bytes bytes) override { inner_->send(std::move(bytes)); }
  std::optional<Received> receive(std::chrono::milliseconds timeout) override {
    if (!extra_.empty()) {
      Received r = std::move(extra_.front());
      extra_.pop_front();
      return r;
    }
    std::optional<Received> r = inner_->receive(timeout);
    if (!r || !r->from_coordinator) return r;
    const MessageType type = message_type(r->bytes, "the coordinator");
    if (type == MessageType::Welcome && welcome_.empty()) welcome_ = r->bytes;
    if (type == MessageType::Eval && !welcome_.empty()) {
      extra_.push_back(Received{welcome_, true});
      ++stale_welcomes_;
    }
    return r;
  }
  std::vector<std::string> take_security_events() override { return inner_->take_security_events(); }
  std::string describe() const override { return inner_->describe(); }
  std::string forward_address() const override { return inner_->forward_address(); }
  void send_to(const std::string& address, Bytes bytes) override { inner_->send_to(address, std::move(bytes)); }
  std::vector<Undelivered> take_undelivered() override { return inner_->take_undelivered(); }
  size_t stale_welcomes() const { return stale_welcomes_; }

 private:
  std::unique_ptr<Link> inner_;
  Bytes welcome_;
  std::deque<Received> extra_;
  std::atomic<size_t> stale_welcomes_{0};
};

// How long the Slow* links below hold a message back: past the 2 s in which
// a silent peer is given up.
constexpr auto kHold = 2600ms;

// What SlowWaves and SlowResults share: once started, every message kept
// back is handed out in order after kHold (the receiving thread's; started()
// may be read from any).
template <typename Message>
class HoldBack {
 public:
  // The next kept message whose time has come; the hold ends when none is left.
  std::optional<Message> release() {
    if (!holding_ || std::chrono::steady_clock::now() < release_at_) return std::nullopt;
    if (held_.empty()) {
      holding_ = false;
      return std::nullopt;
    }
    Message m = std::move(held_.front());
    held_.pop_front();
    return m;
  }
  // The inner receive's timeout: short while holding, so the release is on time.
  std::chrono::milliseconds poll(std::chrono::milliseconds timeout) const {
    return holding_ ? std::min(timeout, std::chrono::milliseconds(20)) : timeout;
  }
  void start() {
    started_ = holding_ = true;
    release_at_ = std::chrono::steady_clock::now() + kHold;
  }
  void keep(Message m) { held_.push_back(std::move(m)); }
  bool holding() const { return holding_; }
  bool started() const { return started_; }

 private:
  std::deque<Message> held_;
  std::atomic<bool> started_{false};
  bool holding_ = false;
  std::chrono::steady_clock::time_point release_at_;
};

// A link on which the first EVAL from the coordinator, and everything the
// coordinator sends after it, arrives kHold late, while the link says that
// part of a long message from the coordinator keeps coming: a wave of
// hidden states in pieces over a slow link (ZeroMQ + CURVE moved ~100 MB/s
// on one test host, 1.3 s for a 128 MiB wave, with heartbeats behind it).
class SlowWaves final : public Link {
 public:
  explicit SlowWaves(std::unique_ptr<Link> inner) : inner_(std::move(inner)) {}
  void send(Bytes bytes) override { inner_->send(std::move(bytes)); }
  std::optional<Received> receive(std::chrono::milliseconds timeout) override {
    if (auto r = hold_.release()) return r;
    std::optional<Received> r = inner_->receive(hold_.poll(timeout));
    if (!r || !r->from_coordinator) return r;
    if (!hold_.started() && message_type(r->bytes, "the coordinator") == MessageType::Eval) hold_.start();
    if (!hold_.holding()) return r;
    hold_.keep(std::move(*r));
    return std::nullopt;
  }
  bool take_heard_from_coordinator() override { return inner_->take_heard_from_coordinator() || hold_.holding(); }
  std::vector<std::string> take_security_events() override { return inner_->take_security_events(); }
  std::string describe() const override { return inner_->describe(); }
  std::string forward_address() const override { return inner_->forward_address(); }
  void send_to(const std::string& address, Bytes bytes) override { inner_->send_to(address, std::move(bytes)); }
  std::vector<Undelivered> take_undelivered() override { return inner_->take_undelivered(); }
  bool held() const { return hold_.started(); }

 private:
  std::unique_ptr<Link> inner_;
  HoldBack<Received> hold_;
};

// The coordinator's side of the same: the first RESULT from a worker, and
// everything that worker sends after it (its heartbeats), arrive kHold late
// while the hub says that part of a long message from it keeps coming.
class SlowResults final : public Hub {
 public:
  explicit SlowResults(std::unique_ptr<Hub> inner) : inner_(std::move(inner)) {}
  void send(const PeerId& peer, Bytes bytes) override { inner_->send(peer, std::move(bytes)); }
  std::optional<Incoming> receive(std::chrono::milliseconds timeout) override {
    if (auto in = hold_.release()) return in;
    std::optional<Incoming> in = inner_->receive(hold_.poll(timeout));
    if (!in) return in;
    if (!hold_.started() && message_type(in->bytes, "a worker") == MessageType::Result) {
      held_peer_ = in->peer;
      hold_.start();
    }
    if (!hold_.holding() || in->peer != held_peer_) return in;
    hold_.keep(std::move(*in));
    return std::nullopt;
  }
  std::vector<PeerId> take_heard() override {
    std::vector<PeerId> heard = inner_->take_heard();
    if (hold_.holding()) heard.push_back(held_peer_);
    return heard;
  }
  std::vector<std::string> take_security_events() override { return inner_->take_security_events(); }
  std::vector<PeerId> take_unreachable() override { return inner_->take_unreachable(); }
  std::string describe() const override { return inner_->describe(); }
  std::string endpoint() const override { return inner_->endpoint(); }
  bool held() const { return hold_.started(); }

 private:
  std::unique_ptr<Hub> inner_;
  HoldBack<Incoming> hold_;
  PeerId held_peer_;
};

// How a test worker's link is made: listening for hand-overs on loopback
// (""), not at all ("none"), losing its first hand-over ("lose"), offering a
// forward address that goes nowhere (anything else); stale_welcomes: through
// StaleWelcomes; slow_waves: through SlowWaves; messages longer than
// piece_bytes in pieces.
struct LinkSetup {
  std::string offer;
  bool stale_welcomes = false;
  bool slow_waves = false;
  size_t piece_bytes = kDefaultPieceBytes;
};

// A worker on a thread with its own CPU backend over `layers`.
class WorkerThread {
 public:
  WorkerThread(const model::Deepseek4Model& m, Numerics numerics, const std::string& endpoint, const CurveKey& key,
               backend::LayerRange layers, std::array<uint8_t, 32> fingerprint, int64_t n_ctx = kCtx,
               LinkSetup forward = {})
      : forward_(m, numerics, nullptr) {
    forward_.set_prefill_chunk(7);
    WorkerOptions o;
    o.layers = layers;
    o.n_ctx = n_ctx;
    o.name = "test-" + std::to_string(layers.begin);
    o.fingerprint = fingerprint;
    o.inline_budget = 60s;  // however slow this machine: the inline path is what the tests check
    o.log = [this](const std::string& line) {
      std::lock_guard lock(mutex_);
      log_.push_back(line);
    };
    std::unique_ptr<Link> link =
        make_zmq_link(endpoint, key, forward.offer == "none" ? "" : "tcp://127.0.0.1:*", forward.piece_bytes);
    if (forward.offer == "lose")
      link = std::make_unique<LosingHandOvers>(std::move(link));
    else if (!forward.offer.empty() && forward.offer != "none")
      link = std::make_unique<OfferingElsewhere>(std::move(link), forward.offer);
    if (forward.stale_welcomes) {
      auto stale = std::make_unique<StaleWelcomes>(std::move(link));
      stale_ = stale.get();
      link = std::move(stale);
    }
    if (forward.slow_waves) {
      auto slow = std::make_unique<SlowWaves>(std::move(link));
      slow_ = slow.get();
      link = std::move(slow);
    }
    worker_ = std::make_unique<Worker>(forward_, std::move(link), o);
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
  size_t stale_welcomes() const { return stale_ == nullptr ? 0 : stale_->stale_welcomes(); }
  bool held_a_wave() const { return slow_ != nullptr && slow_->held(); }
  bool logged(const std::string& part) {
    std::lock_guard lock(mutex_);
    for (const auto& l : log_)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }

 private:
  cpu::Forward forward_;
  StaleWelcomes* stale_ = nullptr;  // owned by worker_, when the link is one
  SlowWaves* slow_ = nullptr;       // the same
  std::unique_ptr<Worker> worker_;
  std::thread thread_;
  std::mutex mutex_;
  std::string error_;
  std::vector<std::string> log_;
};

struct Cluster {
  CurveKey key = generate_curve_key();
  std::unique_ptr<Coordinator> coordinator;
  std::string endpoint;
  std::vector<std::string> log;
  std::mutex log_mutex;

  SlowResults* slow = nullptr;  // owned by the coordinator, when its hub is one

  // slow_results: the hub through SlowResults; messages longer than
  // piece_bytes in pieces.
  Cluster(const backend::Backend& local, std::array<uint8_t, 32> fp, int first_remote, bool forward = true,
          bool slow_results = false, size_t piece_bytes = kDefaultPieceBytes) {
    std::unique_ptr<Hub> hub = make_zmq_hub("tcp://127.0.0.1:*", key, piece_bytes);
    if (slow_results) {
      auto s = std::make_unique<SlowResults>(std::move(hub));
      slow = s.get();
      hub = std::move(s);
    }
    endpoint = hub->endpoint();
    CoordinatorOptions o;
    o.forward_between_workers = forward;
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
  Route(uint64_t seed, int first_remote, bool slow_results = false, size_t piece_bytes = kDefaultPieceBytes)
      : m(model::preset_tiny(), model::QuantMix::Ds4Q2, seed),
        fp(model::fingerprint(m.model())),
        nv(m.hparams().n_vocab),
        whole(m.model(), Numerics::Default, nullptr),
        local(m.model(), Numerics::Default, nullptr),
        c(local, fp, first_remote, true, slow_results, piece_bytes) {}
  std::unique_ptr<WorkerThread> worker(backend::LayerRange layers, LinkSetup forward = {}) {
    return std::make_unique<WorkerThread>(m.model(), Numerics::Default, c.endpoint, c.key, layers, fp, kCtx,
                                          std::move(forward));
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

// The session's logits are one process's after the same spans, bit for bit.
void expect_logits_of_one_process(cpu::Forward& whole, const std::vector<std::vector<int32_t>>& spans,
                                  const backend::Session& s) {
  auto truth = whole.new_session(kCtx);
  for (const auto& span : spans) whole.eval(*truth, span);
  EXPECT_EQ(0, std::memcmp(truth->logits().data(), s.logits().data(), s.logits().size() * 4));
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
  // Three stages with the first worker handing over to the second, and
  // with everything through the coordinator.
  struct Split {
    std::vector<int> cuts;
    int last_end;
    bool forward = true;
  };
  const int n_layer = static_cast<int>(m.hparams().n_layer);
  for (const Split& split :
       {Split{{2}, -1}, Split{{1, 4}, -1}, Split{{1, 4}, -1, false}, Split{{1, 3}, n_layer}, Split{{3}, n_layer}}) {
    const std::vector<int>& cuts = split.cuts;
    SCOPED_TRACE("cuts at " + std::to_string(cuts[0]) + (cuts.size() > 1 ? "," + std::to_string(cuts[1]) : "") +
                 ", last stage ends at " + std::to_string(split.last_end) +
                 (split.forward ? "" : ", no hand-overs between workers"));
    cpu::Forward local(m.model(), GetParam(), nullptr);
    Cluster c(local, fp, cuts[0], split.forward);
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
    if (cuts.size() == 2) {
      // One transfer per stage: the coordinator never sent the second stage
      // anything, the first handed every batch over to it.
      EXPECT_EQ(workers[0]->worker().hand_overs() > 0, split.forward);
      EXPECT_EQ(route.stages[1].bytes_sent == 0, split.forward);
      EXPECT_GT(route.stages[1].bytes_received, 0u);
      EXPECT_EQ(route.stages[1].requests, route.stages[0].requests) << "each stage credited every request";
      EXPECT_GT(route.stages[1].eval_seconds, 0.0);
      EXPECT_EQ(workers[1]->worker().hand_overs(), 0u);
    }
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
  expect_logits_of_one_process(whole, {a, b}, *s);
}

// The second worker offers a forward address nobody listens on: the first
// worker's hand-over times out and comes back to the coordinator with the
// reason, which carries it on (the same logits), logs it, and from then on
// routes that stage's input through itself.
TEST(DistPipeline, AStageThatCannotBeHandedToIsReachedThroughTheCoordinator) {
  Route r(43, 1);
  auto w1 = r.worker({1, 3});
  auto w2 = r.worker({3, -1}, {"tcp://127.0.0.1:1"});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(r.nv, 19, 3)};
  expect_same(run(r.whole, prompts, 3), run(pipe, prompts, 3));
  EXPECT_TRUE(r.c.logged("cannot hand over to stage 3:output")) << "the failed hand-over is logged";
  EXPECT_TRUE(r.c.logged("tcp://127.0.0.1:1")) << "naming the address";
  // The waves in flight (window 2) when the first came back, then none.
  EXPECT_GE(w1->worker().hand_overs(), 1u);
  EXPECT_LE(w1->worker().hand_overs(), 2u) << "after the failure, through the coordinator";
  const RouteStatus route = r.c.coordinator->route();
  ASSERT_EQ(route.stages.size(), 2u);
  EXPECT_EQ(route.stages[1].forward, "");
  EXPECT_GT(route.stages[1].bytes_sent, 0u);
}

// A worker started before the coordinator said HELLO every 500 ms into
// ZeroMQ's queue; once the coordinator binds, each is answered with a
// WELCOME, some while the first requests run. They are not a new admission:
// the worker keeps its sessions (it cleared them at each, and a prompt in
// several waves failed with "session 1 does not continue at position N").
TEST(DistPipeline, WelcomesToQueuedHellosKeepTheWorkersSessions) {
  Route r(47, 1);
  auto w = r.worker({1, -1}, {"", true});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(r.nv, 29, 5), random_tokens(r.nv, 13, 6)};
  expect_same(run(r.whole, prompts, 3), run(pipe, prompts, 3));
  EXPECT_GE(w->stale_welcomes(), 6u) << "a stale WELCOME after every wave and decode step";
}

// Every message longer than 1000 bytes (waves, results, hand-overs between
// workers, session ops) travels in pieces of 1000: the same logits as one
// process, with three stages handing over to each other.
TEST(DistPipeline, MessagesInPiecesEqualOneProcess) {
  constexpr size_t kPiece = 1000;
  Route r(53, 1, false, kPiece);
  auto w1 = r.worker({1, 3}, {.offer = "", .piece_bytes = kPiece});
  auto w2 = r.worker({3, -1}, {.offer = "", .piece_bytes = kPiece});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(r.nv, 23, 11), random_tokens(r.nv, 9, 12)};
  expect_same(run(r.whole, prompts, 3), run(pipe, prompts, 3));
  EXPECT_GT(w1->worker().hand_overs(), 0u) << "the hand-overs between workers went in pieces too";
}

// A wave whose pieces keep coming for longer than the 2 s in which a silent
// peer is given up (the heartbeats queued behind it): the pieces are signs
// of life. Neither side gives the other up, the worker keeps its sessions,
// and the logits are one process's. (Before, a 64-128 MiB wave on a
// ~100 MB/s link made the worker say HELLO again and drop its sessions,
// or the coordinator drop the worker.)
TEST(DistPipeline, AWaveStillArrivingIsASignOfLifeToTheWorker) {
  Route r(59, 1);
  auto w = r.worker({1, -1}, {.offer = "", .slow_waves = true});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(r.nv, 21, 13)};
  expect_same(run(r.whole, prompts, 2), run(pipe, prompts, 2));
  EXPECT_TRUE(w->held_a_wave());
  EXPECT_FALSE(w->logged("has been silent")) << "the worker gave the coordinator up";
  EXPECT_FALSE(r.c.logged("stopped answering"));
}

TEST(DistPipeline, AResultStillArrivingIsASignOfLifeToTheCoordinator) {
  Route r(61, 1, true);
  auto w = r.worker({1, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(r.nv, 21, 14)};
  expect_same(run(r.whole, prompts, 2), run(pipe, prompts, 2));
  EXPECT_TRUE(r.c.slow->held());
  EXPECT_FALSE(r.c.logged("stopped answering")) << "the coordinator gave the worker up";
  EXPECT_FALSE(w->logged("has been silent"));
}

// A worker reached only by hand-overs that stops: the next request fails as
// Unavailable naming its layers within the heartbeat timeout, and one that
// returns serves the session again (replayed).
TEST(DistPipeline, AHandedToWorkerThatStopsFailsTheRequestAndOneThatReturnsServesAgain) {
  Route r(61, 1);
  auto w1 = r.worker({1, 3});
  auto w2 = r.worker({3, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const auto a = random_tokens(r.nv, 13, 9), b = random_tokens(r.nv, 4, 10);
  auto s = pipe.new_session(kCtx);
  pipe.eval(*s, a);
  EXPECT_GT(w1->worker().hand_overs(), 0u);

  w2.reset();
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    pipe.eval(*s, b);
  } catch (const Unavailable& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("3:output"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // The first worker's report fails the request at once; the route shows
  // the stage missing once its heartbeats are overdue.
  while (r.c.coordinator->route().complete && std::chrono::steady_clock::now() - t0 < 5s)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(r.c.coordinator->route().missing, "3:output");

  w2 = r.worker({3, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  pipe.eval(*s, b);
  expect_logits_of_one_process(r.whole, {a, b}, *s);
}

// The first worker's hand-over is lost on the way to the second (its
// connection there broke; both still reach the coordinator): the request
// fails at once as Unavailable naming both stages instead of waiting for an
// answer that never comes, and the next goes through the coordinator and
// gives one process's logits (the session replayed).
TEST(DistPipeline, AHandOverLostOnTheWayFailsTheRequestAndTheNextGoesThroughTheCoordinator) {
  Route r(71, 1);
  auto w1 = r.worker({1, 3}, {"lose"});
  auto w2 = r.worker({3, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const auto a = random_tokens(r.nv, 5, 11), b = random_tokens(r.nv, 3, 12);
  auto s = pipe.new_session(kCtx);
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    pipe.eval(*s, a);
  } catch (const Unavailable& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("stage 1:3"), std::string::npos) << what;
  EXPECT_NE(what.find("lost its hand-overs to stage 3:output"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "noticed from the report, not a timeout";
  EXPECT_EQ(r.c.coordinator->route().stages.at(1).forward, "");
  pipe.eval(*s, a);
  pipe.eval(*s, b);
  expect_logits_of_one_process(r.whole, {a, b}, *s);
}

// A worker's forward address is a door like the coordinator's: a peer
// without the cluster key is refused there and the worker logs it.
TEST(DistDoor, AStrangerAtAWorkersForwardAddressIsRefusedAndLogged) {
  Route r(67, 1);
  auto w1 = r.worker({1, 3});
  auto w2 = r.worker({3, -1});
  ASSERT_TRUE(r.c.coordinator->wait_for_route(10s));
  const std::string door = r.c.coordinator->route().stages[1].forward;
  ASSERT_EQ(door.rfind("tcp://127.0.0.1:", 0), 0u) << door;
  auto stranger = make_zmq_link(door, generate_curve_key());
  stranger->send(encode(Heartbeat{}));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!w2->logged("refused") && !w2->logged("handshake with") && std::chrono::steady_clock::now() < deadline) {
    stranger->receive(20ms);
  }
  EXPECT_TRUE(w2->logged("refused") || w2->logged("handshake with")) << "the failed handshake is logged";
  // The route still works.
  PipelineBackend pipe(r.local, *r.c.coordinator, {1, 8, 2});
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(r.nv, 9, 4)};
  expect_same(run(r.whole, prompts, 2), run(pipe, prompts, 2));
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

TEST(DistHandshake, AWildcardForwardAddressIsWhereTheCoordinatorSeesTheWorker) {
  EXPECT_EQ(resolve_forward_address("tcp://0.0.0.0:4711", "10.0.0.2"), "tcp://10.0.0.2:4711");
  EXPECT_EQ(resolve_forward_address("tcp://*:4711", "10.0.0.2"), "tcp://10.0.0.2:4711");
  EXPECT_EQ(resolve_forward_address("tcp://[::]:4711", "fd00::2"), "tcp://[fd00::2]:4711");
  EXPECT_EQ(resolve_forward_address("tcp://10.9.9.9:4711", "10.0.0.2"), "tcp://10.9.9.9:4711") << "a host given";
  EXPECT_EQ(resolve_forward_address("rank 3", "MPI rank 3"), "rank 3");
  EXPECT_EQ(resolve_forward_address("tcp://0.0.0.0:4711", "unknown address"), "");
  EXPECT_EQ(resolve_forward_address("", "10.0.0.2"), "");
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
  e.route = {{4, 6, "tcp://10.0.0.3:5001"}, {6, -1, "rank 3"}};
  e.trace = {{1, 1234}};
  const Bytes bytes = encode(e);
  const Eval back = decode_eval(bytes, "test");
  EXPECT_EQ(back.request, 77u);
  EXPECT_EQ(back.layer_end, -1);
  ASSERT_EQ(back.route.size(), 2u);
  EXPECT_EQ(back.route[0].layer_begin, 4);
  EXPECT_EQ(back.route[0].layer_end, 6);
  EXPECT_EQ(back.route[0].address, "tcp://10.0.0.3:5001");
  EXPECT_EQ(back.route[1].layer_end, -1);
  EXPECT_EQ(back.route[1].address, "rank 3");
  ASSERT_EQ(back.trace.size(), 1u);
  EXPECT_EQ(back.trace[0].layer_begin, 1);
  EXPECT_EQ(back.trace[0].eval_us, 1234u);
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
  Bytes longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(decode_eval(longer, "test"), Error);
  Bytes other = bytes;
  other[4] = 1;  // protocol version
  try {
    decode_eval(other, "worker x");
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("protocol version 1, this build speaks 2"), std::string::npos) << err.what();
  }
  EXPECT_THROW(decode_result(bytes, "test"), Error);  // an EVAL is not a RESULT

  Result res;
  res.request = 9;
  res.eval_us = 55;
  res.trace = {{1, 10}, {3, 20}};
  res.forward_error = "the next stage at tcp://10.0.0.3:5001 could not be reached";
  res.hidden = {0.5f};
  const Bytes rb = encode(res);
  const Result rback = decode_result(rb, "test");
  EXPECT_EQ(rback.eval_us, 55u);
  ASSERT_EQ(rback.trace.size(), 2u);
  EXPECT_EQ(rback.trace[1].layer_begin, 3);
  EXPECT_EQ(rback.trace[1].eval_us, 20u);
  EXPECT_EQ(rback.forward_error, res.forward_error);
  EXPECT_EQ(rback.hidden, res.hidden);
  for (size_t n = 0; n < rb.size(); ++n)
    EXPECT_THROW(decode_result(std::span<const uint8_t>(rb.data(), n), "test"), Error) << n << " bytes";

  Hello h;
  h.name = "w";
  h.forward = "tcp://0.0.0.0:4711";
  EXPECT_EQ(decode_hello(encode(h), "test").forward, "tcp://0.0.0.0:4711");
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
