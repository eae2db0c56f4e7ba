// Matrix-vector products on the GPU for every weight type (decode).
//
// Fast: a warp per row. Lane l works on item l % G of block b0 + l / G (G
// items per block), the G lanes of a block add their integer sums by
// shuffles (exact), the block's first lane adds the block term to its float
// accumulator, and the warp's accumulators are added at the end.
// Reference: a thread per row adding the block terms in block order, the
// CPU scalar kernel's float order.
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_kernels.h"
#include "backend/cuda/quant_tables.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr unsigned kFullMask = 0xffffffffu;

// N activations at once (batched decode: each weight block is read once for
// all of them); activation a at act + a * act_stride blocks, its outputs at
// y + a * ldy. Grid row g (blockIdx.y) takes activations gN .. gN + N - 1
// and, with ids, the matrix ids[g] of a 3-D weight (matrix_bytes apart: the
// routed experts of decode's token-slot pairs, N = 1; a negative id gives
// zeros). Each activation's
// sums follow the same lanes and order whatever N and g are, so its result
// does not depend on the batch.
template <typename F, int N>
__global__ void matvec_fast_kernel(const uint8_t* w, int64_t row_bytes, int n_blocks, const typename F::A* act,
                                   int64_t act_stride, float* y, int64_t ldy, int64_t rows, QuantTables tables,
                                   const int32_t* ids, int64_t matrix_bytes) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;  // whole warps leave together
  using W = typename F::W;
  const int64_t g = blockIdx.y;
  act += g * N * act_stride;
  y += g * N * ldy;
  if (ids) {
    // A negative id: another GPU's expert (tensor parallel); this pair's
    // part here is zero.
    if (ids[g] < 0) {
      if (threadIdx.x == 0) y[row] = 0.0f;
      return;
    }
    w += ids[g] * matrix_bytes;
  }
  const W* wr = reinterpret_cast<const W*>(w + row * row_bytes);
  constexpr int G = F::kItems;
  const int lane = threadIdx.x;
  const int item = lane % G;
  float acc[N];
#pragma unroll
  for (int a = 0; a < N; ++a) acc[a] = 0.0f;
  for (int b0 = 0; b0 < n_blocks; b0 += 32 / G) {
    const int b = b0 + lane / G;
#pragma unroll
    for (int a = 0; a < N; ++a) {
      const typename F::A* x = act + a * act_stride;
      int2 sums = make_int2(0, 0);
      if (b < n_blocks) sums = F::item(wr[b], x[b], item, tables);
#pragma unroll
      for (int offset = G / 2; offset > 0; offset /= 2) {
        sums.x += __shfl_xor_sync(kFullMask, sums.x, offset);
        sums.y += __shfl_xor_sync(kFullMask, sums.y, offset);
      }
      if (b < n_blocks && item == 0) acc[a] += F::term(wr[b], x[b], sums);
    }
  }
#pragma unroll
  for (int a = 0; a < N; ++a) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[a] += __shfl_xor_sync(kFullMask, acc[a], offset);
    if (lane == 0) y[a * ldy + row] = F::kFinal == 1.0f ? acc[a] : F::kFinal * acc[a];
  }
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

template <GgmlType T, int N>
__global__ void matvec_float_fast_kernel(const void* w, int64_t cols, const float* x, int64_t x_stride, float* y,
                                         int64_t ldy, int64_t rows) {
  using FW = FloatWeight<T>;
  using Acc = typename FW::Acc;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const typename FW::E* wr = static_cast<const typename FW::E*>(w) + row * cols;
  Acc acc[N];
#pragma unroll
  for (int a = 0; a < N; ++a) acc[a] = 0;
  for (int64_t i = threadIdx.x; i < cols; i += 32) {
    const Acc v = static_cast<Acc>(FW::value(wr[i]));
#pragma unroll
    for (int a = 0; a < N; ++a) acc[a] += v * static_cast<Acc>(x[a * x_stride + i]);
  }
#pragma unroll
  for (int a = 0; a < N; ++a) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[a] += __shfl_xor_sync(kFullMask, acc[a], offset);
    if (threadIdx.x == 0) y[a * ldy + row] = static_cast<float>(acc[a]);
  }
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

// Chunks of 4, 2 and 1 activations: the batch sizes the fast kernels are
// built for. launch(n, first) runs activations [first, first + n).
template <typename Launch>
void in_batches(int n_acts, Launch&& launch) {
  int first = 0;
  for (int n : {4, 2, 1})
    for (; n_acts - first >= n; first += n) launch(n, first);
}

template <GgmlType T>
void launch_float_fast(const void* w, int64_t rows, int64_t cols, const float* x, int n_acts, float* y, int64_t ldy,
                       cudaStream_t stream) {
  const dim3 block(32, kWarpsPerBlock);
  const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  in_batches(n_acts, [&](int n, int first) {
    const float* xa = x + first * cols;
    float* ya = y + first * ldy;
    if (n == 4) matvec_float_fast_kernel<T, 4><<<grid, block, 0, stream>>>(w, cols, xa, cols, ya, ldy, rows);
    if (n == 2) matvec_float_fast_kernel<T, 2><<<grid, block, 0, stream>>>(w, cols, xa, cols, ya, ldy, rows);
    if (n == 1) matvec_float_fast_kernel<T, 1><<<grid, block, 0, stream>>>(w, cols, xa, cols, ya, ldy, rows);
  });
}

template <GgmlType T>
void launch_float_reference(const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream) {
  matvec_float_reference_kernel<T><<<static_cast<unsigned>((rows + 127) / 128), 128, 0, stream>>>(w, cols, x, y, rows);
}

// Calls f(integral_constant<GgmlType, T>) for F32, F16 and BF16; false for
// other types.
template <typename Fn>
bool visit_float_type(GgmlType type, Fn&& f) {
  switch (type) {
    case GgmlType::F32: f(std::integral_constant<GgmlType, GgmlType::F32>{}); return true;
    case GgmlType::F16: f(std::integral_constant<GgmlType, GgmlType::F16>{}); return true;
    case GgmlType::BF16: f(std::integral_constant<GgmlType, GgmlType::BF16>{}); return true;
    default: return false;
  }
}

// The block count of a row of `cols` values of format F (ds4::Error when
// not whole).
template <typename F>
int row_blocks(GgmlType type, int64_t cols) {
  constexpr int64_t kBlockElems = F::kItems * 32;
  if (cols % kBlockElems != 0)
    throw Error("matvec: a row of " + std::to_string(cols) + " " + std::string(ggml_type_name(type)) +
                " values is not a whole number of blocks");
  return static_cast<int>(cols / kBlockElems);
}

}  // namespace

bool weight_type_supported(GgmlType type) {
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) return true;
  return dev::visit_quant_format(type, [](auto) {});
}

void matvec_batch(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* acts, int n_acts, float* y,
                  int64_t ldy, cudaStream_t stream) {
  if (rows == 0 || n_acts == 0) return;
  if (n_acts < 0) throw Error("matvec: a negative activation count");
  int device = -1;
  (void)cudaGetDevice(&device);
  if (visit_float_type(type, [&](auto t) {
        launch_float_fast<decltype(t)::value>(w, rows, cols, static_cast<const float*>(acts), n_acts, y, ldy, stream);
      })) {
    cuda_check_launch("matvec", device);
    return;
  }
  const QuantTables& tables = quant_tables();
  const bool known = dev::visit_quant_format(type, [&](auto format) {
    using F = decltype(format);
    const int n_blocks = row_blocks<F>(type, cols);
    const int64_t row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::W));
    // The activation rows are back to back: one row is the quantized form of
    // cols values, n_blocks of its blocks.
    const auto* a = static_cast<const typename F::A*>(acts);
    const auto* wb = static_cast<const uint8_t*>(w);
    const dim3 block(32, kWarpsPerBlock);
    const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    in_batches(n_acts, [&](int n, int first) {
      const auto* af = a + static_cast<int64_t>(first) * n_blocks;
      float* yf = y + first * ldy;
      if (n == 4)
        matvec_fast_kernel<F, 4><<<grid, block, 0, stream>>>(wb, row_bytes, n_blocks, af, n_blocks, yf, ldy, rows,
                                                             tables, nullptr, 0);
      if (n == 2)
        matvec_fast_kernel<F, 2><<<grid, block, 0, stream>>>(wb, row_bytes, n_blocks, af, n_blocks, yf, ldy, rows,
                                                             tables, nullptr, 0);
      if (n == 1)
        matvec_fast_kernel<F, 1><<<grid, block, 0, stream>>>(wb, row_bytes, n_blocks, af, n_blocks, yf, ldy, rows,
                                                             tables, nullptr, 0);
    });
  });
  if (!known) throw Error("matvec: no GPU kernel for weight type " + std::string(ggml_type_name(type)));
  cuda_check_launch("matvec", device);
}

void matvec_experts(GgmlType type, const void* w, int64_t rows, int64_t cols, const int32_t* ids, int n_pairs,
                    const void* acts, float* y, int64_t ldy, cudaStream_t stream) {
  if (rows == 0 || n_pairs == 0) return;
  if (n_pairs < 0 || n_pairs > 65535) throw Error("matvec_experts: " + std::to_string(n_pairs) + " pairs (1..65535)");
  int device = -1;
  (void)cudaGetDevice(&device);
  const QuantTables& tables = quant_tables();
  const bool known = dev::visit_quant_format(type, [&](auto format) {
    using F = decltype(format);
    const int n_blocks = row_blocks<F>(type, cols);
    const int64_t row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::W));
    const dim3 block(32, kWarpsPerBlock);
    const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock), static_cast<unsigned>(n_pairs));
    matvec_fast_kernel<F, 1><<<grid, block, 0, stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_blocks,
                                                         static_cast<const typename F::A*>(acts), n_blocks, y, ldy,
                                                         rows, tables, ids, rows * row_bytes);
  });
  if (!known) throw Error("matvec_experts: no GPU kernel for weight type " + std::string(ggml_type_name(type)));
  cuda_check_launch("matvec_experts", device);
}

void matvec(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* act, float* y, MatvecOrder order,
            cudaStream_t stream) {
  if (order == MatvecOrder::Fast) return matvec_batch(type, w, rows, cols, act, 1, y, rows, stream);
  if (rows == 0) return;
  int device = -1;
  (void)cudaGetDevice(&device);
  if (visit_float_type(type, [&](auto t) {
        launch_float_reference<decltype(t)::value>(w, rows, cols, static_cast<const float*>(act), y, stream);
      })) {
    cuda_check_launch("matvec", device);
    return;
  }
  const QuantTables& tables = quant_tables();
  const bool known = dev::visit_quant_format(type, [&](auto format) {
    using F = decltype(format);
    const int n_blocks = row_blocks<F>(type, cols);
    const int64_t row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::W));
    matvec_reference_kernel<F><<<static_cast<unsigned>((rows + 127) / 128), 128, 0, stream>>>(
        static_cast<const uint8_t*>(w), row_bytes, n_blocks, static_cast<const typename F::A*>(act), y, rows, tables);
  });
  if (!known) throw Error("matvec: no GPU kernel for weight type " + std::string(ggml_type_name(type)));
  cuda_check_launch("matvec", device);
}

}  // namespace ds4::cuda
