// CUDA errors as ds4::Error naming the call and the device, so a report says
// which GPU failed and where (not a bare "an illegal memory access").
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace ds4::cuda {

// "cudaMalloc on GPU 1 (NVIDIA H100 80GB HBM3): out of memory
// (cudaErrorMemoryAllocation)". device -1: no device involved yet.
std::string cuda_error_message(cudaError_t error, const char* call, int device);

// The GPU current on this thread (-1 when there is none to ask).
int current_device();

// Makes `device` current for the scope, then puts the previous one back.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

// Throws ds4::Error with that message unless error is cudaSuccess.
void cuda_check(cudaError_t error, const char* call, int device);

// The same after a kernel launch: the launch's own error (bad configuration,
// no kernel image for this GPU), named after the kernel.
void cuda_check_launch(const char* kernel, int device);

}  // namespace ds4::cuda
