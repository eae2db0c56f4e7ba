// Dequantizers on the GPU: a thread per 32-value item, each value formed by
// the host dequantizer's float operations (bit-identical f32), then rounded
// to f16 or bf16 when asked (the cuBLAS products' inputs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/quant_tables.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kThreads = 128;

template <typename Out>
__device__ __forceinline__ Out convert(float v);
template <>
__device__ __forceinline__ float convert<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half convert<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename F, typename Out>
__global__ void dequant_kernel(const typename F::W* w, Out* y, int64_t n_items, QuantTables tables) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n_items) return;
  float v[32];
  F::dequant(w[i / F::kItems], static_cast<int>(i % F::kItems), tables, v);
  Out* out = y + 32 * i;
#pragma unroll
  for (int j = 0; j < 32; ++j) out[j] = convert<Out>(v[j]);
}

template <GgmlType T, typename Out>
__global__ void dequant_float_kernel(const void* w, Out* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float v;
  if constexpr (T == GgmlType::F32) {
    v = static_cast<const float*>(w)[i];
  } else if constexpr (T == GgmlType::F16) {
    v = dev::f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  } else {
    v = dev::bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
  y[i] = convert<Out>(v);
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename Out>
void dequantize_to(GgmlType type, const void* w, Out* y, int64_t n, cudaStream_t stream) {
  switch (type) {
    case GgmlType::F32:
      dequant_float_kernel<GgmlType::F32, Out><<<grid_for(n), kThreads, 0, stream>>>(w, y, n);
      return;
    case GgmlType::F16:
      dequant_float_kernel<GgmlType::F16, Out><<<grid_for(n), kThreads, 0, stream>>>(w, y, n);
      return;
    case GgmlType::BF16:
      dequant_float_kernel<GgmlType::BF16, Out><<<grid_for(n), kThreads, 0, stream>>>(w, y, n);
      return;
    default:
      break;
  }
  const QuantTables& tables = quant_tables();
  const bool known = dev::visit_quant_format(type, [&](auto format) {
    using F = decltype(format);
    if (n % (32 * F::kItems) != 0)
      throw Error("dequantize: " + std::to_string(n) + " " + std::string(ggml_type_name(type)) +
                  " values are not a whole number of blocks");
    const int64_t n_items = n / 32;
    dequant_kernel<F, Out><<<grid_for(n_items), kThreads, 0, stream>>>(static_cast<const typename F::W*>(w), y,
                                                                         n_items, tables);
  });
  if (!known) throw Error("dequantize: no GPU kernel for weight type " + std::string(ggml_type_name(type)));
}

}  // namespace

void dequantize(GgmlType type, const void* w, void* y, DequantTo to, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  int device = -1;
  (void)cudaGetDevice(&device);
  switch (to) {
    case DequantTo::F32:
      dequantize_to(type, w, static_cast<float*>(y), n, stream);
      break;
    case DequantTo::F16:
      dequantize_to(type, w, static_cast<__half*>(y), n, stream);
      break;
    case DequantTo::BF16:
      dequantize_to(type, w, static_cast<__nv_bfloat16*>(y), n, stream);
      break;
  }
  cuda_check_launch("dequantize", device);
}

}  // namespace ds4::cuda
