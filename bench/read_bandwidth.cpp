// Memory read bandwidth with T threads (core/read_bandwidth.h): the ceiling for
// decode, which streams every weight once per token. R timed passes over a
// buffer far beyond the last-level cache (default 4 GiB); one JSON line
// reports the median and the best, in GB/s (1e9 B/s).
//
// Run: ds4-bench-bandwidth [--threads T] [--bytes N[k|m|g]] [--repeats R] [--isa avx512|avx2|scalar]
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/read_bandwidth.h"
#include "version/version.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int run(int threads, const std::string& bytes_arg, int repeats, const std::string& isa) {
  const std::optional<uint64_t> bytes = ds4::parse_size(bytes_arg);
  if (!bytes) throw ds4::Error("--bytes '" + bytes_arg + "' is not a byte count (digits, then k, m or g)");
  ds4::ReadBandwidth probe(static_cast<size_t>(*bytes), threads, isa);
  std::vector<double> gbps;
  for (int r = 0; r < repeats; ++r) gbps.push_back(probe.pass());
  nlohmann::ordered_json out = {{"threads", threads},
                                {"bytes", probe.bytes()},
                                {"repeats", repeats},
                                {"isa", probe.isa()},
                                {"median_gbps", median(gbps)},
                                {"max_gbps", *std::max_element(gbps.begin(), gbps.end())},
                                {"checksum", probe.checksum()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memory read bandwidth with T threads over a buffer beyond the last-level cache", "ds4-bench-bandwidth"};
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.set_version_flag("--version", ds4::version_line("ds4-bench-bandwidth"), "print the version and git commit and exit");
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
    return run(threads, bytes, repeats, isa);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-bench-bandwidth: %s\n", e.what());
    return 1;
  }
}
