// Device memory owned by one object (cudaMalloc / cudaFree), on the GPU that
// was current when it was made. Moves, never copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace ds4::cuda {

// How a buffer is allocated: cudaMalloc (weights, session state: long-lived),
// or from the device's stream-ordered pool on its legacy default stream
// (per-chunk activations: taken and given back every step without the
// device-wide synchronisation cudaFree implies).
enum class Allocation { Plain, StreamOrdered };

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // bytes on the current device (ds4::Error naming the device when it
  // cannot be had); 0 bytes: no allocation.
  explicit DeviceBuffer(size_t bytes, Allocation how = Allocation::Plain)
      : bytes_(bytes), ordered_(how == Allocation::StreamOrdered) {
    cuda_check(cudaGetDevice(&device_), "cudaGetDevice", -1);
    if (bytes == 0) return;
    if (ordered_)
      cuda_check(cudaMallocAsync(&data_, bytes, nullptr), "cudaMallocAsync", device_);
    else
      cuda_check(cudaMalloc(&data_, bytes), "cudaMalloc", device_);
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      device_ = other.device_;
      ordered_ = other.ordered_;
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
    if (data_ && ordered_) {
      // On the owning device's legacy stream, after the work queued there.
      int current = -1;
      (void)cudaGetDevice(&current);
      if (current != device_) (void)cudaSetDevice(device_);
      (void)cudaFreeAsync(data_, nullptr);
      if (current != device_) (void)cudaSetDevice(current);
    } else if (data_) {
      (void)cudaFree(data_);
    }
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
  bool ordered_ = false;
};

}  // namespace ds4::cuda
