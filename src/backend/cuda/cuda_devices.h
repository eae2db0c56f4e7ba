// The CUDA GPUs this process can use, as the placement and the logs see
// them. Asking never throws: without a driver or a GPU the list is empty and
// says why in one line, and the engine runs on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds4::cuda {

// The oldest architecture the kernels are built for (Ampere, sm_80).
inline constexpr int kMinComputeMajor = 8;

struct GpuDevice {
  int index = 0;  // CUDA device number (after CUDA_VISIBLE_DEVICES)
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // when listed
  // Empty when the kernels run on it; else why not (one line).
  std::string unsupported;
};

struct GpuList {
  std::vector<GpuDevice> devices;
  // Why there are none (no driver, no device, a driver older than the
  // runtime), one line; empty when devices were found.
  std::string unavailable;
};

GpuList list_gpus();

// "GPU 0: NVIDIA H100 80GB HBM3, compute 9.0, 132 SMs, 79.1 GiB free of 79.6 GiB"
std::string describe(const GpuDevice& gpu);

}  // namespace ds4::cuda
