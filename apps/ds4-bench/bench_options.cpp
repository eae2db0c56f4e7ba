#include "bench_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "common/engine_flags.h"
#include "core/byte_size.h"
#include "core/error.h"

namespace ds4::bench {

namespace {

void check_at_least_1(int64_t v, const char* flag) {
  if (v < 1) throw Error(std::string(flag) + " must be at least 1 (got " + std::to_string(v) + ")");
}

void check_input_file(const std::string& path, const char* flag) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(std::string(flag) + " " + path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw Error(std::string(flag) + " " + path + ": is a directory");
}

}  // namespace

void validate(const Options& o) {
  const int inputs = !o.prompt_file.empty() + !o.chat_prompt_file.empty() + !o.tokens_file.empty();
  if (inputs != 1)
    throw Error(std::string(inputs == 0 ? "no input" : "conflicting inputs") +
                ": give exactly one of --prompt-file, --chat-prompt-file, --tokens-file");
  if (o.system && o.chat_prompt_file.empty()) throw Error("-sys/--system needs --chat-prompt-file");
  check_at_least_1(o.ctx_start, "--ctx-start");
  check_at_least_1(o.ctx_max, "--ctx-max");
  check_at_least_1(o.step_incr, "--step-incr");
  check_at_least_1(o.gen_tokens, "-n/--gen-tokens");
  check_at_least_1(o.sessions, "--sessions");
  if (o.sessions > kMaxSessions)
    throw Error("--sessions " + std::to_string(o.sessions) + " is above " + std::to_string(kMaxSessions));
  app::check_engine_flags(o.engine);
  if (o.ctx_alloc) check_at_least_1(*o.ctx_alloc, "--ctx-alloc");
  if (o.ctx_start > o.ctx_max)
    throw Error("--ctx-start " + std::to_string(o.ctx_start) + " is above --ctx-max " + std::to_string(o.ctx_max));
  if (o.step_mul && !(*o.step_mul > 1.0 && std::isfinite(*o.step_mul))) {
    char got[64];
    std::snprintf(got, sizeof got, "%g", *o.step_mul);
    throw Error(std::string("--step-mul must be a number above 1 (got ") + got + ")");
  }
  if (!o.prompt_file.empty()) check_input_file(o.prompt_file, "--prompt-file");
  if (!o.chat_prompt_file.empty()) check_input_file(o.chat_prompt_file, "--chat-prompt-file");
  if (!o.tokens_file.empty()) check_input_file(o.tokens_file, "--tokens-file");
  if (!o.read_bandwidth.empty()) {
    const std::optional<uint64_t> bytes = parse_size(o.read_bandwidth);
    if (!bytes) throw Error("--read-bandwidth '" + o.read_bandwidth + "' is not a byte count (digits, then k, m or g)");
    const uint64_t least = uint64_t{1024} * static_cast<uint64_t>(o.engine.threads);
    if (*bytes < least)
      throw Error("--read-bandwidth " + o.read_bandwidth + " is below 1 KiB per thread (" + std::to_string(least) +
                  " bytes for -t " + std::to_string(o.engine.threads) + ")");
  }
  check_input_file(o.engine.model_path, "-m/--model");
}

uint64_t read_bandwidth_bytes(const Options& o) {
  return o.read_bandwidth.empty() ? 0 : parse_size(o.read_bandwidth).value_or(0);
}

std::vector<int64_t> frontiers(int64_t ctx_start, int64_t ctx_max, int64_t step_incr, std::optional<double> step_mul) {
  std::vector<int64_t> out{ctx_start};
  while (out.back() < ctx_max) {
    const int64_t prev = out.back();
    int64_t next = step_incr >= ctx_max - prev ? ctx_max : prev + step_incr;  // no overflow near INT64_MAX
    if (step_mul) {
      const double scaled = std::round(static_cast<double>(prev) * *step_mul);
      next = scaled >= static_cast<double>(ctx_max) ? ctx_max : static_cast<int64_t>(scaled);
    }
    out.push_back(std::min(std::max(next, prev + 1), ctx_max));
  }
  return out;
}

}  // namespace ds4::bench
