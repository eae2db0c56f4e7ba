#include "backend/cuda/cuda_devices.h"

#include <cuda_runtime_api.h>

#include "core/byte_size.h"

namespace ds4::cuda {

namespace {

std::string error_line(cudaError_t error) {
  return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
}

}  // namespace

GpuList list_gpus() {
  GpuList list;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    list.unavailable = error == cudaSuccess ? "no CUDA GPU is visible" : "no CUDA GPU: " + error_line(error);
    (void)cudaGetLastError();  // clear the sticky error for later calls
    return list;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    GpuDevice gpu;
    gpu.index = i;
    const cudaError_t prop_error = cudaGetDeviceProperties(&prop, i);
    if (prop_error != cudaSuccess) {
      gpu.name = "?";
      gpu.unsupported = "its properties cannot be read: " + error_line(prop_error);
      list.devices.push_back(gpu);
      continue;
    }
    gpu.name = prop.name;
    gpu.compute_major = prop.major;
    gpu.compute_minor = prop.minor;
    gpu.sm_count = prop.multiProcessorCount;
    gpu.total_bytes = prop.totalGlobalMem;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      gpu.free_bytes = free_bytes;
    } else {
      gpu.unsupported = "its memory cannot be queried: " + error_line(cudaGetLastError());
    }
    if (gpu.unsupported.empty() && prop.major < kMinComputeMajor) {
      gpu.unsupported = "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                        " is older than Ampere (8.0), the oldest the kernels are built for";
    }
    list.devices.push_back(gpu);
  }
  return list;
}

std::string describe(const GpuDevice& gpu) {
  std::string line = "GPU " + std::to_string(gpu.index) + ": " + gpu.name + ", compute " +
                     std::to_string(gpu.compute_major) + "." + std::to_string(gpu.compute_minor) + ", " +
                     std::to_string(gpu.sm_count) + " SMs, " + format_size(gpu.free_bytes) + " free of " +
                     format_size(gpu.total_bytes);
  if (!gpu.unsupported.empty()) line += " (not usable: " + gpu.unsupported + ")";
  return line;
}

}  // namespace ds4::cuda
