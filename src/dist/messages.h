// The distributed protocol between a coordinator and its workers
// (docs/distributed.md): every message is a header (magic "DS4Z", protocol
// version, type) and the type's fields, little-endian (dist/wire.h). The
// transport (dist/transport.h) moves whole messages; this file only encodes
// and decodes them, and every decode checks lengths and counts, so a damaged
// or foreign message is a ds4::Error naming the field.
//
// A worker says HELLO (what it is: build, model fingerprint, layers, context,
// where other workers can reach it); the coordinator answers WELCOME (its
// stage) or REFUSE (the mismatch, named). EVAL carries a batch of session
// spans over a layer range with their hidden states in, and the stages after
// it: a worker hands its hidden states straight to the next stage (a ring
// coordinator -> A -> B -> coordinator, one transfer per stage) and only the
// route's last stage, a failure or a hand-over that could not be made
// answers the coordinator with RESULT: the hidden states out, or the logits
// from the stage that ends with the output head. SESSION_OP copies, drops, saves and
// loads a session's state on a worker. Both sides send HEARTBEAT while idle
// and busy, so a peer that died or whose link went silent is noticed.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dist/wire.h"

namespace ds4::dist {

inline constexpr uint32_t kMagic = 0x5a345344;  // "DS4Z"
inline constexpr uint32_t kProtocolVersion = 2;

enum class MessageType : uint32_t {
  Hello = 1,
  Welcome = 2,
  Refuse = 3,
  Eval = 4,
  Result = 5,
  Heartbeat = 6,
  SessionOp = 7,
  SessionOpDone = 8,
  // The coordinator does not know the sender (it restarted): HELLO again.
  Rehello = 9,
  // A worker's connection to the next stage's forward address broke:
  // hand-overs on it may be lost.
  ForwardLost = 10,
};
const char* message_type_name(MessageType t);

// The type of an encoded message; ds4::Error when it is not one (wrong
// magic, another protocol version, unknown type). `from` names the sender.
MessageType message_type(std::span<const uint8_t> bytes, const std::string& from);

struct Hello {
  std::string version;  // ds4::version()
  std::string commit;   // ds4::git_commit()
  std::array<uint8_t, 32> fingerprint{};
  uint32_t n_layer = 0;
  int32_t layer_begin = 0;
  int32_t layer_end = -1;  // -1: through the output head
  int64_t n_ctx = 0;       // the most tokens one session may hold there
  uint32_t numerics = 0;   // backend::Numerics
  uint64_t hidden_size = 0;
  std::string name;  // host and pid, for logs
  // Where other workers hand this one its EVALs (Link::forward_address():
  // "tcp://*:PORT" when the host is the one the coordinator sees, "rank 2");
  // empty: only from the coordinator.
  std::string forward;
};

struct Welcome {
  uint32_t stage = 0;
};

struct Refuse {
  std::string reason;
};

// How hidden states travel: raw f32, or IEEE half (half the bytes; results
// then differ from one process).
enum class HiddenBits : uint32_t { F32 = 32, F16 = 16 };

struct EvalPart {
  uint64_t session = 0;
  // FNV-1a (token_prefix_hash) of the session's tokens before these: the
  // worker refuses a span that does not continue what it holds.
  uint64_t prefix_hash = 0;
  int64_t pos0 = 0;
  bool reset = false;        // drop what the worker holds first (pos0 == 0)
  bool skip_logits = false;  // no logits wanted after this span
  bool all_logits = false;   // the logits after every token, not only the last
  std::vector<int32_t> tokens;
};

// A stage after the receiving one: its layers and where it takes EVALs.
struct Hop {
  int32_t layer_begin = 0;
  int32_t layer_end = -1;
  std::string address;  // another worker's forward address, as the coordinator resolved it
};

// One stage's evaluation time, carried along the route for the telemetry.
struct StageTime {
  int32_t layer_begin = 0;
  uint64_t eval_us = 0;
};

struct Eval {
  uint64_t request = 0;
  int32_t layer_begin = 0;
  int32_t layer_end = -1;
  HiddenBits bits = HiddenBits::F32;
  std::vector<EvalPart> parts;
  Floats hidden;  // every part's tokens in order x hidden_size
  // The stages after this one, in order: this stage's hidden states go to
  // route[0] (with the rest of the route), not back to the coordinator.
  std::vector<Hop> route;
  std::vector<StageTime> trace;  // the stages before this one on the route
};

enum class ResultStatus : uint32_t {
  Ok = 0,
  // The worker's state of a session does not continue as asked (it
  // restarted, or lost a step): the coordinator replays the session.
  Mismatch = 1,
  Failed = 2,
};

struct Result {
  uint64_t request = 0;
  ResultStatus status = ResultStatus::Ok;
  std::string error;
  uint64_t eval_us = 0;          // the worker's evaluation time
  std::vector<StageTime> trace;  // the stages before it on the route
  // Set when the worker could not hand its hidden states to the next stage
  // (why, naming the address): they come back here instead, and the
  // coordinator carries them on itself.
  std::string forward_error;
  HiddenBits bits = HiddenBits::F32;
  Floats hidden;  // hidden states out (a stage short of the head)
  // The last stage's logits: per part in order, every row (all_logits), the
  // last row, or none (skip_logits).
  std::vector<float> logits;
};

struct Heartbeat {
  uint64_t seq = 0;
};

struct ForwardLost {
  std::string address;  // the next stage's forward address
  std::string reason;
};

enum class SessionOpKind : uint32_t {
  Drop = 1,       // forget `session`
  Copy = 2,       // `session` becomes a copy of `other` (snapshot, restore)
  SaveState = 3,  // the state of the worker's layers of `session` (Backend::save_layers)
  LoadState = 4,  // `session` from such a state in `payload`
};

struct SessionOp {
  uint64_t request = 0;
  SessionOpKind kind = SessionOpKind::Drop;
  uint64_t session = 0;
  uint64_t other = 0;
  std::vector<uint8_t> payload;
};

struct SessionOpDone {
  uint64_t request = 0;
  ResultStatus status = ResultStatus::Ok;
  std::string error;
  std::vector<uint8_t> payload;
};

Bytes encode(const Hello& m);
Bytes encode(const Welcome& m);
Bytes encode(const Refuse& m);
Bytes encode(const Eval& m);
Bytes encode(const Result& m);
Bytes encode(const Heartbeat& m);
Bytes encode(const ForwardLost& m);
Bytes encode(const SessionOp& m);
Bytes encode(const SessionOpDone& m);
Bytes encode_rehello();

// Decoders: ds4::Error naming `from`, the message and the field on anything
// that does not fit (the type is checked too).
Hello decode_hello(std::span<const uint8_t> bytes, const std::string& from);
Welcome decode_welcome(std::span<const uint8_t> bytes, const std::string& from);
Refuse decode_refuse(std::span<const uint8_t> bytes, const std::string& from);
Eval decode_eval(std::span<const uint8_t> bytes, const std::string& from);
Result decode_result(std::span<const uint8_t> bytes, const std::string& from);
Heartbeat decode_heartbeat(std::span<const uint8_t> bytes, const std::string& from);
ForwardLost decode_forward_lost(std::span<const uint8_t> bytes, const std::string& from);
SessionOp decode_session_op(std::span<const uint8_t> bytes, const std::string& from);
SessionOpDone decode_session_op_done(std::span<const uint8_t> bytes, const std::string& from);

// 64-bit FNV-1a over each token id's four little-endian bytes, continuing
// from `hash` (the offset basis for an empty prefix).
inline constexpr uint64_t kEmptyPrefixHash = 1469598103934665603ull;
uint64_t token_prefix_hash(std::span<const int32_t> tokens, uint64_t hash = kEmptyPrefixHash);

}  // namespace ds4::dist
