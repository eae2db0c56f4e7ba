// Long messages in pieces (dist/pieces.h): split and put back together byte
// for byte, every damage to the sequence named and the unfinished message
// dropped (never a wrong message delivered); and over ZeroMQ + CURVE, a
// message of more pieces than ZeroMQ's default queue limit (1000) arrives
// whole, each piece reported as a sign of life before the message is.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/curve_key.h"
#include "dist/messages.h"
#include "dist/pieces.h"
#include "dist/zmq_transport.h"

namespace ds4::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<Bytes> split(const Bytes& message, size_t piece_bytes) {
  std::vector<Bytes> pieces(piece_count(message.size(), piece_bytes));
  for (size_t i = 0; i < pieces.size(); ++i) {
    pieces[i].resize(piece_wire_bytes(message.size(), piece_bytes, i));
    write_piece(message, piece_bytes, i, pieces[i].data());
  }
  return pieces;
}

TEST(DistPieces, CountsAndSizes) {
  EXPECT_EQ(piece_count(0, 100), 1u);
  EXPECT_EQ(piece_count(100, 100), 1u);
  EXPECT_EQ(piece_count(101, 100), 2u);
  EXPECT_EQ(piece_count(300, 100), 3u);
  EXPECT_EQ(piece_wire_bytes(100, 100, 0), 100u) << "a message of one piece goes as it is";
  EXPECT_EQ(piece_wire_bytes(250, 100, 0), 100u + kPieceHeaderBytes);
  EXPECT_EQ(piece_wire_bytes(250, 100, 2), 50u + kPieceHeaderBytes);
}

TEST(DistPieces, SplitAndPutBackTogetherFromInterleavedSenders) {
  const auto a = random_bytes(10'000, 1), b = random_bytes(2'501, 2), small = random_bytes(99, 3);
  const auto pa = split(a, 1000), pb = split(b, 1000), ps = split(small, 1000);
  ASSERT_EQ(pa.size(), 10u);
  ASSERT_EQ(pb.size(), 3u);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0], small);
  Reassembler r;
  const auto now = Clock::now();
  std::vector<Bytes> from_a, from_b;
  size_t pieces = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    for (const auto* wire : {&pa[i], i < pb.size() ? &pb[i] : (i == 5 ? &ps[0] : nullptr)}) {
      if (wire == nullptr) continue;
      const std::string sender = wire == &pa[i] ? "a" : "b";
      auto out = r.take(sender, *wire, now);
      EXPECT_EQ(out.problem, "");
      pieces += out.piece;
      if (out.message) (sender == "a" ? from_a : from_b).push_back(std::move(*out.message));
    }
  }
  EXPECT_EQ(pieces, pa.size() + pb.size());
  ASSERT_EQ(from_a.size(), 1u);
  EXPECT_EQ(from_a[0], a);
  ASSERT_EQ(from_b.size(), 2u);
  EXPECT_EQ(from_b[0], b);
  EXPECT_EQ(from_b[1], small) << "a whole message after a finished one passes";
  EXPECT_EQ(r.unfinished(), 0u);
}

TEST(DistPieces, EveryDamageToTheSequenceIsNamedAndDeliversNothingWrong) {
  const auto m = random_bytes(3'500, 4);
  const auto p = split(m, 1000);
  const auto now = Clock::now();
  {  // a missing piece
    Reassembler r;
    EXPECT_FALSE(r.take("a", p[0], now).message);
    const auto out = r.take("a", p[2], now);
    EXPECT_FALSE(out.message);
    EXPECT_NE(out.problem.find("piece 1 was due"), std::string::npos) << out.problem;
    EXPECT_FALSE(r.take("a", p[3], now).message) << "the rest of a broken message is dropped too";
    EXPECT_EQ(r.unfinished(), 0u);
  }
  {  // a later piece with no first one
    Reassembler r;
    const auto out = r.take("a", p[1], now);
    EXPECT_TRUE(out.piece);
    EXPECT_NE(out.problem.find("its first piece never came"), std::string::npos) << out.problem;
  }
  {  // a new message before the last one finished: the new one is whole
    Reassembler r;
    r.take("a", p[0], now);
    r.take("a", p[1], now);
    std::optional<Bytes> got;
    std::string problem;
    for (const auto& wire : p) {
      auto out = r.take("a", wire, now);
      if (!out.problem.empty()) problem = out.problem;
      if (out.message) got = std::move(out.message);
    }
    EXPECT_NE(problem.find("a new message began"), std::string::npos) << problem;
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, m);
  }
  {  // a whole message between the pieces of another
    Reassembler r;
    r.take("a", p[0], now);
    const auto small = random_bytes(10, 5);
    auto out = r.take("a", small, now);
    ASSERT_TRUE(out.message);
    EXPECT_EQ(*out.message, small);
    EXPECT_NE(out.problem.find("came between the pieces"), std::string::npos) << out.problem;
    EXPECT_EQ(r.unfinished(), 0u);
  }
  {  // damaged headers: too short, an absurd length, a length that changes
    Reassembler r;
    auto short_piece = p[0];
    short_piece.resize(kPieceHeaderBytes);
    EXPECT_NE(r.take("a", short_piece, now).problem.find("shorter than its header"), std::string::npos);
    auto absurd = p[0];
    const uint64_t huge = uint64_t{1} << 40;
    std::memcpy(absurd.data() + 8, &huge, 8);
    EXPECT_NE(r.take("a", absurd, now).problem.find("announcing a message of"), std::string::npos);
    r.take("a", p[0], now);
    auto other_length = p[1];
    const uint64_t len = 4'000;
    std::memcpy(other_length.data() + 8, &len, 8);
    const auto out = r.take("a", other_length, now);
    EXPECT_FALSE(out.message);
    EXPECT_NE(out.problem, "");
    EXPECT_EQ(r.unfinished(), 0u);
  }
  {  // a piece that would overrun the announced length
    Reassembler r;
    const auto p500 = split(m, 500);
    r.take("a", p[0], now);
    auto longer = p500[1];  // index 1, whole 3500, 500 bytes: fits; make it claim more than is left
    longer.resize(kPieceHeaderBytes + 2'600);
    EXPECT_NE(r.take("a", longer, now).problem, "");
    EXPECT_EQ(r.unfinished(), 0u);
  }
}

TEST(DistPieces, AnUnfinishedMessageOfASilentSenderIsForgotten) {
  const auto p = split(random_bytes(2'500, 6), 1000);
  Reassembler r;
  const auto t0 = Clock::now();
  r.take("gone", p[0], t0);
  r.take("alive", p[0], t0 + 9s);
  EXPECT_TRUE(r.forget_idle(t0 + 5s, 10s).empty());
  const auto lines = r.forget_idle(t0 + 10s, 10s);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("1000 of 2500 bytes"), std::string::npos) << lines[0];
  EXPECT_EQ(r.unfinished(), 1u);
}

// Over ZeroMQ + CURVE, both ways, in pieces of 4 KiB: 6000 pieces (beyond
// what ZeroMQ queues by default, 1000 messages a side: the send blocked
// the I/O thread for 10 s and lost the message), byte-identical; receive() hands over the first
// piece as a sign of life (nothing whole yet), then the whole message.
TEST(DistPieces, AMessageOfManyPiecesCrossesZeroMqWholeAndEachPieceIsHeard) {
  constexpr size_t kPiece = 4096;
  const CurveKey key = generate_curve_key();
  auto hub = make_zmq_hub("tcp://127.0.0.1:*", key, kPiece);
  auto link = make_zmq_link(hub->endpoint(), key, "", kPiece);
  const auto down = random_bytes(6000 * kPiece, 7), up = random_bytes(6000 * kPiece - 3, 8);
  // Each end's queued sends go out from its receive() (the I/O thread's).
  link->send(encode(Heartbeat{}));
  std::optional<Incoming> hello;
  for (auto deadline = Clock::now() + 10s; !hello && Clock::now() < deadline;) {
    EXPECT_FALSE(link->receive(10ms));
    hello = hub->receive(10ms);
  }
  ASSERT_TRUE(hello) << "the link never reached the hub";

  link->send(up);
  EXPECT_FALSE(link->receive(0ms));
  bool heard_first = false;
  std::optional<Incoming> got_up;
  for (auto deadline = Clock::now() + 30s; !got_up && Clock::now() < deadline;) {
    got_up = hub->receive(0ms);
    const auto heard = hub->take_heard();
    if (!got_up && !heard.empty()) {
      heard_first = true;
      EXPECT_EQ(heard[0], hello->peer);
    }
    if (!got_up && !heard_first) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(got_up);
  EXPECT_TRUE(heard_first) << "pieces were heard before the whole message";
  EXPECT_EQ(got_up->bytes, up);

  hub->send(hello->peer, down);
  EXPECT_FALSE(hub->receive(0ms));
  heard_first = false;
  std::optional<Received> got_down;
  for (auto deadline = Clock::now() + 30s; !got_down && Clock::now() < deadline;) {
    got_down = link->receive(0ms);
    if (!got_down && link->take_heard_from_coordinator()) heard_first = true;
    if (!got_down && !heard_first) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(got_down);
  EXPECT_TRUE(heard_first);
  EXPECT_TRUE(got_down->from_coordinator);
  EXPECT_EQ(got_down->bytes, down);
  EXPECT_TRUE(hub->take_security_events().empty());
  EXPECT_TRUE(link->take_security_events().empty());
}

}  // namespace
}  // namespace ds4::dist
