// Byte encoding of the distributed protocol's messages (dist/messages.h):
// little-endian integers and floats appended to a buffer, and a reader that
// checks every length against what is left, so a short or damaged message
// from a peer is a ds4::Error naming the field, never a read past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/scratch_vector.h"

namespace ds4::dist {

// A message's bytes. Prefill waves are 64-128 MiB: taken from 2 MiB pages
// (ScratchVector), a fresh buffer costs one page fault per 2 MiB instead of
// per 4 KiB. On a KVM guest where faults are dear that made a 64 MiB hop
// (ds4-bench-hop) 5x faster; growing one leaves its new bytes unset, as
// every writer here writes them.
using Bytes = ScratchVector<uint8_t>;
// Hidden states in messages, for the same reason: a prefill wave's 64-128 MiB
// of floats, decoded and forwarded per wave.
using Floats = ScratchVector<float>;

class WireWriter {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_arithmetic_v<T>);
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // x86 and arm64 are little-endian
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
  }
  void put_string(std::string_view s) {
    put(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  // A length (element count) and the elements.
  template <typename T>
  void put_array(std::span<const T> v) {
    static_assert(std::is_arithmetic_v<T>);
    put(static_cast<uint64_t>(v.size()));
    put_raw(v.data(), v.size_bytes());
  }
  void put_raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  Bytes& bytes() { return bytes_; }
  Bytes take() { return std::move(bytes_); }

 private:
  Bytes bytes_;
};

class WireReader {
 public:
  // `what` names the message in errors ("EVAL from worker 1").
  WireReader(std::span<const uint8_t> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  template <typename T>
  T get(const char* field) {
    static_assert(std::is_arithmetic_v<T>);
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_string(const char* field, size_t max_bytes = 4096) {
    const auto n = get<uint32_t>(field);
    if (n > max_bytes) fail(field, "a string of " + std::to_string(n) + " bytes (at most " + std::to_string(max_bytes) + ")");
    need(n, field);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
  }
  // Elements appended to `out`; ds4::Error when more than max_count.
  template <typename T>
  std::span<const uint8_t> get_array_bytes(const char* field, uint64_t max_count, uint64_t* count) {
    const auto n = get<uint64_t>(field);
    if (n > max_count) fail(field, std::to_string(n) + " elements (at most " + std::to_string(max_count) + ")");
    need(n * sizeof(T), field);
    *count = n;
    const auto s = bytes_.subspan(at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return s;
  }
  template <typename T, typename Vector = std::vector<T>>
  Vector get_array(const char* field, uint64_t max_count) {
    uint64_t n = 0;
    const auto raw = get_array_bytes<T>(field, max_count, &n);
    Vector v(n);
    if (n > 0) std::memcpy(v.data(), raw.data(), raw.size());
    return v;
  }
  size_t left() const { return bytes_.size() - at_; }
  // ds4::Error when bytes are left over (a message of another layout).
  void expect_end() const {
    if (left() != 0) fail("end", std::to_string(left()) + " bytes left over");
  }
  [[noreturn]] void fail(const char* field, const std::string& problem) const {
    throw Error(what_ + ": field " + field + ": " + problem);
  }

 private:
  void need(uint64_t n, const char* field) const {
    if (n > left()) fail(field, "the message ends early (" + std::to_string(left()) + " bytes left, " + std::to_string(n) + " needed)");
  }
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  std::string what_;
};

}  // namespace ds4::dist
