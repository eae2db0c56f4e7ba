// Long messages in pieces. A pipeline's prefill wave carries 64 KiB of
// hidden state per token (64-128 MiB a wave); sent as one ZeroMQ message it
// is encrypted, moved and decrypted in one block, and a peer hears nothing
// else from that sender until all of it arrived: heartbeats queue behind it
// and ZMTP's own keepalive runs out, so a healthy link looks dead. Sent as
// pieces of about a MiB, every piece is a sign of life, and encryption,
// transfer and decryption overlap.
//
// A piece is its own transport message: the piece magic, the piece's index,
// the whole message's length, then its slice of the message. Messages that
// fit in one piece go unchanged (they start with the protocol's kMagic).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dist/wire.h"

namespace ds4::dist {

inline constexpr uint32_t kPieceMagic = 0x50345344;  // "DS4P"
inline constexpr size_t kPieceHeaderBytes = 16;      // magic, index, whole length
inline constexpr size_t kDefaultPieceBytes = size_t{1} << 20;

// How many pieces a message of `bytes` travels as; 1 means it goes as it is.
size_t piece_count(size_t bytes, size_t piece_bytes);

// The size on the wire of piece `index` of a message of `bytes`.
size_t piece_wire_bytes(size_t bytes, size_t piece_bytes, size_t index);

// Writes piece `index` of `message` (piece_wire_bytes(...) bytes) to `out`.
void write_piece(std::span<const uint8_t> message, size_t piece_bytes, size_t index, uint8_t* out);

// Puts the pieces from each sender back together. Per sender, pieces come in
// order (the transports keep order per peer); a sender interleaves nothing
// into a message's pieces.
class Reassembler {
 public:
  using Clock = std::chrono::steady_clock;

  struct Outcome {
    std::optional<Bytes> message;                 // a whole message, when one is complete
    bool piece = false;                           // this was a piece (the sender is alive)
    std::string problem;                          // a piece out of order or inconsistent, for the log
  };

  // Takes one transport message from `sender` (a routing id).
  Outcome take(const std::string& sender, std::span<const uint8_t> wire, Clock::time_point now);

  // Forgets the unfinished messages of senders silent since before `now -
  // idle` (a sender that went away mid-message); the lines say whose.
  std::vector<std::string> forget_idle(Clock::time_point now, std::chrono::milliseconds idle);

  size_t unfinished() const { return partial_.size(); }

 private:
  struct Partial {
    Bytes bytes;
    uint64_t whole = 0;
    uint32_t next = 0;
    Clock::time_point last;
  };
  std::map<std::string, Partial> partial_;
};

}  // namespace ds4::dist
