// Single-thread matrix-vector benchmarks of the dot kernels: a weight matrix
// (rows x cols) times one activation row, for every kernel and every ISA
// level this CPU runs, reported as weight bytes per second (what bounds
// decode), next to a plain memory-read baseline.
//
// Tile benchmarks (prefill): the tile kernels (dot_tile.h) at the best level,
// 64 rows x 4096 columns x N activations (N = 1, 2, 4, 8, 12, 64), and 16 rows x 256
// activations (a narrow tile, many tokens), reported as weight-activation
// multiply-adds per second (items/s = cols * rows * N), next to the same tile
// computed by looping that level's dot kernel. tile_stream: the MoE prefill
// case, weights from memory: 2048 x 4096 expert matrices (~256 MiB of them,
// beyond every cache) met by 12 activations each (512 tokens x 6 of 256
// experts), one matrix per call in turn, reported as GMAC/s and weight bytes/s.
//
// Matrix sizes:
//   l2     ~512 KiB of weights, 2048 columns: cache-resident, kernel speed;
//   expert 2048 rows x 4096 columns, a routed expert's gate/up matrix
//          (beyond L2);
//   dram   ~256 MiB of weights, 4096 columns: beyond every cache level.
//
// Run: ds4-bench-kernels [--benchmark_filter=q4_K] [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <emmintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/dot_tile.h"
#include "version/version.h"

namespace ds4::quant {
namespace {

// 64-byte aligned, like a tensor in a mapped GGUF file.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], AlignedFree>;

Buffer allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  // Big buffers in 2 MiB pages where the kernel allows (the engine asks the
  // same for its weight mapping): 4 KiB pages cost the streaming kernels
  // TLB misses the engine does not pay.
  const size_t align = rounded >= (size_t{2} << 20) ? (size_t{2} << 20) : 64;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(align, (rounded + align - 1) / align * align));
  if (!p) std::abort();
  if (align > 64) (void)madvise(p, (rounded + align - 1) / align * align, MADV_HUGEPAGE);
  return Buffer(p);
}

// xorshift64*: fast enough to fill hundreds of MiB.
struct FastRng {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
  void fill(unsigned char* p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t v = next();
      std::memcpy(p + i, &v, 8);
    }
    for (; i < n; ++i) p[i] = static_cast<unsigned char>(next());
  }
};

void set_u16(unsigned char* p, uint16_t v) { std::memcpy(p, &v, 2); }

// One weight format: its geometry, how to make plausible random weights and
// activations, and how to call its kernel.
struct Format {
  const char* name;
  int block_elems;
  size_t block_bytes;
  // Turn random bytes into valid blocks with moderate scales (keeps float
  // work free of subnormal/NaN slow paths).
  void (*fix_weights)(unsigned char* blocks, size_t count);
  // Activation row of `cols` elements in the kernel's activation format.
  Buffer (*make_activation)(int64_t cols, FastRng& rng);
  float (*dot)(const DotKernels& k, int64_t n, const void* w, const void* x);
  TileKernel TileKernels::*tile;
};

Buffer q8_0_activation(int64_t cols, FastRng& rng) {
  const size_t nb = static_cast<size_t>(cols / kQK8_0);
  Buffer buf = allocate(nb * sizeof(BlockQ8_0));
  auto* b = reinterpret_cast<BlockQ8_0*>(buf.get());
  for (size_t i = 0; i < nb; ++i) {
    b[i].d = f32_to_f16(0.02f);
    rng.fill(reinterpret_cast<unsigned char*>(b[i].qs), sizeof(b[i].qs));
    // Codes as quantize_row_q8_0_act emits them (-127..127, d = amax / 127): a
    // -128 sends the avx2 Q8_0 kernels to their exact widening path, which
    // real activations never take.
    for (int8_t& q : b[i].qs) q = q == -128 ? -127 : q;
  }
  return buf;
}

Buffer q8_K_activation(int64_t cols, FastRng& rng) {
  const size_t nb = static_cast<size_t>(cols / kQK_K);
  Buffer buf = allocate(nb * sizeof(BlockQ8_K));
  auto* b = reinterpret_cast<BlockQ8_K*>(buf.get());
  for (size_t i = 0; i < nb; ++i) {
    b[i].d = 0.01f;
    rng.fill(reinterpret_cast<unsigned char*>(b[i].qs), sizeof(b[i].qs));
    // Codes as the Q8_K quantizer emits them (-127..127): a -128 sends the
    // IQ2_XXS kernels to their slow exact path, which real activations never take.
    for (int8_t& q : b[i].qs) q = q == -128 ? -127 : q;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b[i].qs[16 * g + j];
      b[i].bsums[g] = static_cast<int16_t>(s);
    }
  }
  return buf;
}

Buffer f32_activation(int64_t cols, FastRng& rng) {
  Buffer buf = allocate(static_cast<size_t>(cols) * sizeof(float));
  auto* x = reinterpret_cast<float*>(buf.get());
  for (int64_t i = 0; i < cols; ++i) x[i] = static_cast<float>(static_cast<int>(rng.next() % 2001) - 1000) * 1e-3f;
  return buf;
}

const uint16_t kScale = f32_to_f16(0.01f);

const Format kFormats[] = {
    {"q8_0", kQK8_0, sizeof(BlockQ8_0),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockQ8_0), kScale);
     },
     q8_0_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q8_0_q8_0(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(x));
     },
     &TileKernels::q8_0_q8_0},
    {"q2_K", kQK_K, sizeof(BlockQ2_K),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) {
         set_u16(p + i * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, d), kScale);
         set_u16(p + i * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, dmin), kScale);
       }
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q2_K_q8_K(n, static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::q2_K_q8_K},
    {"q4_K", kQK_K, sizeof(BlockQ4_K),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) {
         set_u16(p + i * sizeof(BlockQ4_K) + offsetof(BlockQ4_K, d), kScale);
         set_u16(p + i * sizeof(BlockQ4_K) + offsetof(BlockQ4_K, dmin), kScale);
       }
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q4_K_q8_K(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::q4_K_q8_K},
    {"q6_K", kQK_K, sizeof(BlockQ6_K),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, d), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q6_K_q8_K(n, static_cast<const BlockQ6_K*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::q6_K_q8_K},
    {"q5_K", kQK_K, sizeof(BlockQ5_K),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) {
         set_u16(p + i * sizeof(BlockQ5_K) + offsetof(BlockQ5_K, d), kScale);
         set_u16(p + i * sizeof(BlockQ5_K) + offsetof(BlockQ5_K, dmin), kScale);
       }
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q5_K_q8_K(n, static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::q5_K_q8_K},
    {"q3_K", kQK_K, sizeof(BlockQ3_K),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockQ3_K) + offsetof(BlockQ3_K, d), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.q3_K_q8_K(n, static_cast<const BlockQ3_K*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::q3_K_q8_K},
    {"iq4_xs", kQK_K, sizeof(BlockIQ4_XS),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockIQ4_XS) + offsetof(BlockIQ4_XS, d), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq4_xs_q8_K(n, static_cast<const BlockIQ4_XS*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::iq4_xs_q8_K},
    {"iq3_xxs", kQK_K, sizeof(BlockIQ3_XXS),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockIQ3_XXS) + offsetof(BlockIQ3_XXS, d), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq3_xxs_q8_K(n, static_cast<const BlockIQ3_XXS*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::iq3_xxs_q8_K},
    {"iq2_xs", kQK_K, sizeof(BlockIQ2_XS),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockIQ2_XS) + offsetof(BlockIQ2_XS, d), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq2_xs_q8_K(n, static_cast<const BlockIQ2_XS*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::iq2_xs_q8_K},
    {"iq1_m", kQK_K, sizeof(BlockIQ1_M),
     [](unsigned char* p, size_t count) {
       // The f16 scale: the top nibble of each of the four scale words.
       for (size_t i = 0; i < count; ++i) {
         unsigned char* scales = p + i * sizeof(BlockIQ1_M) + offsetof(BlockIQ1_M, scales);
         for (int k = 0; k < 4; ++k) {
           scales[2 * k + 1] =
               static_cast<unsigned char>((scales[2 * k + 1] & 0x0f) | (((kScale >> (4 * k)) & 15) << 4));
         }
       }
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq1_m_q8_K(n, static_cast<const BlockIQ1_M*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::iq1_m_q8_K},
    {"iq2_s", kQK_K, sizeof(BlockIQ2_S),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockIQ2_S) + offsetof(BlockIQ2_S, d), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq2_s_q8_K(n, static_cast<const BlockIQ2_S*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::iq2_s_q8_K},
    {"iq2_xxs", kQK_K, sizeof(BlockIQ2_XXS),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) set_u16(p + i * sizeof(BlockIQ2_XXS), kScale);
     },
     q8_K_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.iq2_xxs_q8_K(n, static_cast<const BlockIQ2_XXS*>(w), static_cast<const BlockQ8_K*>(x));
     },
     &TileKernels::iq2_xxs_q8_K},
    {"mxfp4", kQKMxfp4, sizeof(BlockMXFP4),
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) p[i * sizeof(BlockMXFP4)] = static_cast<unsigned char>(120 + i % 8);
     },
     q8_0_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.mxfp4_q8_0(n, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(x));
     },
     &TileKernels::mxfp4_q8_0},
    {"f16", 1, 2,
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) {
         uint16_t h;
         std::memcpy(&h, p + 2 * i, 2);
         set_u16(p + 2 * i, static_cast<uint16_t>(h & 0xbbff));  // finite, |h| < 1
       }
     },
     f32_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.f16_f32(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
     },
     &TileKernels::f16_f32},
    {"bf16", 1, 2,
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) {
         uint16_t h;
         std::memcpy(&h, p + 2 * i, 2);
         set_u16(p + 2 * i, static_cast<uint16_t>((h & 0x807f) | 0x3f00));  // normal, in [0.5, 1)
       }
     },
     f32_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.bf16_f32(n, static_cast<const uint16_t*>(w), static_cast<const float*>(x));
     },
     &TileKernels::bf16_f32},
    {"f32", 1, 4,
     [](unsigned char* p, size_t count) {
       for (size_t i = 0; i < count; ++i) {
         uint32_t b;
         std::memcpy(&b, p + 4 * i, 4);
         b = (b & 0x807fffffu) | 0x3f000000u;  // normal, in [0.5, 1)
         std::memcpy(p + 4 * i, &b, 4);
       }
     },
     f32_activation,
     [](const DotKernels& k, int64_t n, const void* w, const void* x) {
       return k.f32_f32(n, static_cast<const float*>(w), static_cast<const float*>(x));
     },
     &TileKernels::f32_f32},
};

struct Size {
  const char* name;
  int64_t cols;
  int64_t rows;          // 0: derived from target_bytes
  size_t target_bytes;
};

const Size kSizes[] = {
    {"l2", 2048, 0, size_t{512} << 10},
    {"expert", 4096, 2048, 0},
    {"dram", 4096, 0, size_t{256} << 20},
};

struct Matrix {
  Buffer weights;
  Buffer activation;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
};

// The benchmarks for one (format, size) run back to back, so only the latest
// matrix is kept: a few hundred MiB at a time at most.
const Matrix& matrix_for(const Format& f, const Size& s) {
  static std::string key;
  static Matrix m;
  const std::string want = std::string(f.name) + "/" + s.name;
  if (key == want) return m;
  m = Matrix{};
  m.cols = s.cols;
  m.row_bytes = static_cast<size_t>(s.cols / f.block_elems) * f.block_bytes;
  m.rows = s.rows ? s.rows : std::max<int64_t>(1, static_cast<int64_t>(s.target_bytes / m.row_bytes));
  const size_t blocks = static_cast<size_t>(m.rows) * static_cast<size_t>(s.cols / f.block_elems);
  FastRng rng;
  m.weights = allocate(blocks * f.block_bytes);
  rng.fill(m.weights.get(), blocks * f.block_bytes);
  f.fix_weights(m.weights.get(), blocks);
  m.activation = f.make_activation(s.cols, rng);
  key = want;
  return m;
}

void matvec(benchmark::State& state, const Format& f, const Size& s, const DotKernels& k) {
  const Matrix& m = matrix_for(f, s);
  std::vector<float> y(static_cast<size_t>(m.rows));
  for (auto _ : state) {
    const unsigned char* row = m.weights.get();
    for (int64_t r = 0; r < m.rows; ++r, row += m.row_bytes) {
      y[static_cast<size_t>(r)] = f.dot(k, m.cols, row, m.activation.get());
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.rows * static_cast<int64_t>(m.row_bytes)));
  state.counters["rows"] = static_cast<double>(m.rows);
  state.counters["cols"] = static_cast<double>(m.cols);
}

// ---- Tiles (prefill) ----

constexpr int64_t kTileCols = 4096;

struct TileShape {
  int64_t rows;
  int64_t acts;
};
const TileShape kTileShapes[] = {{64, 1}, {64, 2}, {64, 4}, {64, 8}, {64, 12}, {64, 64}, {16, 256}};

struct TileInputs {
  Buffer weights;
  std::vector<Buffer> acts;
  std::vector<const void*> act_ptrs;
  size_t row_bytes = 0;
};

// Rows x 4096 columns and N activations of one format, kept for the
// benchmarks of that (format, shape) that run back to back.
const TileInputs& tile_inputs_for(const Format& f, TileShape shape) {
  static std::string key;
  static TileInputs in;
  const std::string want = std::string(f.name) + "/" + std::to_string(shape.rows) + "x" + std::to_string(shape.acts);
  if (key == want) return in;
  in = TileInputs{};
  in.row_bytes = static_cast<size_t>(kTileCols / f.block_elems) * f.block_bytes;
  const size_t blocks = static_cast<size_t>(shape.rows) * static_cast<size_t>(kTileCols / f.block_elems);
  FastRng rng;
  in.weights = allocate(blocks * f.block_bytes);
  rng.fill(in.weights.get(), blocks * f.block_bytes);
  f.fix_weights(in.weights.get(), blocks);
  for (int64_t t = 0; t < shape.acts; ++t) {
    in.acts.push_back(f.make_activation(kTileCols, rng));
    in.act_ptrs.push_back(in.acts.back().get());
  }
  key = want;
  return in;
}

// One tile call per iteration: the tile kernel, or (loop = true) the same
// results from the level's dot kernel, rows outer as dot_tile.cpp's fallback.
void tile(benchmark::State& state, const Format& f, TileShape shape, const DotKernels& k, bool loop) {
  const TileInputs& in = tile_inputs_for(f, shape);
  const int64_t rows = shape.rows, n_acts = shape.acts;
  const TileKernel kernel = tile_kernels_for(k.isa).*f.tile;
  std::vector<float> out(static_cast<size_t>(rows * n_acts));
  for (auto _ : state) {
    if (loop) {
      for (int64_t r = 0; r < rows; ++r) {
        const unsigned char* row = in.weights.get() + static_cast<size_t>(r) * in.row_bytes;
        for (int64_t t = 0; t < n_acts; ++t) {
          out[static_cast<size_t>(t * rows + r)] = f.dot(k, kTileCols, row, in.act_ptrs[static_cast<size_t>(t)]);
        }
      }
    } else {
      kernel(kTileCols, in.weights.get(), in.row_bytes, rows, in.act_ptrs.data(), n_acts, out.data(), rows);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // Items: weight-activation multiply-adds; shown as G/s by the counter below.
  const double macs = static_cast<double>(kTileCols * rows * n_acts);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(macs));
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// tile_stream: expert matrices, 12 activations each, one call per matrix in
// turn so each matrix comes from memory.
constexpr int64_t kStreamRows = 2048;
constexpr int64_t kStreamActs = 12;
constexpr size_t kStreamBytes = size_t{256} << 20;

void tile_stream(benchmark::State& state, const Format& f, const DotKernels& k) {
  const size_t row_bytes = static_cast<size_t>(kTileCols / f.block_elems) * f.block_bytes;
  const size_t matrix_bytes = row_bytes * kStreamRows;
  const size_t matrices = std::max<size_t>(2, kStreamBytes / matrix_bytes);
  FastRng rng;
  Buffer weights = allocate(matrices * matrix_bytes);
  rng.fill(weights.get(), matrices * matrix_bytes);
  f.fix_weights(weights.get(), matrices * matrix_bytes / f.block_bytes);
  std::vector<Buffer> acts;
  std::vector<const void*> act_ptrs;
  for (int64_t t = 0; t < kStreamActs; ++t) {
    acts.push_back(f.make_activation(kTileCols, rng));
    act_ptrs.push_back(acts.back().get());
  }
  const TileKernel kernel = tile_kernels_for(k.isa).*f.tile;
  std::vector<float> out(static_cast<size_t>(kStreamRows * kStreamActs));
  size_t next = 0;
  for (auto _ : state) {
    kernel(kTileCols, weights.get() + next * matrix_bytes, row_bytes, kStreamRows, act_ptrs.data(), kStreamActs,
           out.data(), kStreamRows);
    next = (next + 1) % matrices;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double macs = static_cast<double>(kTileCols * kStreamRows * kStreamActs);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(matrix_bytes));
  state.counters["GMAC/s"] = benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Baseline: summing a 1 GiB buffer with 16-byte loads (SSE2, the baseline
// ISA), the single-thread read bandwidth the dram-size kernels are bounded by.
void memory_read(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  Buffer buf = allocate(bytes);
  std::memset(buf.get(), 1, bytes);
  const auto* p = reinterpret_cast<const __m128i*>(buf.get());
  const size_t count = bytes / sizeof(__m128i);
  for (auto _ : state) {
    __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < count; i += 4) {
      s0 = _mm_add_epi64(s0, _mm_load_si128(p + i));
      s1 = _mm_add_epi64(s1, _mm_load_si128(p + i + 1));
      s2 = _mm_add_epi64(s2, _mm_load_si128(p + i + 2));
      s3 = _mm_add_epi64(s3, _mm_load_si128(p + i + 3));
    }
    benchmark::DoNotOptimize(_mm_add_epi64(_mm_add_epi64(s0, s1), _mm_add_epi64(s2, s3)));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

void register_benchmarks() {
  benchmark::RegisterBenchmark("memory_read/1GiB", memory_read)->Unit(benchmark::kMillisecond);
  for (const Format& f : kFormats) {
    for (const Size& s : kSizes) {
      for (const DotKernels* k : dot_kernels_available()) {
        const std::string name = std::string("dot/") + f.name + "/" + s.name + "/" + k->isa;
        benchmark::RegisterBenchmark(name.c_str(), [&f, &s, k](benchmark::State& st) { matvec(st, f, s, *k); })
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  const DotKernels& best = dot_kernels();
  for (const Format& f : kFormats) {
    for (const TileShape shape : kTileShapes) {
      for (const bool loop : {false, true}) {
        const std::string name = std::string(loop ? "tile_loop/" : "tile/") + f.name + "/" +
                                 std::to_string(shape.rows) + "x4096x" + std::to_string(shape.acts) + "/" + best.isa;
        benchmark::RegisterBenchmark(name.c_str(), [&f, shape, &best, loop](benchmark::State& st) {
          tile(st, f, shape, best, loop);
        })->Unit(benchmark::kMicrosecond);
      }
    }
    const std::string name = std::string("tile_stream/") + f.name + "/2048x4096x12/" + best.isa;
    benchmark::RegisterBenchmark(name.c_str(), [&f, &best](benchmark::State& st) {
      tile_stream(st, f, best);
    })->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace ds4::quant

int main(int argc, char** argv) {
  // Google Benchmark has no version flag: ours is answered before it reads the arguments.
  if (ds4::answer_version_flag(argc, argv, "ds4-bench-kernels")) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("ds4_dot_isa_best", ds4::quant::dot_kernels().isa);
  ds4::quant::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
