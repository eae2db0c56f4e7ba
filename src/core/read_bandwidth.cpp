#include "core/read_bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/error.h"

namespace ds4 {
namespace {

constexpr size_t kChunk = 256;              // bytes per loop step: four 64-byte lines
constexpr size_t kAlign = size_t{2} << 20;  // 2 MiB, so transparent huge pages can back the buffer

// Each reader returns a value that depends on every byte, so no load can be
// dropped; four independent accumulators keep several loads in flight.
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) uint64_t sum_avx512(const unsigned char* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += kChunk) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  // Stored and added by hand: GCC 12's _mm512_reduce_add_epi64 trips -Werror=uninitialized.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

__attribute__((target("avx2"))) uint64_t sum_avx2(const unsigned char* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += kChunk) {
    const auto* v = reinterpret_cast<const __m256i*>(p + i);
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_load_si256(v), _mm256_load_si256(v + 1)));
    a1 = _mm256_add_epi64(a1, _mm256_add_epi64(_mm256_load_si256(v + 2), _mm256_load_si256(v + 3)));
    a2 = _mm256_add_epi64(a2, _mm256_add_epi64(_mm256_load_si256(v + 4), _mm256_load_si256(v + 5)));
    a3 = _mm256_add_epi64(a3, _mm256_add_epi64(_mm256_load_si256(v + 6), _mm256_load_si256(v + 7)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

uint64_t sum_scalar(const unsigned char* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    s0 += w[0], s1 += w[1], s2 += w[2], s3 += w[3];
  }
  return s0 + s1 + s2 + s3;
}

}  // namespace

void ReadBandwidth::Free::operator()(unsigned char* p) const { std::free(p); }

ReadBandwidth::ReadBandwidth(size_t bytes, int threads, const std::string& isa) : threads_(threads) {
  if (threads < 1) throw Error("read bandwidth: threads must be at least 1");
  const auto n_threads = static_cast<size_t>(threads);
  const size_t chunks = bytes / kChunk;
  if (chunks < n_threads) {
    throw Error("read bandwidth: " + std::to_string(bytes) + " bytes is too small for " + std::to_string(threads) +
                " threads (at least " + std::to_string(kChunk) + " bytes each)");
  }
  bytes_ = chunks * kChunk;

  const CpuFeatures& f = cpu_features();
  if (isa != "best" && isa != "avx512" && isa != "avx2" && isa != "scalar")
    throw Error("read bandwidth: unknown reader '" + isa + "' (best, avx512, avx2 or scalar)");
  if (isa == "avx512" && !f.avx512f) throw Error("read bandwidth: this CPU has no AVX-512F");
  if (isa == "avx2" && !f.avx2) throw Error("read bandwidth: this CPU has no AVX2");
  isa_name_ = "scalar";
  read_ = sum_scalar;
#if defined(__x86_64__) || defined(__i386__)
  if (isa != "scalar") {
    if (f.avx512f && isa != "avx2") {
      isa_name_ = "avx512";
      read_ = sum_avx512;
    } else if (f.avx2) {
      isa_name_ = "avx2";
      read_ = sum_avx2;
    }
  }
#endif

  const size_t reserved = (bytes_ + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(kAlign, reserved));
  if (p == nullptr) throw Error("read bandwidth: cannot allocate " + std::to_string(reserved) + " bytes");
  buffer_.reset(p);
  // Huge pages take TLB misses out of the measurement; a hint only, ignored where THP is off.
  (void)madvise(p, reserved, MADV_HUGEPAGE);
  sums_ = std::make_unique<uint64_t[]>(n_threads);
  on_every_thread([this](size_t t, unsigned char* slice, size_t n) {
    std::memset(slice, static_cast<int>(t + 1), n);
    sums_[t] = 0;
  });
}

ReadBandwidth::~ReadBandwidth() = default;

size_t ReadBandwidth::slice_begin(size_t t) const {
  const size_t chunks = bytes_ / kChunk;
  return t * chunks / static_cast<size_t>(threads_) * kChunk;
}

template <typename Work>
void ReadBandwidth::on_every_thread(Work work) {
  const auto n_threads = static_cast<size_t>(threads_);
  auto one = [&](size_t t) { work(t, buffer_.get() + slice_begin(t), slice_begin(t + 1) - slice_begin(t)); };
  std::vector<std::thread> helpers;
  helpers.reserve(n_threads - 1);
  for (size_t t = 1; t < n_threads; ++t) helpers.emplace_back(one, t);
  one(0);
  for (std::thread& h : helpers) h.join();
}

double ReadBandwidth::pass() {
  using Clock = std::chrono::steady_clock;
  const auto n_threads = static_cast<size_t>(threads_);
  std::vector<Clock::time_point> starts(n_threads), ends(n_threads);
  // Every thread started (and its stack touched) before any reads: thread
  // creation is not timed.
  std::barrier start_line(static_cast<std::ptrdiff_t>(n_threads));
  on_every_thread([&](size_t t, unsigned char* slice, size_t n) {
    start_line.arrive_and_wait();
    starts[t] = Clock::now();
    sums_[t] += read_(slice, n);
    ends[t] = Clock::now();
  });
  const auto first = *std::min_element(starts.begin(), starts.end());
  const auto last = *std::max_element(ends.begin(), ends.end());
  const double secs = std::chrono::duration<double>(last - first).count();
  return secs > 0 ? static_cast<double>(bytes_) / secs / 1e9 : 0.0;
}

uint64_t ReadBandwidth::checksum() const {
  uint64_t check = 0;
  for (size_t t = 0; t < static_cast<size_t>(threads_); ++t) check ^= sums_[t];
  return check;
}

}  // namespace ds4
