// Memory read bandwidth with T threads: the ceiling for decode, which streams
// every weight once per token. A buffer far beyond the last-level cache is
// split into one contiguous slice per thread; each thread sums its slice with
// the widest vector loads the CPU has (AVX-512, else AVX2, else 64-bit
// scalar), four independent accumulators so that several loads are in flight.
// Used by ds4-bench-bandwidth (a probe of its own) and by ds4-bench
// --read-bandwidth (passes between decode steps, so that decode's weight
// bandwidth is held against the machine's read bandwidth of the same moments:
// on a shared host it moves by 2x within minutes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ds4 {

class ReadBandwidth {
 public:
  // `bytes` rounded down to whole 256-byte chunks (at least one per thread,
  // else ds4::Error); isa: "best", "avx512", "avx2" or "scalar" (ds4::Error
  // when the CPU lacks it). The buffer is 2 MiB aligned with transparent huge
  // pages asked for, and each slice is written (untimed) by the thread that
  // will read it, so every page is backed before the first timed pass.
  ReadBandwidth(size_t bytes, int threads, const std::string& isa = "best");
  ~ReadBandwidth();
  ReadBandwidth(const ReadBandwidth&) = delete;
  ReadBandwidth& operator=(const ReadBandwidth&) = delete;

  // One timed read of the whole buffer, every thread its slice: GB/s
  // (1e9 B/s) from the earliest thread start to the latest thread end.
  double pass();

  size_t bytes() const { return bytes_; }
  int threads() const { return threads_; }
  const char* isa() const { return isa_name_; }
  // XOR over the threads of each thread's running sum of its slice's 64-bit
  // words (wrapping), over every pass so far: proof that each byte was read.
  uint64_t checksum() const;

 private:
  struct Free {
    void operator()(unsigned char* p) const;
  };
  using Reader = uint64_t (*)(const unsigned char*, size_t);

  size_t slice_begin(size_t t) const;
  template <typename Work>
  void on_every_thread(Work work);

  size_t bytes_ = 0;
  int threads_ = 1;
  const char* isa_name_ = "scalar";
  Reader read_ = nullptr;
  std::unique_ptr<unsigned char[], Free> buffer_;
  std::unique_ptr<uint64_t[]> sums_;
};

}  // namespace ds4
