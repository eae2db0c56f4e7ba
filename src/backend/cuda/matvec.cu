// Matrix-vector products on the GPU for every weight type (decode).
//
// Fast: a warp per row. Lane l works on item l % G of block b0 + l / G (G
// items per block), the G lanes of a block add their integer sums by
// shuffles (exact), the block's first lane adds the block term to its float
// accumulator, and the warp's accumulators are added at the end.
// Reference: a thread per row adding the block terms in block order, the
// CPU scalar kernel's float order.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/quant_tables.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename F>
__global__ void matvec_fast_kernel(const uint8_t* w, int64_t row_bytes, int n_blocks, const typename F::A* act,
                                   float* y, int64_t rows, QuantTables tables) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together
  using W = typename F::W;
  const W* wr = reinterpret_cast<const W*>(w + row * row_bytes);
  constexpr int G = F::kItems;
  const int lane = threadIdx.x;
  const int item = lane % G;
  float acc = 0.0f;
  for (int b0 = 0; b0 < n_blocks; b0 += 32 / G) {
    const int b = b0 + lane / G;
    int2 sums = make_int2(0, 0);
    if (b < n_blocks) sums = F::item(wr[b], act[b], item, tables);
#pragma unroll
    for (int offset = G / 2; offset > 0; offset /= 2) {
      sums.x += __shfl_xor_sync(kFullMask, sums.x, offset);
      sums.y += __shfl_xor_sync(kFullMask, sums.y, offset);
    }
    if (b < n_blocks && item == 0) acc += F::term(wr[b], act[b], sums);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(kFullMask, acc, offset);
  if (lane == 0) y[row] = F::kFinal == 1.0f ? acc : F::kFinal * acc;
}

template <typename F>
__global__ void matvec_reference_kernel(const uint8_t* w, int64_t row_bytes, int n_blocks, const typename F::A* act,
                                        float* y, int64_t rows, QuantTables tables) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  using W = typename F::W;
  const W* wr = reinterpret_cast<const W*>(w + row * row_bytes);
  float sum = 0.0f;
  for (int b = 0; b < n_blocks; ++b) {
    int2 sums = make_int2(0, 0);
    for (int item = 0; item < F::kItems; ++item) sums = dev::operator+(sums, F::item(wr[b], act[b], item, tables));
    sum += F::term(wr[b], act[b], sums);
  }
  y[row] = F::kFinal == 1.0f ? sum : F::kFinal * sum;
}

// Float weights against f32 activations. F16 and BF16 accumulate in f32,
// F32 in double (the CPU's sums).
template <GgmlType T>
struct FloatWeight;
template <>
struct FloatWeight<GgmlType::F32> {
  using E = float;
  using Acc = double;
  __device__ static float value(E v) { return v; }
};
template <>
struct FloatWeight<GgmlType::F16> {
  using E = uint16_t;
  using Acc = float;
  __device__ static float value(E v) { return dev::f16_to_f32(v); }
};
template <>
struct FloatWeight<GgmlType::BF16> {
  using E = uint16_t;
  using Acc = float;
  __device__ static float value(E v) { return dev::bf16_to_f32(v); }
};

template <GgmlType T>
__global__ void matvec_float_fast_kernel(const void* w, int64_t cols, const float* x, float* y, int64_t rows) {
  using FW = FloatWeight<T>;
  using Acc = typename FW::Acc;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const typename FW::E* wr = static_cast<const typename FW::E*>(w) + row * cols;
  Acc acc = 0;
  for (int64_t i = threadIdx.x; i < cols; i += 32)
    acc += static_cast<Acc>(FW::value(wr[i])) * static_cast<Acc>(x[i]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(kFullMask, acc, offset);
  if (threadIdx.x == 0) y[row] = static_cast<float>(acc);
}

template <GgmlType T>
__global__ void matvec_float_reference_kernel(const void* w, int64_t cols, const float* x, float* y, int64_t rows) {
  using FW = FloatWeight<T>;
  using Acc = typename FW::Acc;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const typename FW::E* wr = static_cast<const typename FW::E*>(w) + row * cols;
  Acc sum = 0;
  if constexpr (T == GgmlType::F32) {
    for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(wr[i]) * x[i];
  } else {
    for (int64_t i = 0; i < cols; ++i) sum += FW::value(wr[i]) * x[i];
  }
  y[row] = static_cast<float>(sum);
}

template <GgmlType T>
void launch_float(const void* w, int64_t rows, int64_t cols, const float* x, float* y, MatvecOrder order,
                  cudaStream_t stream) {
  if (order == MatvecOrder::Fast) {
    const dim3 block(32, kWarpsPerBlock);
    const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    matvec_float_fast_kernel<T><<<grid, block, 0, stream>>>(w, cols, x, y, rows);
  } else {
    matvec_float_reference_kernel<T><<<static_cast<unsigned>((rows + 127) / 128), 128, 0, stream>>>(w, cols, x, y, rows);
  }
}

}  // namespace

bool weight_type_supported(GgmlType type) {
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) return true;
  return dev::visit_quant_format(type, [](auto) {});
}

void matvec(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* act, float* y, MatvecOrder order,
            cudaStream_t stream) {
  if (rows == 0) return;
  int device = -1;
  (void)cudaGetDevice(&device);
  switch (type) {
    case GgmlType::F32:
      launch_float<GgmlType::F32>(w, rows, cols, static_cast<const float*>(act), y, order, stream);
      cuda_check_launch("matvec f32", device);
      return;
    case GgmlType::F16:
      launch_float<GgmlType::F16>(w, rows, cols, static_cast<const float*>(act), y, order, stream);
      cuda_check_launch("matvec f16", device);
      return;
    case GgmlType::BF16:
      launch_float<GgmlType::BF16>(w, rows, cols, static_cast<const float*>(act), y, order, stream);
      cuda_check_launch("matvec bf16", device);
      return;
    default:
      break;
  }
  const QuantTables& tables = quant_tables();
  const bool known = dev::visit_quant_format(type, [&](auto format) {
    using F = decltype(format);
    constexpr int64_t kBlockElems = F::kItems * 32;
    if (cols % kBlockElems != 0)
      throw Error("matvec: a row of " + std::to_string(cols) + " " + std::string(ggml_type_name(type)) +
                  " values is not a whole number of blocks");
    const int n_blocks = static_cast<int>(cols / kBlockElems);
    const int64_t row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::W));
    const auto* a = static_cast<const typename F::A*>(act);
    const auto* wb = static_cast<const uint8_t*>(w);
    if (order == MatvecOrder::Fast) {
      const dim3 block(32, kWarpsPerBlock);
      const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
      matvec_fast_kernel<F><<<grid, block, 0, stream>>>(wb, row_bytes, n_blocks, a, y, rows, tables);
    } else {
      matvec_reference_kernel<F><<<static_cast<unsigned>((rows + 127) / 128), 128, 0, stream>>>(wb, row_bytes, n_blocks,
                                                                                               a, y, rows, tables);
    }
  });
  if (!known) throw Error("matvec: no GPU kernel for weight type " + std::string(ggml_type_name(type)));
  cuda_check_launch("matvec", device);
}

}  // namespace ds4::cuda
