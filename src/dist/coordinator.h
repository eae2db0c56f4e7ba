// The coordinator's side of a distributed run: admits workers (HELLO ->
// WELCOME, or REFUSE naming the mismatch), keeps the route (which worker
// serves which layers after the coordinator's own), watches every worker's
// heartbeats, and carries EVAL batches along the route: a batch goes to the
// stage that starts where the coordinator's layers end, each stage's hidden
// states go on to the next, and the last stage's logits come back to the
// caller. Workers that offer a forward address (their HELLO) hand their
// hidden states straight to the next stage, so a route of k workers costs
// k + 1 transfers (coordinator -> A -> B -> coordinator); a worker that
// cannot reach the next one hands them back here instead, this is logged,
// and from then on that stage's input goes through the coordinator (as for
// workers without a forward address: two transfers per stage).
//
// One I/O thread owns the transport's receiving side; callers on other
// threads submit requests and wait for their outcomes.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/messages.h"
#include "dist/transport.h"

namespace ds4::dist {

// What every worker must match (the coordinator's own build and model).
struct Expectation {
  std::string version, commit;
  std::array<uint8_t, 32> fingerprint{};
  uint32_t n_layer = 0;
  uint32_t numerics = 0;
  uint64_t hidden_size = 0;
  int64_t n_ctx = 0;      // workers must hold at least this many tokens a session
  int32_t first_remote = 0;  // the coordinator evaluates layers [0, first_remote)
};

// Why a worker cannot join (empty when it can): another build, model,
// numerics, hidden size, a smaller context, or layers that do not fit the
// model or start inside the coordinator's own.
std::string handshake_problem(const Hello& hello, const Expectation& expect);

// A worker's forward address (HELLO) as other workers reach it: a wildcard
// host ("tcp://0.0.0.0:PORT" from a bind to every interface) becomes
// `seen_at`, the address the coordinator sees the worker at (IPv6 in
// brackets); anything else is kept. Empty when the host is a wildcard and
// the address is not known.
std::string resolve_forward_address(const std::string& offered, const std::string& seen_at);

// "2:4", "3:output".
std::string layer_range_text(int begin, int end);
// The inverse: "A:B" or "A:output" (end -1); ds4::Error naming the text when
// it is neither or B <= A.
void parse_layer_range(const std::string& text, int* begin, int* end);

// One stage of the route as seen now.
struct StageInfo {
  int begin = 0, end = -1;
  std::string name, address;
  // Per-hop telemetry so far: requests answered, the worker's evaluation
  // time, and the rest of each round trip (transfer and queueing; a round
  // trip over several stages handing over to each other is divided evenly
  // among them).
  uint64_t requests = 0;
  double eval_seconds = 0, wait_seconds = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  // Where the stage before hands over to it (empty: through the
  // coordinator; also once a hand-over there failed).
  std::string forward;
};

struct RouteStatus {
  bool complete = false;
  // When incomplete: the first layers no worker serves ("2:output").
  std::string missing;
  std::vector<StageInfo> stages;  // in layer order, connected or not
};

// What became of a request.
struct Outcome {
  ResultStatus status = ResultStatus::Ok;
  std::string error;           // Failed / Mismatch: why, naming the stage
  bool unavailable = false;    // Failed because a stage is missing or stopped answering
  // The route's last stage stops at the last layer without the head: the
  // hidden states of the rows whose logits are wanted (the caller's head).
  Floats hidden;
  std::vector<float> logits;   // from the last stage
};

struct CoordinatorOptions {
  std::chrono::milliseconds peer_timeout{2000};
  // Workers hand hidden states to the next stage themselves where they can
  // (false: everything goes through the coordinator).
  bool forward_between_workers = true;
  std::function<void(const std::string&)> log;
};

class Coordinator {
 public:
  Coordinator(std::unique_ptr<Hub> hub, Expectation expect, CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  RouteStatus route() const;
  // Waits until the route covers every layer after the coordinator's; false
  // on timeout.
  bool wait_for_route(std::chrono::milliseconds timeout) const;

  // Sends `eval` (its layer range is filled in per stage) along the route
  // from the first remote layer; returns the request id to wait for.
  uint64_t submit(Eval eval);
  Outcome wait(uint64_t request);

  // Runs `op` on every stage of the route (its request id filled in) and
  // returns each stage's answer in route order; a stage that is missing or
  // stops answering gives a Failed answer with unavailable set.
  struct OpAnswer {
    int begin = 0, end = -1;
    SessionOpDone done;
    bool unavailable = false;
  };
  // payload_for (optional) gives each stage its own payload from its range.
  std::vector<OpAnswer> session_op(SessionOp op,
                                   const std::function<std::vector<uint8_t>(int begin, int end)>& payload_for = {});
  // The same without waiting for answers (dropping a session).
  void session_op_async(SessionOp op);

 private:
  struct Peer {
    PeerId id;
    std::string name, address;
    int begin = 0, end = -1;
    std::string forward;  // resolved; empty when the previous stage cannot hand over to it
    std::chrono::steady_clock::time_point last_heard;
    StageInfo stats;
  };
  struct Pending {
    Eval eval;        // parts kept to forward along the route; hidden moved out when sent
    // The stages it was sent along, the first to the one expected to answer.
    std::vector<PeerId> route;
    std::chrono::steady_clock::time_point sent;
    bool done = false;
    Outcome outcome;
  };
  struct PendingOp {
    PeerId at;
    int begin = 0, end = -1;
    bool done = false;
    SessionOpDone answer;
    bool unavailable = false;
  };

  void io_loop();
  void on_message(Incoming in);
  void on_hello(const Incoming& in);
  void on_result(const Incoming& in);
  void on_op_done(const Incoming& in);
  void on_forward_lost(const Incoming& in);
  void record_telemetry(const Pending& p, Peer& answered, const Result& r);
  void check_liveness();
  // Drops the workers a send could not reach (Hub::take_unreachable).
  void drop_unreachable();
  // With mutex_ held: the live peer serving layers from `begin`, or null.
  Peer* stage_at(int begin);
  // With mutex_ held: sends pending `id` to the stage starting at `begin`,
  // or fails it when there is none.
  void forward(uint64_t id, Pending& p, int begin, Floats hidden);
  void fail_at(const PeerId& peer, const std::string& why);
  void log(const std::string& line) const;
  std::string missing_from(int begin) const;

  std::unique_ptr<Hub> hub_;
  Expectation expect_;
  CoordinatorOptions options_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::map<PeerId, Peer> peers_;
  std::map<uint64_t, Pending> pending_;
  std::map<uint64_t, PendingOp> pending_ops_;
  uint64_t next_request_ = 1;
  uint32_t next_stage_ = 1;
  bool stopping_ = false;
  std::thread io_;
};

}  // namespace ds4::dist
