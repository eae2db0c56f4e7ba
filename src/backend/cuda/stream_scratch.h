// Device memory for one call's temporaries (tables, intermediate rows),
// taken from the stream-ordered allocator and given back in the stream's
// order when the object goes: the kernels queued before that still see it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace ds4::cuda {

// Lets the current device's stream-ordered allocator keep up to `bytes` of
// freed memory for the next allocations instead of returning it at every
// synchronisation (its default): a decode step synchronises once per token
// (the logits), and would otherwise map its temporaries afresh each token.
inline void keep_scratch_memory(uint64_t bytes) {
  const int device = current_device();
  cudaMemPool_t pool = nullptr;
  cuda_check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool", device);
  cuda_check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes), "cudaMemPoolSetAttribute",
             device);
}

class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) cuda_check(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync", current_device());
  }
  ~StreamScratch() {
    if (data_) (void)cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <typename T>
  T* as(size_t offset_bytes = 0) const {
    return static_cast<T*>(static_cast<void*>(static_cast<char*>(data_) + offset_bytes));
  }
  // Host -> this scratch, ordered on the stream (pageable memory is staged
  // before the call returns, so `host` may go away afterwards).
  void upload(size_t offset_bytes, const void* host, size_t bytes) const {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(as<char>(offset_bytes), host, bytes, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync to the GPU", current_device());
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace ds4::cuda
