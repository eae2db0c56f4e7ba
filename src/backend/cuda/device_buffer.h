// Device memory owned by one object (cudaMalloc / cudaFree), on the GPU that
// was current when it was made. Moves, never copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace ds4::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // bytes on the current device (ds4::Error naming the device when it
  // cannot be had); 0 bytes: no allocation.
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda_check(cudaGetDevice(&device_), "cudaGetDevice", -1);
    if (bytes > 0) cuda_check(cudaMalloc(&data_, bytes), "cudaMalloc", device_);
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      device_ = other.device_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }
  int device() const { return device_; }

  // Host -> device and back, synchronously, `bytes` from the start.
  void upload(const void* host, size_t bytes) {
    cuda_check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU", device_);
  }
  void download(void* host, size_t bytes) const {
    cuda_check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU", device_);
  }

 private:
  void release() {
    if (data_) (void)cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace ds4::cuda
