// Prefill products of quantized weights on the int8 tensor cores: the tile
// arithmetic of mmq_tile.cuh with the real mma (sm_80 and newer: every
// architecture this backend builds for).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mmq_tile.cuh"
#include "backend/cuda/quant_kernels.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

// D = A B for one m16n8k16 int8 fragment triple (C = 0), exact in int32. A
// pure function of its registers (not volatile: the compiler may schedule it).
__device__ __forceinline__ void mma_s8_m16n8k16(const int a[2], int b, int d[4]) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0));
}

static_assert(kInt8TaskTokens == mmq::kTileTokens);

// Thread block (x, y): mmq::block_work(..., x, y, ...).
template <typename F>
__global__ void __launch_bounds__(mmq::kThreads)
    mmq_kernel(const uint8_t* w, int64_t row_bytes, int n_blocks, int64_t rows, const uint8_t* acts,
               int64_t act_row_bytes, int64_t n_tokens, float* y, int64_t ldy, QuantTables tables,
               const Int8Task* tasks, int64_t matrix_bytes) {
  using T = mmq::Tile<F>;
  __shared__ typename T::Shared sh;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const mmq::BlockWork work =
      mmq::block_work(w, acts, y, rows, n_tokens, blockIdx.x, blockIdx.y, tasks, matrix_bytes, act_row_bytes, ldy);
  mmq::Step step = work.step;
  mmq::LaneSums sums = {};
  for (int b0 = 0; b0 < n_blocks; b0 += T::kBlocksPerStep) {
    step.block0 = b0;
    step.n_blocks = n_blocks - b0 < T::kBlocksPerStep ? n_blocks - b0 : T::kBlocksPerStep;
    __syncthreads();  // the last step's blocks are read
    T::stage(sh, step, work.w, row_bytes, work.acts, act_row_bytes, static_cast<int>(threadIdx.x), mmq::kThreads);
    __syncthreads();
    for (int j = 0; j < step.n_blocks; ++j) {
#pragma unroll 1
      for (int s = 0; s < F::kItems; ++s) {
        mmq::WeightFragments f;
        T::weight_fragments(sh, warp, lane, j, s, tables, f);
#pragma unroll
        for (int n = 0; n < mmq::kTokenGroups; ++n) {
          int lo[4], hi[4];
          mma_s8_m16n8k16(f.a[0], T::act_fragment(sh, lane, n, j, s, 0), lo);
          mma_s8_m16n8k16(f.a[1], T::act_fragment(sh, lane, n, j, s, 1), hi);
          T::add_item(sums, sh, f, lane, n, j, s, lo, hi);
        }
      }
      T::add_block_terms(sums, sh, warp, lane, j);
    }
  }
  T::store(sums, step, warp, lane, work.y, ldy);
}

}  // namespace

bool int8_tensor_core_type(GgmlType type) {
  bool supported = false;
  dev::visit_quant_format(type, [&](auto format) { supported = decltype(format)::kTensorCores; });
  return supported;
}

namespace {

// The launch of matmul_int8 (tasks null: token tiles of n_tokens) and of
// matmul_int8_tasks (n_tasks thread block columns). Everything is checked
// before any device call, so that the refusals need no GPU.
void launch_int8(const char* what, GgmlType type, const void* w, int64_t matrix_bytes, int64_t rows, int64_t cols,
                 const void* acts, int64_t n_tokens, const Int8Task* tasks, int64_t n_tasks, float* y, int64_t ldy,
                 cudaStream_t stream) {
  const std::string name(what);
  if (!int8_tensor_core_type(type))
    throw Error(name + ": weight type " + std::string(ggml_type_name(type)) + " has no int8 tensor-core kernel");
  if (rows < 0 || n_tokens < 0 || n_tasks < 0 || cols <= 0) throw Error(name + ": a negative or empty shape");
  if (ldy < rows) throw Error(name + ": output stride " + std::to_string(ldy) + " is below the row count");
  const int64_t row_tiles = (rows + mmq::kTileRows - 1) / mmq::kTileRows;
  const int64_t columns = tasks ? n_tasks : (n_tokens + mmq::kTileTokens - 1) / mmq::kTileTokens;
  if (row_tiles > 0x7fffffff || columns > 65535)
    throw Error(name + ": " + (tasks ? std::to_string(n_tasks) + " tasks" : std::to_string(n_tokens) + " tokens") +
                " by " + std::to_string(rows) + " rows is beyond one launch");
  auto launch = [&](auto format, bool run) {
    using F = decltype(format);
    if constexpr (F::kTensorCores) {
      using T = mmq::Tile<F>;
      if (cols % T::kBlockValues != 0)
        throw Error(name + ": a row of " + std::to_string(cols) + " " + std::string(ggml_type_name(type)) +
                    " values is not a whole number of blocks");
      // The copy units read whole aligned words.
      if (reinterpret_cast<uintptr_t>(w) % T::kWUnit != 0 || matrix_bytes % T::kWUnit != 0 ||
          reinterpret_cast<uintptr_t>(acts) % T::kAUnit != 0)
        throw Error(name + ": weights or activations are not aligned to their copy units");
      if (!run) return;
      const int n_blocks = static_cast<int>(cols / T::kBlockValues);
      const int64_t row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::W));
      const int64_t act_row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::A));
      const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(columns));
      mmq_kernel<F><<<grid, mmq::kThreads, 0, stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_blocks, rows,
                                                         static_cast<const uint8_t*>(acts), act_row_bytes, n_tokens,
                                                         y, ldy, quant_tables(), tasks, matrix_bytes);
    }
  };
  dev::visit_quant_format(type, [&](auto format) { launch(format, false); });
  if (rows == 0 || columns == 0) return;
  int device = -1;
  (void)cudaGetDevice(&device);
  dev::visit_quant_format(type, [&](auto format) { launch(format, true); });
  cuda_check_launch(what, device);
}

}  // namespace

void matmul_int8(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* acts, int64_t n_tokens,
                 float* y, int64_t ldy, cudaStream_t stream) {
  launch_int8("matmul_int8", type, w, 0, rows, cols, acts, n_tokens, nullptr, 0, y, ldy, stream);
}

void matmul_int8_tasks(GgmlType type, const void* w, int64_t matrix_bytes, int64_t rows, int64_t cols,
                       const void* acts, const Int8Task* tasks, int n_tasks, float* y, int64_t ldy,
                       cudaStream_t stream) {
  if (!tasks && n_tasks > 0) throw Error("matmul_int8_tasks: no task list");
  launch_int8("matmul_int8_tasks", type, w, matrix_bytes, rows, cols, acts, 0, tasks, n_tasks, y, ldy, stream);
}

}  // namespace ds4::cuda
