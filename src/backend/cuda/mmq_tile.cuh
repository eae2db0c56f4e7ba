// The arithmetic of the int8 tensor-core products (mmq.cu), in steps a host
// test can drive lane by lane with an emulated mma (tests/cuda).
//
// A thread block computes a tile of kTileRows weight rows by kTileTokens
// tokens. Each k step stages 256 values of the tile's weight rows (raw
// blocks) and of its tokens' quantized activations (raw blocks, their codes
// 4-byte aligned) in shared memory. Warp w owns rows 16w .. 16w + 15 and all
// the tile's tokens: per item (32 values) and 16-value half it builds one
// m16 x k16 fragment of weight codes (Format::code), takes the k16 x n8
// activation fragments of its 8 token groups, and the tensor cores give the
// exact integer dot of every (row, token) half. Those combine, in integers,
// into the item sums the CPU kernel computes (x_multiplier, y_multiplier
// with the activations' bsums), summed over the block's items; at the end of
// each weight block the thread adds Format::term to its float accumulator.
// Terms are added in block order, as the CPU scalar kernel and the
// reference-order matvec do: each result equals theirs bit for bit.
//
// Fragment layout of mma.sync.m16n8k16.row.col.s32.s8.s8.s32, lane = 4 g + q:
//   A (16 x 16, row-major): register 0 holds A[g][4q .. 4q + 3], register 1
//     A[g + 8][4q .. 4q + 3] (the lowest k in the lowest byte);
//   B (16 x 8, by column): one register, B[4q .. 4q + 3][g];
//   C, D (16 x 8): D[g][2q], D[g][2q + 1], D[g + 8][2q], D[g + 8][2q + 1].
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_kernels.h"

namespace ds4::cuda::mmq {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kTileRows = 16 * kWarps;
inline constexpr int kTileTokens = 64;
inline constexpr int kTokenGroups = kTileTokens / 8;  // n8 fragments per warp
inline constexpr int kStepValues = 256;

constexpr int round_up4(int n) { return (n + 3) / 4 * 4; }

template <int kBytes>
struct UnitOf;
template <>
struct UnitOf<1> {
  using type = uint8_t;
};
template <>
struct UnitOf<2> {
  using type = uint16_t;
};
template <>
struct UnitOf<4> {
  using type = uint32_t;
};

// An aligned load / store of one copy unit.
template <typename U>
__device__ __forceinline__ U load_unit(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const U*>(p);
#else
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
#endif
}
template <typename U>
__device__ __forceinline__ void store_unit(uint8_t* p, U v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<U*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(U));
#endif
}

// The tile of one k step: rows [row0, row0 + kTileRows) of `rows`, tokens
// [token0, token0 + kTileTokens) of n_tokens, weight blocks [block0,
// block0 + n_blocks).
struct Step {
  int64_t row0 = 0, rows = 0;
  int64_t token0 = 0, n_tokens = 0;
  int64_t block0 = 0;
  int n_blocks = 0;
};

// What thread block (row_tile, column) works on: row tile row_tile of
// `rows` and token tile `column` of n_tokens, or with tasks the rows of task
// `column` against its matrix (matrix_bytes apart from w); its pointers are
// then the task's matrix, first activation row and first output row.
struct BlockWork {
  const uint8_t* w;
  const uint8_t* acts;
  float* y;
  Step step;
};
__device__ inline BlockWork block_work(const uint8_t* w, const uint8_t* acts, float* y, int64_t rows, int64_t n_tokens,
                                       int64_t row_tile, int64_t column, const Int8Task* tasks, int64_t matrix_bytes,
                                       int64_t act_row_bytes, int64_t ldy) {
  BlockWork b{w, acts, y, Step{}};
  b.step.row0 = row_tile * kTileRows;
  b.step.rows = rows;
  b.step.token0 = column * kTileTokens;
  b.step.n_tokens = n_tokens;
  if (tasks) {
    const Int8Task task = tasks[column];
    b.w += task.matrix * matrix_bytes;
    b.acts += task.token0 * act_row_bytes;
    b.y += task.token0 * ldy;
    b.step.token0 = 0;
    b.step.n_tokens = task.n_tokens;
  }
  return b;
}

// One lane's products: 2 rows (g, g + 8 of its warp's 16) by 2 tokens of
// each of the 8 token groups (2q, 2q + 1), as the D fragment holds them.
struct LaneSums {
  float acc[kTokenGroups][4];
  int x[kTokenGroups][4];
  int y[kTokenGroups][4];
};

// A lane's weight fragments for one item: per half h, register r of the A
// fragment (r = 0: row g, 1: row g + 8), and the rows' multipliers.
struct WeightFragments {
  int a[2][2];
  int xm[2][2];
  int ym[2][2];
};

template <typename F>
struct Tile {
  using W = typename F::W;
  using A = typename F::A;
  static constexpr int kBlockValues = 32 * F::kItems;
  static constexpr int kBlocksPerStep = kStepValues / kBlockValues;  // 1 (256-value blocks) or 8
  static constexpr int kWRowBytes = round_up4(static_cast<int>(sizeof(W)) * kBlocksPerStep);
  // Activation blocks at a 4-byte stride, offset so that their codes start
  // on a 4-byte boundary (Q8_0's follow a 2-byte scale).
  static constexpr int kABlockStride = round_up4(static_cast<int>(sizeof(A)));
  static constexpr int kABlockOffset = (4 - static_cast<int>(offsetof(A, qs)) % 4) % 4;
  static constexpr int kATokenBytes = kABlockStride * kBlocksPerStep;
  // Copy units: the largest that divides a block (and so a row).
  static constexpr int kWUnit = sizeof(W) % 4 == 0 ? 4 : sizeof(W) % 2 == 0 ? 2 : 1;
  static constexpr int kAUnit = sizeof(A) % 4 == 0 ? 4 : 2;
  static_assert(kABlockOffset + static_cast<int>(sizeof(A)) <= kABlockStride);
  static_assert(kABlockOffset % kAUnit == 0 && kABlockStride % kAUnit == 0);

  struct Shared {
    alignas(16) uint8_t w[kTileRows * kWRowBytes];
    alignas(16) uint8_t a[kTileTokens * kATokenBytes];
  };

  __device__ static const W& weight_block(const Shared& sh, int row, int j) {
    return *reinterpret_cast<const W*>(sh.w + row * kWRowBytes + j * static_cast<int>(sizeof(W)));
  }
  __device__ static const A& act_block(const Shared& sh, int token, int j) {
    return *reinterpret_cast<const A*>(sh.a + token * kATokenBytes + j * kABlockStride + kABlockOffset);
  }

  // Thread `tid` of n_threads copies its share of the step's weight and
  // activation blocks into `sh`; what lies outside the matrices is zero
  // (their products are computed and not stored). `w`: rows of row_bytes;
  // `acts`: tokens of act_row_bytes; both aligned to the copy units.
  __device__ static void stage(Shared& sh, const Step& step, const uint8_t* w, int64_t row_bytes, const uint8_t* acts,
                               int64_t act_row_bytes, int tid, int n_threads) {
    using WU = typename UnitOf<kWUnit>::type;
    constexpr int kRowUnits = kWRowBytes / kWUnit;
    const int valid_units = step.n_blocks * static_cast<int>(sizeof(W)) / kWUnit;
    for (int i = tid; i < kTileRows * kRowUnits; i += n_threads) {
      const int r = i / kRowUnits, u = i % kRowUnits;
      WU v = 0;
      if (step.row0 + r < step.rows && u < valid_units)
        v = load_unit<WU>(w + (step.row0 + r) * row_bytes + step.block0 * static_cast<int64_t>(sizeof(W)) + u * kWUnit);
      store_unit<WU>(sh.w + r * kWRowBytes + u * kWUnit, v);
    }
    using AU = typename UnitOf<kAUnit>::type;
    constexpr int kBlockUnits = static_cast<int>(sizeof(A)) / kAUnit;
    for (int i = tid; i < kTileTokens * kBlocksPerStep * kBlockUnits; i += n_threads) {
      const int u = i % kBlockUnits, j = (i / kBlockUnits) % kBlocksPerStep, t = i / (kBlockUnits * kBlocksPerStep);
      AU v = 0;
      if (step.token0 + t < step.n_tokens && j < step.n_blocks)
        v = load_unit<AU>(acts + (step.token0 + t) * act_row_bytes +
                          (step.block0 + j) * static_cast<int64_t>(sizeof(A)) + u * kAUnit);
      store_unit<AU>(sh.a + t * kATokenBytes + j * kABlockStride + kABlockOffset + u * kAUnit, v);
    }
  }

  // The weight fragments of item s of block j for `lane` of `warp`.
  __device__ static void weight_fragments(const Shared& sh, int warp, int lane, int j, int s, const QuantTables& t,
                                          WeightFragments& f) {
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const W& w = weight_block(sh, 16 * warp + g + 8 * r, j);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t packed = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          packed |= static_cast<uint32_t>(static_cast<uint8_t>(F::code(w, s, 16 * h + 4 * q + i, t))) << (8 * i);
        f.a[h][r] = static_cast<int>(packed);
        f.xm[h][r] = F::x_multiplier(w, s, h);
        if constexpr (F::kHasMin) f.ym[h][r] = F::y_multiplier(w, s, h);
      }
    }
  }

  // The activation fragment (B) of half h of item s of block j for token
  // group n of `lane`.
  __device__ static int act_fragment(const Shared& sh, int lane, int n, int j, int s, int h) {
    const A& a = act_block(sh, 8 * n + lane / 4, j);
    return static_cast<int>(load_unit<uint32_t>(reinterpret_cast<const uint8_t*>(a.qs) + 32 * s + 16 * h + 4 * (lane % 4)));
  }

  // Adds token group n's half dots (lo: half 0, hi: half 1; D fragments) of
  // item s of block j to the lane's item sums.
  __device__ static void add_item(LaneSums& sums, const Shared& sh, const WeightFragments& f, int lane, int n, int j,
                                  int s, const int lo[4], const int hi[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i / 2;
      sums.x[n][i] += f.xm[0][r] * lo[i] + f.xm[1][r] * hi[i];
      if constexpr (F::kHasMin) {
        const A& a = act_block(sh, 8 * n + 2 * (lane % 4) + i % 2, j);
        sums.y[n][i] += f.ym[0][r] * a.bsums[2 * s] + f.ym[1][r] * a.bsums[2 * s + 1];
      }
    }
  }

  // Block j's float terms into the accumulators; the item sums restart.
  __device__ static void add_block_terms(LaneSums& sums, const Shared& sh, int warp, int lane, int j) {
#pragma unroll
    for (int n = 0; n < kTokenGroups; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const W& w = weight_block(sh, 16 * warp + lane / 4 + 8 * (i / 2), j);
        const A& a = act_block(sh, 8 * n + 2 * (lane % 4) + i % 2, j);
        sums.acc[n][i] += F::term(w, a, make_int2(sums.x[n][i], sums.y[n][i]));
        sums.x[n][i] = 0;
        sums.y[n][i] = 0;
      }
    }
  }

  // y[token * ldy + row] for the lane's rows and tokens inside the matrices.
  __device__ static void store(const LaneSums& sums, const Step& step, int warp, int lane, float* y, int64_t ldy) {
#pragma unroll
    for (int n = 0; n < kTokenGroups; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = step.row0 + 16 * warp + lane / 4 + 8 * (i / 2);
        const int64_t token = step.token0 + 8 * n + 2 * (lane % 4) + i % 2;
        if (row < step.rows && token < step.n_tokens)
          y[token * ldy + row] = F::kFinal == 1.0f ? sums.acc[n][i] : F::kFinal * sums.acc[n][i];
      }
    }
  }
};

}  // namespace ds4::cuda::mmq
