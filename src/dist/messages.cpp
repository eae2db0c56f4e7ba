#include "dist/messages.h"

#include "core/error.h"
#include "core/fp16.h"
#include "dist/wire.h"
#include "quant/f16_rows.h"

namespace ds4::dist {

namespace {

// Bounds on counts a peer may send (far above any real message; they keep a
// damaged length from asking for terabytes).
constexpr uint64_t kMaxTokens = uint64_t{1} << 26;
constexpr uint64_t kMaxParts = uint64_t{1} << 16;
constexpr uint64_t kMaxFloats = uint64_t{1} << 32;
constexpr uint64_t kMaxPayload = uint64_t{1} << 40;
constexpr uint64_t kMaxHops = 4096;

WireWriter header(MessageType t) {
  WireWriter w;
  w.put(kMagic);
  w.put(kProtocolVersion);
  w.put(static_cast<uint32_t>(t));
  return w;
}

WireReader body(std::span<const uint8_t> bytes, MessageType want, const std::string& from) {
  const MessageType got = message_type(bytes, from);
  const std::string what = std::string(message_type_name(want)) + " from " + from;
  if (got != want) throw Error(what + ": the message is a " + message_type_name(got));
  return WireReader(bytes.subspan(12), what);
}

void put_hidden(WireWriter& w, HiddenBits bits, std::span<const float> v) {
  w.put(static_cast<uint32_t>(bits));
  w.put(static_cast<uint64_t>(v.size()));
  if (bits == HiddenBits::F32) {
    w.put_raw(v.data(), v.size() * sizeof(float));
    return;
  }
  ScratchVector<uint16_t> h(v.size());
  quant::f32_to_f16_row(v.data(), h.data(), v.size());
  w.put_raw(h.data(), h.size() * sizeof(uint16_t));
}

Floats get_hidden(WireReader& r, HiddenBits* bits_out) {
  const auto bits = r.get<uint32_t>("hidden_bits");
  if (bits != 32 && bits != 16) r.fail("hidden_bits", std::to_string(bits) + " (32 or 16 expected)");
  *bits_out = static_cast<HiddenBits>(bits);
  if (bits == 32) return r.get_array<float, Floats>("hidden", kMaxFloats);
  const auto h = r.get_array<uint16_t, ScratchVector<uint16_t>>("hidden", kMaxFloats);
  Floats v(h.size());
  quant::f16_to_f32_row(h.data(), v.data(), h.size());
  return v;
}

void put_trace(WireWriter& w, const std::vector<StageTime>& trace) {
  w.put(static_cast<uint64_t>(trace.size()));
  for (const StageTime& t : trace) {
    w.put(t.layer_begin);
    w.put(t.eval_us);
  }
}

std::vector<StageTime> get_trace(WireReader& r) {
  const auto n = r.get<uint64_t>("trace");
  if (n > kMaxHops) r.fail("trace", std::to_string(n) + " stages");
  std::vector<StageTime> trace(n);
  for (StageTime& t : trace) {
    t.layer_begin = r.get<int32_t>("trace layer_begin");
    t.eval_us = r.get<uint64_t>("trace eval_us");
  }
  return trace;
}

ResultStatus get_status(WireReader& r) {
  const auto s = r.get<uint32_t>("status");
  if (s > 2) r.fail("status", std::to_string(s) + " is no status");
  return static_cast<ResultStatus>(s);
}

}  // namespace

const char* message_type_name(MessageType t) {
  switch (t) {
    case MessageType::Hello: return "HELLO";
    case MessageType::Welcome: return "WELCOME";
    case MessageType::Refuse: return "REFUSE";
    case MessageType::Eval: return "EVAL";
    case MessageType::Result: return "RESULT";
    case MessageType::Heartbeat: return "HEARTBEAT";
    case MessageType::SessionOp: return "SESSION_OP";
    case MessageType::SessionOpDone: return "SESSION_OP_DONE";
    case MessageType::Rehello: return "REHELLO";
    case MessageType::ForwardLost: return "FORWARD_LOST";
  }
  return "?";
}

MessageType message_type(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r(bytes, "message from " + from);
  const auto magic = r.get<uint32_t>("magic");
  if (magic != kMagic) r.fail("magic", "not a DwarfStar distributed message");
  const auto version = r.get<uint32_t>("version");
  if (version != kProtocolVersion)
    r.fail("version", "protocol version " + std::to_string(version) + ", this build speaks " +
                          std::to_string(kProtocolVersion));
  const auto type = r.get<uint32_t>("type");
  if (type < 1 || type > 10) r.fail("type", std::to_string(type) + " is no message type");
  return static_cast<MessageType>(type);
}

Bytes encode(const Hello& m) {
  WireWriter w = header(MessageType::Hello);
  w.put_string(m.version);
  w.put_string(m.commit);
  w.put_raw(m.fingerprint.data(), m.fingerprint.size());
  w.put(m.n_layer);
  w.put(m.layer_begin);
  w.put(m.layer_end);
  w.put(m.n_ctx);
  w.put(m.numerics);
  w.put(m.hidden_size);
  w.put_string(m.name);
  w.put_string(m.forward);
  return w.take();
}

Hello decode_hello(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::Hello, from);
  Hello m;
  m.version = r.get_string("version", 64);
  m.commit = r.get_string("commit", 64);
  for (auto& b : m.fingerprint) b = r.get<uint8_t>("fingerprint");
  m.n_layer = r.get<uint32_t>("n_layer");
  m.layer_begin = r.get<int32_t>("layer_begin");
  m.layer_end = r.get<int32_t>("layer_end");
  m.n_ctx = r.get<int64_t>("n_ctx");
  m.numerics = r.get<uint32_t>("numerics");
  m.hidden_size = r.get<uint64_t>("hidden_size");
  m.name = r.get_string("name", 256);
  m.forward = r.get_string("forward", 512);
  r.expect_end();
  return m;
}

Bytes encode(const Welcome& m) {
  WireWriter w = header(MessageType::Welcome);
  w.put(m.stage);
  return w.take();
}

Welcome decode_welcome(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::Welcome, from);
  Welcome m;
  m.stage = r.get<uint32_t>("stage");
  r.expect_end();
  return m;
}

Bytes encode(const Refuse& m) {
  WireWriter w = header(MessageType::Refuse);
  w.put_string(m.reason);
  return w.take();
}

Refuse decode_refuse(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::Refuse, from);
  Refuse m;
  m.reason = r.get_string("reason");
  r.expect_end();
  return m;
}

Bytes encode(const Eval& m) {
  WireWriter w = header(MessageType::Eval);
  w.put(m.request);
  w.put(m.layer_begin);
  w.put(m.layer_end);
  w.put(static_cast<uint64_t>(m.parts.size()));
  for (const EvalPart& p : m.parts) {
    w.put(p.session);
    w.put(p.prefix_hash);
    w.put(p.pos0);
    w.put(static_cast<uint8_t>((p.reset ? 1 : 0) | (p.skip_logits ? 2 : 0) | (p.all_logits ? 4 : 0)));
    w.put_array<int32_t>(p.tokens);
  }
  put_hidden(w, m.bits, m.hidden);
  w.put(static_cast<uint64_t>(m.route.size()));
  for (const Hop& h : m.route) {
    w.put(h.layer_begin);
    w.put(h.layer_end);
    w.put_string(h.address);
  }
  put_trace(w, m.trace);
  return w.take();
}

Eval decode_eval(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::Eval, from);
  Eval m;
  m.request = r.get<uint64_t>("request");
  m.layer_begin = r.get<int32_t>("layer_begin");
  m.layer_end = r.get<int32_t>("layer_end");
  const auto n_parts = r.get<uint64_t>("parts");
  if (n_parts > kMaxParts) r.fail("parts", std::to_string(n_parts) + " parts");
  m.parts.resize(n_parts);
  for (EvalPart& p : m.parts) {
    p.session = r.get<uint64_t>("session");
    p.prefix_hash = r.get<uint64_t>("prefix_hash");
    p.pos0 = r.get<int64_t>("pos0");
    const auto flags = r.get<uint8_t>("flags");
    if (flags > 7) r.fail("flags", "unknown flag bits " + std::to_string(flags));
    p.reset = (flags & 1) != 0;
    p.skip_logits = (flags & 2) != 0;
    p.all_logits = (flags & 4) != 0;
    p.tokens = r.get_array<int32_t>("tokens", kMaxTokens);
  }
  m.hidden = get_hidden(r, &m.bits);
  const auto n_hops = r.get<uint64_t>("route");
  if (n_hops > kMaxHops) r.fail("route", std::to_string(n_hops) + " stages");
  m.route.resize(n_hops);
  for (Hop& h : m.route) {
    h.layer_begin = r.get<int32_t>("route layer_begin");
    h.layer_end = r.get<int32_t>("route layer_end");
    h.address = r.get_string("route address", 512);
  }
  m.trace = get_trace(r);
  r.expect_end();
  return m;
}

Bytes encode(const Result& m) {
  WireWriter w = header(MessageType::Result);
  w.put(m.request);
  w.put(static_cast<uint32_t>(m.status));
  w.put_string(m.error);
  w.put(m.eval_us);
  put_trace(w, m.trace);
  w.put_string(m.forward_error);
  put_hidden(w, m.bits, m.hidden);
  w.put_array<float>(m.logits);
  return w.take();
}

Result decode_result(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::Result, from);
  Result m;
  m.request = r.get<uint64_t>("request");
  m.status = get_status(r);
  m.error = r.get_string("error");
  m.eval_us = r.get<uint64_t>("eval_us");
  m.trace = get_trace(r);
  m.forward_error = r.get_string("forward_error");
  m.hidden = get_hidden(r, &m.bits);
  m.logits = r.get_array<float>("logits", kMaxFloats);
  r.expect_end();
  return m;
}

Bytes encode(const Heartbeat& m) {
  WireWriter w = header(MessageType::Heartbeat);
  w.put(m.seq);
  return w.take();
}

Heartbeat decode_heartbeat(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::Heartbeat, from);
  Heartbeat m;
  m.seq = r.get<uint64_t>("seq");
  r.expect_end();
  return m;
}

Bytes encode(const ForwardLost& m) {
  WireWriter w = header(MessageType::ForwardLost);
  w.put_string(m.address);
  w.put_string(m.reason);
  return w.take();
}

ForwardLost decode_forward_lost(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::ForwardLost, from);
  ForwardLost m;
  m.address = r.get_string("address", 512);
  m.reason = r.get_string("reason");
  r.expect_end();
  return m;
}

Bytes encode(const SessionOp& m) {
  WireWriter w = header(MessageType::SessionOp);
  w.put(m.request);
  w.put(static_cast<uint32_t>(m.kind));
  w.put(m.session);
  w.put(m.other);
  w.put_array<uint8_t>(m.payload);
  return w.take();
}

SessionOp decode_session_op(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::SessionOp, from);
  SessionOp m;
  m.request = r.get<uint64_t>("request");
  const auto kind = r.get<uint32_t>("kind");
  if (kind < 1 || kind > 4) r.fail("kind", std::to_string(kind) + " is no session operation");
  m.kind = static_cast<SessionOpKind>(kind);
  m.session = r.get<uint64_t>("session");
  m.other = r.get<uint64_t>("other");
  m.payload = r.get_array<uint8_t>("payload", kMaxPayload);
  r.expect_end();
  return m;
}

Bytes encode(const SessionOpDone& m) {
  WireWriter w = header(MessageType::SessionOpDone);
  w.put(m.request);
  w.put(static_cast<uint32_t>(m.status));
  w.put_string(m.error);
  w.put_array<uint8_t>(m.payload);
  return w.take();
}

SessionOpDone decode_session_op_done(std::span<const uint8_t> bytes, const std::string& from) {
  WireReader r = body(bytes, MessageType::SessionOpDone, from);
  SessionOpDone m;
  m.request = r.get<uint64_t>("request");
  m.status = get_status(r);
  m.error = r.get_string("error");
  m.payload = r.get_array<uint8_t>("payload", kMaxPayload);
  r.expect_end();
  return m;
}

Bytes encode_rehello() { return header(MessageType::Rehello).take(); }

uint64_t token_prefix_hash(std::span<const int32_t> tokens, uint64_t hash) {
  for (const int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) {
      hash ^= (u >> (8 * i)) & 0xffu;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

}  // namespace ds4::dist
