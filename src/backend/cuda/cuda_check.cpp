#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace ds4::cuda {

std::string cuda_error_message(cudaError_t error, const char* call, int device) {
  std::string where = "";
  if (device >= 0) {
    where = " on GPU " + std::to_string(device);
    // The name, when the device still answers (it may be what failed).
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) where += std::string(" (") + prop.name + ")";
  }
  return std::string(call) + where + ": " + cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")";
}

int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
}

ScopedDevice::ScopedDevice(int device) : previous_(current_device()) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice", device);
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

void cuda_check(cudaError_t error, const char* call, int device) {
  if (error != cudaSuccess) throw Error(cuda_error_message(error, call, device));
}

void cuda_check_launch(const char* kernel, int device) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) throw Error(cuda_error_message(error, (std::string("launch of ") + kernel).c_str(), device));
}

}  // namespace ds4::cuda
