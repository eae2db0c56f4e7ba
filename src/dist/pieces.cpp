#include "dist/pieces.h"

#include <algorithm>
#include <cstring>

namespace ds4::dist {

namespace {

// Larger than any wave the pipeline sends (16384 tokens of V4 PRO's hidden
// streams are under 2 GiB); a length beyond it is a damaged header.
constexpr uint64_t kMaxWholeBytes = uint64_t{16} << 30;

struct PieceHeader {
  uint32_t magic, index;
  uint64_t whole;
};
static_assert(sizeof(PieceHeader) == kPieceHeaderBytes);

}  // namespace

size_t piece_count(size_t bytes, size_t piece_bytes) {
  return bytes <= piece_bytes ? 1 : (bytes + piece_bytes - 1) / piece_bytes;
}

size_t piece_wire_bytes(size_t bytes, size_t piece_bytes, size_t index) {
  if (piece_count(bytes, piece_bytes) == 1) return bytes;
  return kPieceHeaderBytes + std::min(piece_bytes, bytes - index * piece_bytes);
}

void write_piece(std::span<const uint8_t> message, size_t piece_bytes, size_t index, uint8_t* out) {
  if (piece_count(message.size(), piece_bytes) == 1) {
    std::memcpy(out, message.data(), message.size());
    return;
  }
  const PieceHeader h{kPieceMagic, static_cast<uint32_t>(index), message.size()};
  std::memcpy(out, &h, sizeof h);
  const size_t at = index * piece_bytes;
  std::memcpy(out + sizeof h, message.data() + at, std::min(piece_bytes, message.size() - at));
}

Reassembler::Outcome Reassembler::take(const std::string& sender, std::span<const uint8_t> wire,
                                       Clock::time_point now) {
  Outcome out;
  uint32_t magic = 0;
  if (wire.size() >= sizeof magic) std::memcpy(&magic, wire.data(), sizeof magic);
  const auto it = partial_.find(sender);
  if (magic != kPieceMagic) {
    if (it != partial_.end()) {
      out.problem = "a message came between the pieces of another (" + std::to_string(it->second.bytes.size()) +
                    " of " + std::to_string(it->second.whole) + " bytes had come); dropped the unfinished one";
      partial_.erase(it);
    }
    out.message.emplace(wire.begin(), wire.end());
    return out;
  }
  out.piece = true;
  PieceHeader h;
  if (wire.size() <= sizeof h) {
    out.problem = "dropped a piece of " + std::to_string(wire.size()) + " bytes (shorter than its header)";
    if (it != partial_.end()) partial_.erase(it);
    return out;
  }
  std::memcpy(&h, wire.data(), sizeof h);
  const auto slice = wire.subspan(sizeof h);
  if (h.index == 0) {
    if (it != partial_.end())
      out.problem = "a new message began before the last one's pieces were all there (" +
                    std::to_string(it->second.bytes.size()) + " of " + std::to_string(it->second.whole) +
                    " bytes had come); dropped the unfinished one";
    if (h.whole > kMaxWholeBytes || slice.size() >= h.whole) {
      out.problem = "dropped a piece announcing a message of " + std::to_string(h.whole) + " bytes";
      if (it != partial_.end()) partial_.erase(it);
      return out;
    }
    Partial& p = partial_[sender];
    p.bytes.clear();
    p.bytes.reserve(h.whole);
    p.whole = h.whole;
    p.next = 1;
    p.last = now;
    p.bytes.insert(p.bytes.end(), slice.begin(), slice.end());
    return out;
  }
  if (it == partial_.end() || h.index != it->second.next || h.whole != it->second.whole ||
      it->second.bytes.size() + slice.size() > h.whole) {
    out.problem = "dropped piece " + std::to_string(h.index) + " of a " + std::to_string(h.whole) + "-byte message: " +
                  (it == partial_.end() ? std::string("its first piece never came")
                                        : "piece " + std::to_string(it->second.next) + " was due");
    if (it != partial_.end()) partial_.erase(it);
    return out;
  }
  Partial& p = it->second;
  p.bytes.insert(p.bytes.end(), slice.begin(), slice.end());
  p.last = now;
  ++p.next;
  if (p.bytes.size() == p.whole) {
    out.message = std::move(p.bytes);
    partial_.erase(it);
  }
  return out;
}

std::vector<std::string> Reassembler::forget_idle(Clock::time_point now, std::chrono::milliseconds idle) {
  std::vector<std::string> lines;
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (now - it->second.last < idle) {
      ++it;
      continue;
    }
    lines.push_back("dropped an unfinished message (" + std::to_string(it->second.bytes.size()) + " of " +
                    std::to_string(it->second.whole) + " bytes) whose sender fell silent");
    it = partial_.erase(it);
  }
  return lines;
}

}  // namespace ds4::dist
