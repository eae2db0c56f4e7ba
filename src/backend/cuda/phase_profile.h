// Where a GPU evaluation's time goes, when DS4_CUDA_PROFILE is set in the
// environment (docs/cuda.md): the backend marks the end of each phase of a
// chunk (embedding, HC mixes, attention, MoE, head, ...); each mark waits
// for every GPU to finish what was queued, so a phase's time is its kernels
// plus the host work that queued them. That serialises the GPUs and the host
// (slower runs): a diagnostic for a GPU machine's one short check, not a
// mode to serve in. The totals go to stderr when the backend goes.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ds4::cuda {

class PhaseProfile {
 public:
  // Enabled by DS4_CUDA_PROFILE (any value but empty or 0).
  PhaseProfile();
  ~PhaseProfile();
  PhaseProfile(const PhaseProfile&) = delete;
  PhaseProfile& operator=(const PhaseProfile&) = delete;

  bool enabled() const { return enabled_; }
  // Starts timing (after waiting for the GPUs): the next mark's phase starts now.
  void start(const std::vector<int>& devices);
  // The time since the last start or mark goes to `phase` (after waiting
  // for the GPUs). Nothing when disabled.
  void mark(const char* phase, const std::vector<int>& devices);
  // "phase 41.2 % (123.40 ms), ..." by time, largest first; empty when nothing was timed.
  std::string report() const;

 private:
  void wait(const std::vector<int>& devices) const;
  bool enabled_ = false;
  std::chrono::steady_clock::time_point last_;
  std::map<std::string, double> seconds_;
};

}  // namespace ds4::cuda
