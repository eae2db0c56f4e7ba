#include "backend/cuda/phase_profile.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace ds4::cuda {

PhaseProfile::PhaseProfile() {
  const char* env = std::getenv("DS4_CUDA_PROFILE");
  enabled_ = env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0;
}

PhaseProfile::~PhaseProfile() {
  if (!enabled_) return;
  const std::string line = report();
  if (!line.empty()) std::fprintf(stderr, "cuda profile: %s\n", line.c_str());
}

void PhaseProfile::wait(const std::vector<int>& devices) const {
  for (int d : devices) {
    const ScopedDevice on(d);
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", d);
  }
}

void PhaseProfile::start(const std::vector<int>& devices) {
  if (!enabled_) return;
  wait(devices);
  last_ = std::chrono::steady_clock::now();
}

void PhaseProfile::mark(const char* phase, const std::vector<int>& devices) {
  if (!enabled_) return;
  wait(devices);
  const auto now = std::chrono::steady_clock::now();
  seconds_[phase] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

std::string PhaseProfile::report() const {
  double total = 0;
  for (const auto& [phase, s] : seconds_) total += s;
  if (total <= 0) return "";
  std::vector<std::pair<std::string, double>> order(seconds_.begin(), seconds_.end());
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string line;
  for (const auto& [phase, s] : order) {
    char part[160];
    std::snprintf(part, sizeof part, "%s%s %.1f %% (%.2f ms)", line.empty() ? "" : ", ", phase.c_str(),
                  100.0 * s / total, 1e3 * s);
    line += part;
  }
  return line;
}

}  // namespace ds4::cuda
