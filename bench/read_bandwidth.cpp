// Memory read bandwidth with T threads: the ceiling for decode, which streams every
// weight once per token. A buffer far beyond the last-level cache (default 4 GiB) is
// split into one contiguous slice per thread; each thread sums its slice with the
// widest vector loads the CPU has (AVX-512, else AVX2, else 64-bit scalar). The buffer
// is written first (untimed) so every page is backed and first-touched by the thread
// that will read it. Each of R repeats is timed from the earliest thread start to the
// latest thread end; one JSON line reports the median and the best, in GB/s (1e9 B/s).
//
// Run: ds4-bench-bandwidth [--threads T] [--bytes N[k|m|g]] [--repeats R] [--isa avx512|avx2|scalar]
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace ds4::bench {
namespace {

constexpr size_t kChunk = 256;              // bytes per loop step: four 64-byte lines
constexpr size_t kAlign = size_t{2} << 20;  // 2 MiB, so transparent huge pages can back the buffer

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], Free>;

Buffer allocate(size_t bytes) {
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  if (p == nullptr) throw std::runtime_error("cannot allocate " + std::to_string(bytes) + " bytes");
  // Huge pages take TLB misses out of the measurement; a hint only, ignored where THP is off.
  madvise(p, bytes, MADV_HUGEPAGE);
  return Buffer(p);
}

// Each reader returns a value that depends on every byte, so no load can be dropped.
// Four independent accumulators keep several loads in flight per core.
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
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)),
                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32))));
    a1 = _mm256_add_epi64(a1, _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)),
                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96))));
    a2 = _mm256_add_epi64(a2, _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 128)),
                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 160))));
    a3 = _mm256_add_epi64(a3, _mm256_add_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 192)),
                                               _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 224))));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t sum_scalar(const unsigned char* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof w);
    s0 += w[0], s1 += w[1], s2 += w[2], s3 += w[3];
  }
  return s0 + s1 + s2 + s3;
}

using Reader = uint64_t (*)(const unsigned char*, size_t);

struct Isa {
  const char* name;
  Reader read;
};

// The widest reader this CPU runs, or the one asked for (to compare them).
Isa pick_isa(const std::string& wanted) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  if (wanted == "avx512" && !avx512) throw std::runtime_error("this CPU has no AVX-512F");
  if (wanted == "avx2" && !avx2) throw std::runtime_error("this CPU has no AVX2");
  if (wanted == "scalar") return {"scalar", sum_scalar};
  if (avx512 && wanted != "avx2") return {"avx512", sum_avx512};
  if (avx2) return {"avx2", sum_avx2};
  return {"scalar", sum_scalar};
}

size_t parse_bytes(const std::string& text) {
  size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw std::runtime_error("--bytes '" + text + "' is not a number");
  }
  const std::string suffix = text.substr(used);
  int shift = 0;
  if (suffix == "k" || suffix == "K") shift = 10;
  else if (suffix == "m" || suffix == "M") shift = 20;
  else if (suffix == "g" || suffix == "G") shift = 30;
  else if (!suffix.empty()) throw std::runtime_error("--bytes '" + text + "': unknown suffix (use k, m or g)");
  return static_cast<size_t>(value) << shift;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int run(int threads, size_t requested_bytes, int repeats, const std::string& wanted_isa) {
  using Clock = std::chrono::steady_clock;
  const auto n_threads = static_cast<size_t>(threads);
  // Whole chunks only, split as evenly as chunks allow.
  const size_t chunks = requested_bytes / kChunk;
  if (chunks < n_threads) throw std::runtime_error("--bytes is too small for " + std::to_string(threads) + " threads");
  const size_t bytes = chunks * kChunk;
  Buffer buffer = allocate(bytes);
  const Isa isa = pick_isa(wanted_isa);

  auto slice_begin = [&](size_t t) { return t * chunks / n_threads * kChunk; };
  std::vector<uint64_t> sums(n_threads);
  std::vector<Clock::time_point> starts(n_threads), ends(n_threads);
  std::vector<double> gbps;
  // Round 0 writes the buffer (untimed); rounds 1..R read it.
  std::barrier sync(static_cast<std::ptrdiff_t>(n_threads));
  auto worker = [&](size_t t) {
    unsigned char* p = buffer.get() + slice_begin(t);
    const size_t n = slice_begin(t + 1) - slice_begin(t);
    std::memset(p, static_cast<int>(t + 1), n);
    for (int r = 0; r < repeats; ++r) {
      sync.arrive_and_wait();
      starts[t] = Clock::now();
      sums[t] += isa.read(p, n);
      ends[t] = Clock::now();
      sync.arrive_and_wait();
      if (t == 0) {
        const auto first = *std::min_element(starts.begin(), starts.end());
        const auto last = *std::max_element(ends.begin(), ends.end());
        gbps.push_back(static_cast<double>(bytes) / std::chrono::duration<double>(last - first).count() / 1e9);
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();

  uint64_t check = 0;
  for (uint64_t s : sums) check ^= s;
  nlohmann::ordered_json out = {{"threads", threads},
                        {"bytes", bytes},
                        {"repeats", repeats},
                        {"isa", isa.name},
                        {"median_gbps", median(gbps)},
                        {"max_gbps", *std::max_element(gbps.begin(), gbps.end())},
                        {"checksum", check}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace ds4::bench

int main(int argc, char** argv) {
  CLI::App app{"memory read bandwidth with T threads over a buffer beyond the last-level cache", "ds4-bench-bandwidth"};
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string bytes = "4g";
  int repeats = 5;
  app.add_option("-t,--threads", threads, "reader threads (default: logical CPUs)")->check(CLI::PositiveNumber);
  app.add_option("--bytes", bytes, "buffer size, with optional k/m/g (binary) suffix (default 4g)");
  app.add_option("--repeats", repeats, "timed passes over the buffer (default 5)")->check(CLI::PositiveNumber);
  std::string isa = "best";
  app.add_option("--isa", isa, "reader: best (default), avx512, avx2 or scalar")
      ->check(CLI::IsMember({"best", "avx512", "avx2", "scalar"}));
  CLI11_PARSE(app, argc, argv);
  try {
    return ds4::bench::run(threads, ds4::bench::parse_bytes(bytes), repeats, isa);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-bench-bandwidth: %s\n", e.what());
    return 1;
  }
}
