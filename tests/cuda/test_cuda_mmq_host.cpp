// The int8 tensor-core products' arithmetic (mmq_tile.cuh) on the host, no
// GPU: the device code compiled as C++, each warp run lane by lane, and the
// mma emulated from the PTX fragment layout (A: lane 4g + q holds row g and
// g + 8, k 4q .. 4q + 3; B: k 4q .. 4q + 3 of column g; D: rows g, g + 8 by
// columns 2q, 2q + 1). Checked against the CPU scalar dot kernels, bit for
// bit, on shapes with partial tiles and steps. What this cannot check is
// the real instruction (mmq.cu), which the GPU tests compare the same way.
#include <cuda_runtime_api.h>  // int2; __device__ and friends are empty for a host compiler
#include <vector_functions.h>  // make_int2

#include <bit>
#include <cstdint>

// The device intrinsics quant_device.cuh uses.
inline uint32_t __float_as_uint(float f) { return std::bit_cast<uint32_t>(f); }
inline float __uint_as_float(uint32_t u) { return std::bit_cast<float>(u); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }

// (#pragma unroll: built with -Wno-unknown-pragmas.)
#include "backend/cuda/mmq_tile.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "cuda/cpu_dots.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/iq4_values.h"
#include "quant/mxfp4.h"
#include "quant/quant.h"
#include "unit/test_quant_util.h"

namespace ds4::cuda {
namespace {

using backend::Numerics;

QuantTables host_tables() {
  QuantTables t;
  t.iq2xxs_grid = quant::kIq2xxsGrid.data();
  t.iq2xs_grid = quant::kIq2xsGrid.data();
  t.iq2s_grid = quant::kIq2sGrid.data();
  t.iq3xxs_grid = quant::kIq3xxsGrid.data();
  t.iq3s_grid = quant::kIq3sGrid.data();
  t.iq1_grid = quant::kIq1Grid.data();
  t.signs = quant::kIq2xsSigns.data();
  t.iq4nl_values = quant::kIq4nlValues.data();
  t.mxfp4_values = quant::kMxfp4DoubledValues.data();
  return t;
}

size_t row_bytes(GgmlType type, int64_t cols) {
  return static_cast<size_t>(*ggml_nbytes(type, static_cast<uint64_t>(cols)));
}

using test::scalar_dot;
using test::ScalarDot;

// n rows of cols values in `form`, the CPU's quantizers.
std::vector<uint8_t> quantize_acts(ActQuant form, const std::vector<float>& x, int64_t n, int64_t cols) {
  std::vector<uint8_t> out(static_cast<size_t>(n * activation_row_bytes(form, cols)));
  test::cpu_quantize(form, x.data(), out.data(), n * cols);
  return out;
}

// One warp's mma.sync.m16n8k16 s8 from its lanes' registers.
void emulate_mma(const int a[32][2], const int b[32], int d[32][4]) {
  int8_t A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
      A[g][4 * q + i] = static_cast<int8_t>(static_cast<uint32_t>(a[lane][0]) >> (8 * i));
      A[g + 8][4 * q + i] = static_cast<int8_t>(static_cast<uint32_t>(a[lane][1]) >> (8 * i));
      B[4 * q + i][g] = static_cast<int8_t>(static_cast<uint32_t>(b[lane]) >> (8 * i));
    }
  }
  int D[16][8] = {};
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) D[m][n] += A[m][k] * B[k][n];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    d[lane][0] = D[g][2 * q];
    d[lane][1] = D[g][2 * q + 1];
    d[lane][2] = D[g + 8][2 * q];
    d[lane][3] = D[g + 8][2 * q + 1];
  }
}

// mmq_kernel's loop, each thread block and warp run lane by lane: token
// tiles of n_tokens, or with tasks (host memory) a column per task.
template <typename F>
void emulate_matmul(const uint8_t* w, int64_t rows, int64_t cols, const uint8_t* acts, int64_t n_tokens, float* y,
                    int64_t ldy, const std::vector<Int8Task>* tasks = nullptr, int64_t matrix_bytes = 0) {
  using T = mmq::Tile<F>;
  const QuantTables tables = host_tables();
  const int n_blocks = static_cast<int>(cols / T::kBlockValues);
  const int64_t w_row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::W));
  const int64_t a_row_bytes = n_blocks * static_cast<int64_t>(sizeof(typename F::A));
  auto sh = std::make_unique<typename T::Shared>();
  const int64_t columns =
      tasks ? static_cast<int64_t>(tasks->size()) : (n_tokens + mmq::kTileTokens - 1) / mmq::kTileTokens;
  for (int64_t row_tile = 0; row_tile * mmq::kTileRows < rows; ++row_tile) {
    for (int64_t column = 0; column < columns; ++column) {
      const mmq::BlockWork work = mmq::block_work(w, acts, y, rows, n_tokens, row_tile, column,
                                                  tasks ? tasks->data() : nullptr, matrix_bytes, a_row_bytes, ldy);
      mmq::Step step = work.step;
      std::vector<mmq::LaneSums> sums(mmq::kThreads, mmq::LaneSums{});
      for (int b0 = 0; b0 < n_blocks; b0 += T::kBlocksPerStep) {
        step.block0 = b0;
        step.n_blocks = std::min(T::kBlocksPerStep, n_blocks - b0);
        std::memset(sh.get(), 0xA5, sizeof(*sh));  // stage must write every byte it reads
        for (int tid = 0; tid < mmq::kThreads; ++tid)
          T::stage(*sh, step, work.w, w_row_bytes, work.acts, a_row_bytes, tid, mmq::kThreads);
        for (int j = 0; j < step.n_blocks; ++j) {
          for (int s = 0; s < F::kItems; ++s) {
            for (int warp = 0; warp < mmq::kWarps; ++warp) {
              mmq::WeightFragments f[32];
              for (int lane = 0; lane < 32; ++lane) T::weight_fragments(*sh, warp, lane, j, s, tables, f[lane]);
              int a_lo[32][2], a_hi[32][2];
              for (int lane = 0; lane < 32; ++lane)
                for (int r = 0; r < 2; ++r) {
                  a_lo[lane][r] = f[lane].a[0][r];
                  a_hi[lane][r] = f[lane].a[1][r];
                }
              for (int n = 0; n < mmq::kTokenGroups; ++n) {
                int b_lo[32], b_hi[32], lo[32][4], hi[32][4];
                for (int lane = 0; lane < 32; ++lane) {
                  b_lo[lane] = T::act_fragment(*sh, lane, n, j, s, 0);
                  b_hi[lane] = T::act_fragment(*sh, lane, n, j, s, 1);
                }
                emulate_mma(a_lo, b_lo, lo);
                emulate_mma(a_hi, b_hi, hi);
                for (int lane = 0; lane < 32; ++lane)
                  T::add_item(sums[32 * warp + lane], *sh, f[lane], lane, n, j, s, lo[lane], hi[lane]);
              }
            }
          }
          for (int warp = 0; warp < mmq::kWarps; ++warp)
            for (int lane = 0; lane < 32; ++lane) T::add_block_terms(sums[32 * warp + lane], *sh, warp, lane, j);
        }
      }
      for (int warp = 0; warp < mmq::kWarps; ++warp)
        for (int lane = 0; lane < 32; ++lane) T::store(sums[32 * warp + lane], step, warp, lane, work.y, ldy);
    }
  }
}

// Calls f(Format) for the types with int8 tensor-core kernels.
template <typename Fn>
void for_each_tensor_core_type(Fn&& f) {
  for (int t = 0; t < 64; ++t) {
    const auto type = static_cast<GgmlType>(t);
    dev::visit_quant_format(type, [&](auto format) {
      if constexpr (decltype(format)::kTensorCores) f(type, format);
    });
  }
}

TEST(Int8TensorCoreTypes, AreTheQuantizedTypesButIq1M) {
  std::vector<GgmlType> types;
  for_each_tensor_core_type([&](GgmlType type, auto) { types.push_back(type); });
  EXPECT_EQ(types.size(), 19u);
  for (GgmlType type : types) EXPECT_TRUE(int8_tensor_core_type(type)) << ggml_type_name(type);
  EXPECT_FALSE(int8_tensor_core_type(GgmlType::IQ1_M));
  EXPECT_FALSE(int8_tensor_core_type(GgmlType::F16));
  EXPECT_FALSE(int8_tensor_core_type(GgmlType::F32));
}

// Each item's sums from the codes and multipliers equal Format::item's.
TEST(Int8TensorCoreFormats, ItemSumsDecomposeIntoHalfDots) {
  const QuantTables tables = host_tables();
  for_each_tensor_core_type([&](GgmlType type, auto format) {
    using F = decltype(format);
    SCOPED_TRACE(ggml_type_name(type));
    const int64_t cols = 32 * F::kItems * 4;
    const std::vector<float> wv = quant::test::gaussian(static_cast<size_t>(cols), 3);
    std::vector<uint8_t> w(row_bytes(type, cols));
    quant::quantize_rows(type, wv.data(), w.data(), 1, cols);
    ActQuant form;
    ASSERT_TRUE(activation_quant(type, Numerics::Default, form));
    const std::vector<uint8_t> a = quantize_acts(form, quant::test::gaussian(static_cast<size_t>(cols), 4), 1, cols);
    const auto* wb = reinterpret_cast<const typename F::W*>(w.data());
    const auto* ab = reinterpret_cast<const typename F::A*>(a.data());
    for (int b = 0; b < 4; ++b) {
      for (int s = 0; s < F::kItems; ++s) {
        const int2 want = F::item(wb[b], ab[b], s, tables);
        int x = 0, y = 0;
        for (int h = 0; h < 2; ++h) {
          int dot = 0;
          for (int l = 16 * h; l < 16 * h + 16; ++l) {
            const int code = F::code(wb[b], s, l, tables);
            ASSERT_LE(code < 0 ? -code : code, 127);
            dot += code * ab[b].qs[32 * s + l];
          }
          x += F::x_multiplier(wb[b], s, h) * dot;
          if constexpr (F::kHasMin) y += F::y_multiplier(wb[b], s, h) * ab[b].bsums[2 * s + h];
        }
        EXPECT_EQ(x, want.x) << "block " << b << " item " << s;
        EXPECT_EQ(y, want.y) << "block " << b << " item " << s;
      }
    }
  });
}

// The whole tile loop against the CPU's scalar kernel: 70 rows and 70 tokens
// (two tiles each, the second partial), rows of 3 steps (256-value blocks) or
// 10 blocks (32-value blocks: a step of 8 and a partial one), and an output
// stride past the rows, which stay untouched.
TEST(Int8TensorCoreTile, EqualsTheCpuScalarKernelBitForBit) {
  const int64_t rows = 70, tokens = 70, ldy = 73;
  for_each_tensor_core_type([&](GgmlType type, auto format) {
    using F = decltype(format);
    const int64_t cols = F::kItems == 8 ? 768 : 320;
    const std::vector<Numerics> numerics = type == GgmlType::Q8_0 || type == GgmlType::Q4_1
                                               ? std::vector<Numerics>{Numerics::Default, Numerics::Quality}
                                               : std::vector<Numerics>{Numerics::Default};
    for (Numerics n : numerics) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + (n == Numerics::Quality ? " quality" : " default"));
      const std::vector<float> wv = quant::test::gaussian(static_cast<size_t>(rows * cols), 11);
      std::vector<uint8_t> w(row_bytes(type, cols) * static_cast<size_t>(rows));
      quant::quantize_rows(type, wv.data(), w.data(), rows, cols);
      ActQuant form;
      ASSERT_TRUE(activation_quant(type, n, form));
      const std::vector<uint8_t> a =
          quantize_acts(form, quant::test::gaussian(static_cast<size_t>(tokens * cols), 12), tokens, cols);
      std::vector<float> y(static_cast<size_t>(tokens * ldy), 123.0f);
      emulate_matmul<F>(w.data(), rows, cols, a.data(), tokens, y.data(), ldy);
      const ScalarDot dot = scalar_dot(type);
      const int64_t a_row = activation_row_bytes(form, cols);
      int bad = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const float want = dot(cols, w.data() + r * row_bytes(type, cols), a.data() + t * a_row);
          const float got = y[static_cast<size_t>(t * ldy + r)];
          if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && bad++ < 3)
            ADD_FAILURE() << "token " << t << " row " << r << ": tile " << got << ", cpu " << want;
        }
        for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[static_cast<size_t>(t * ldy + r)], 123.0f) << "past the rows";
      }
      EXPECT_EQ(bad, 0);
    }
  });
}

// Tasks (prefill's experts in one launch): each task's rows against its
// matrix, as the CPU's product, bit for bit; rows of no task untouched.
TEST(Int8TensorCoreTile, TasksTakeTheirMatrixAndRows) {
  const int64_t rows = 70, cols = 512, n_mats = 3, tokens = 150, ldy = 70;
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::IQ2_XXS}) {
    SCOPED_TRACE(ggml_type_name(type));
    const std::vector<float> wv = quant::test::gaussian(static_cast<size_t>(n_mats * rows * cols), 21);
    std::vector<uint8_t> w(row_bytes(type, cols) * static_cast<size_t>(n_mats * rows));
    quant::quantize_rows(type, wv.data(), w.data(), n_mats * rows, cols);
    ActQuant form;
    ASSERT_TRUE(activation_quant(type, Numerics::Default, form));
    const std::vector<uint8_t> a =
        quantize_acts(form, quant::test::gaussian(static_cast<size_t>(tokens * cols), 22), tokens, cols);
    // Matrix 2: rows 0-63 and 64-99; matrix 0: 100-100; matrix 1: 101-139;
    // rows 140-149 belong to no task.
    const std::vector<Int8Task> tasks = {{2, 0, 64}, {2, 64, 36}, {0, 100, 1}, {1, 101, 39}};
    std::vector<float> y(static_cast<size_t>(tokens * ldy), 123.0f);
    const int64_t matrix_bytes = static_cast<int64_t>(row_bytes(type, cols)) * rows;
    dev::visit_quant_format(type, [&](auto format) {
      using F = decltype(format);
      if constexpr (F::kTensorCores)
        emulate_matmul<F>(w.data(), rows, cols, a.data(), 0, y.data(), ldy, &tasks, matrix_bytes);
    });
    const ScalarDot dot = scalar_dot(type);
    const int64_t a_row = activation_row_bytes(form, cols);
    int bad = 0;
    for (const Int8Task& task : tasks) {
      for (int64_t t = task.token0; t < task.token0 + task.n_tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const float want =
              dot(cols, w.data() + task.matrix * matrix_bytes + r * row_bytes(type, cols), a.data() + t * a_row);
          const float got = y[static_cast<size_t>(t * ldy + r)];
          if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && bad++ < 3)
            ADD_FAILURE() << "task matrix " << task.matrix << " token " << t << " row " << r << ": " << got << " vs "
                          << want;
        }
      }
    }
    EXPECT_EQ(bad, 0);
    for (int64_t t = 140; t < tokens; ++t)
      for (int64_t r = 0; r < ldy; ++r) ASSERT_EQ(y[static_cast<size_t>(t * ldy + r)], 123.0f) << "token " << t;
  }
}

// The launcher's refusals come before any device call: checked here.
TEST(Int8TensorCoreProducts, RefusalsNameTheProblem) {
  const auto* p = reinterpret_cast<const void*>(uintptr_t{256});
  float* y = reinterpret_cast<float*>(uintptr_t{256});
  auto message = [&](GgmlType type, int64_t rows, int64_t cols, const void* w, int64_t ldy) -> std::string {
    try {
      matmul_int8(type, w, rows, cols, p, 4, y, ldy, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(GgmlType::IQ1_M, 8, 256, p, 8), "matmul_int8: weight type iq1_m has no int8 tensor-core kernel");
  EXPECT_EQ(message(GgmlType::F16, 8, 256, p, 8), "matmul_int8: weight type f16 has no int8 tensor-core kernel");
  EXPECT_EQ(message(GgmlType::Q4_K, 8, 100, p, 8),
            "matmul_int8: a row of 100 q4_K values is not a whole number of blocks");
  EXPECT_EQ(message(GgmlType::Q4_K, 8, 256, p, 7), "matmul_int8: output stride 7 is below the row count");
  EXPECT_EQ(message(GgmlType::Q4_K, 8, 256, reinterpret_cast<const void*>(uintptr_t{258}), 8),
            "matmul_int8: weights or activations are not aligned to their copy units");
  auto tasks_message = [&](int n_tasks, const Int8Task* tasks, int64_t matrix_bytes) -> std::string {
    try {
      matmul_int8_tasks(GgmlType::Q4_K, p, matrix_bytes, 8, 256, p, tasks, n_tasks, y, 8, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto* some = reinterpret_cast<const Int8Task*>(uintptr_t{256});
  EXPECT_EQ(tasks_message(3, nullptr, 1152), "matmul_int8_tasks: no task list");
  EXPECT_EQ(tasks_message(65536, some, 1152), "matmul_int8_tasks: 65536 tasks by 8 rows is beyond one launch");
  EXPECT_EQ(tasks_message(3, some, 1150),
            "matmul_int8_tasks: weights or activations are not aligned to their copy units");
}

}  // namespace
}  // namespace ds4::cuda
