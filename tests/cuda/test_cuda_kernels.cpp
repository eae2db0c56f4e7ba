// The weight-format kernels on a GPU against the CPU (test-backend-ops'
// idea): activation codes and dequantized values bit for bit, the
// reference-order product bit for bit with the scalar dot kernel, the fast
// product and the cuBLAS product within the error their order and rounding
// allow. Needs a GPU: skipped without one, a failure with DS4_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_devices.h"
#include "cuda/cpu_dots.h"
#include "cuda/gpu_test.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/expert_products.h"
#include "backend/cuda/gemm.h"
#include "backend/expert_groups.h"
#include "backend/cuda/quant_kernels.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "quant/quant.h"
#include "unit/test_quant_util.h"

namespace ds4::cuda {
namespace {

using backend::Numerics;


const std::vector<GgmlType> kQuantTypes = {
    GgmlType::Q8_0,    GgmlType::Q4_0,   GgmlType::Q4_1,    GgmlType::Q5_0,  GgmlType::Q5_1,  GgmlType::MXFP4,
    GgmlType::IQ4_NL,  GgmlType::Q2_K,   GgmlType::Q3_K,    GgmlType::Q4_K,  GgmlType::Q5_K,  GgmlType::Q6_K,
    GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,   GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
    GgmlType::IQ1_M,   GgmlType::IQ4_XS};
const std::vector<GgmlType> kFloatTypes = {GgmlType::F32, GgmlType::F16, GgmlType::BF16};

std::vector<GgmlType> all_types() {
  std::vector<GgmlType> types = kFloatTypes;
  types.insert(types.end(), kQuantTypes.begin(), kQuantTypes.end());
  return types;
}

std::string type_name(GgmlType type) { return std::string(ggml_type_name(type)); }

size_t row_bytes(GgmlType type, int64_t cols) { return static_cast<size_t>(*ggml_nbytes(type, static_cast<uint64_t>(cols))); }

// rows x cols of `type` made by the CPU's quantizers from Gaussian values.
std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> values = quant::test::gaussian(static_cast<size_t>(rows * cols), seed);
  std::vector<uint8_t> bytes(row_bytes(type, cols) * static_cast<size_t>(rows));
  quant::quantize_rows(type, values.data(), bytes.data(), rows, cols);
  return bytes;
}

DeviceBuffer to_device(const void* host, size_t bytes) {
  DeviceBuffer buffer(bytes);
  buffer.upload(host, bytes);
  return buffer;
}
template <typename T>
DeviceBuffer to_device(const std::vector<T>& host) {
  return to_device(host.data(), host.size() * sizeof(T));
}
template <typename T>
std::vector<T> from_device(const DeviceBuffer& buffer, size_t count) {
  std::vector<T> out(count);
  buffer.download(out.data(), count * sizeof(T));
  return out;
}

void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError()); }

using test::cpu_quantize;
using test::scalar_dot;
using test::ScalarDot;

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;  // payloads differ between x86 and the GPU
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// ---- activation quantizers ----

TEST(CudaActivationQuant, EveryFormEqualsTheCpuBitForBit) {
  REQUIRE_GPU();
  const int64_t rows = 3, cols = 2048;
  std::vector<float> x = quant::test::gaussian(static_cast<size_t>(rows * cols), 11);
  for (int j = 0; j < 256; ++j) x[j] = 0.0f;                       // an all-zero block
  for (int j = 256; j < 512; ++j) x[j] = 0.5f * static_cast<float>(j % 7 - 3);  // ties on rounding
  x[600] = 1.0e7f;                                                  // a Q8_0 scale beyond f16 (infinite)
  x[700] = -x[701];                                                 // equal magnitudes, both signs
  for (int j = 1024; j < 1280; ++j) x[j] *= 1e-6f;                  // subnormal f16 scales
  const DeviceBuffer dx = to_device(x);
  for (ActQuant form : {ActQuant::Q8_0, ActQuant::Q8_0_GgmlX86, ActQuant::Q8_1, ActQuant::Q8_1_GgmlX86, ActQuant::Q8_K}) {
    const size_t bytes = static_cast<size_t>(activation_row_bytes(form, cols) * rows);
    DeviceBuffer dy(bytes);
    quantize_activations(form, dx.as<float>(), dy.data(), rows, cols, nullptr);
    sync();
    const std::vector<uint8_t> gpu = from_device<uint8_t>(dy, bytes);
    std::vector<uint8_t> cpu(bytes);
    for (int64_t r = 0; r < rows; ++r)
      cpu_quantize(form, x.data() + r * cols, cpu.data() + r * activation_row_bytes(form, cols), cols);
    size_t first = 0;
    while (first < bytes && gpu[first] == cpu[first]) ++first;
    EXPECT_EQ(first, bytes) << "form " << static_cast<int>(form) << ": first different byte " << first;
  }
}

// ---- dequantizers ----

TEST(CudaDequantize, F32EqualsTheCpuForRandomBlocksAndQuantizedRows) {
  REQUIRE_GPU();
  std::mt19937 rng(5);
  for (GgmlType type : all_types()) {
    SCOPED_TRACE(type_name(type));
    const int64_t n = 4096;
    // Arbitrary bytes (every bit pattern is a block: NaN, infinite and
    // subnormal scales included), then what the quantizer writes.
    std::vector<uint8_t> random(row_bytes(type, n));
    for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
    for (const std::vector<uint8_t>& w : {random, random_weights(type, 1, n, 7)}) {
      const DeviceBuffer dw = to_device(w);
      DeviceBuffer dy(static_cast<size_t>(n) * 4);
      dequantize(type, dw.data(), dy.data(), DequantTo::F32, n, nullptr);
      sync();
      const std::vector<float> gpu = from_device<float>(dy, static_cast<size_t>(n));
      std::vector<float> cpu(static_cast<size_t>(n));
      quant::dequantize_row(type, w.data(), cpu.data(), n);
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < n; ++i)
        if (!same_bits_or_both_nan(gpu[i], cpu[i]) && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0) << "first at " << first << ": gpu " << gpu[first] << " cpu " << cpu[first];
    }
  }
}

TEST(CudaDequantize, HalfOutputsAreTheF32ValuesRoundedToNearestEven) {
  REQUIRE_GPU();
  for (GgmlType type : all_types()) {
    SCOPED_TRACE(type_name(type));
    const int64_t n = 2048;
    const std::vector<uint8_t> w = random_weights(type, 1, n, 9);
    std::vector<float> cpu(static_cast<size_t>(n));
    quant::dequantize_row(type, w.data(), cpu.data(), n);
    const DeviceBuffer dw = to_device(w);
    for (DequantTo to : {DequantTo::F16, DequantTo::BF16}) {
      DeviceBuffer dy(static_cast<size_t>(n) * 2);
      dequantize(type, dw.data(), dy.data(), to, n, nullptr);
      sync();
      const std::vector<uint16_t> gpu = from_device<uint16_t>(dy, static_cast<size_t>(n));
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = to == DequantTo::F16 ? f32_to_f16(cpu[i]) : f32_to_bf16(cpu[i]);
        bad += gpu[i] != want;
      }
      EXPECT_EQ(bad, 0) << (to == DequantTo::F16 ? "f16" : "bf16");
    }
  }
}

// ---- matrix-vector products ----

struct MatvecCase {
  std::vector<uint8_t> weights;
  std::vector<float> x;
  std::vector<uint8_t> act;  // x in the weight's form (quantized on the GPU), or x's floats
  DeviceBuffer dw, dact;
};

MatvecCase make_matvec_case(GgmlType type, Numerics numerics, int64_t rows, int64_t cols, uint32_t seed) {
  MatvecCase c;
  c.weights = random_weights(type, rows, cols, seed);
  c.x = quant::test::gaussian(static_cast<size_t>(cols), seed + 1);
  c.dw = to_device(c.weights);
  ActQuant form;
  if (activation_quant(type, numerics, form)) {
    const DeviceBuffer dx = to_device(c.x);
    const size_t bytes = static_cast<size_t>(activation_row_bytes(form, cols));
    c.dact = DeviceBuffer(bytes);
    quantize_activations(form, dx.as<float>(), c.dact.data(), 1, cols, nullptr);
    if (cudaDeviceSynchronize() != cudaSuccess) throw Error("quantize_activations failed");
    c.act = from_device<uint8_t>(c.dact, bytes);
  } else {
    c.act.resize(c.x.size() * 4);
    std::memcpy(c.act.data(), c.x.data(), c.act.size());
    c.dact = to_device(c.act);
  }
  return c;
}

std::vector<float> run_matvec(const MatvecCase& c, GgmlType type, int64_t rows, int64_t cols, MatvecOrder order) {
  DeviceBuffer dy(static_cast<size_t>(rows) * 4);
  matvec(type, c.dw.data(), rows, cols, c.dact.data(), dy.as<float>(), order, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess) throw Error("matvec failed");
  return from_device<float>(dy, static_cast<size_t>(rows));
}

TEST(CudaMatvec, ReferenceOrderEqualsTheCpuScalarKernelBitForBit) {
  REQUIRE_GPU();
  const int64_t rows = 37, cols = 768;
  for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
    for (GgmlType type : all_types()) {
      SCOPED_TRACE(type_name(type) + (numerics == Numerics::Quality ? " quality" : " default"));
      const MatvecCase c = make_matvec_case(type, numerics, rows, cols, 21);
      const std::vector<float> gpu = run_matvec(c, type, rows, cols, MatvecOrder::Reference);
      const ScalarDot dot = scalar_dot(type);
      int bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float cpu = dot(cols, c.weights.data() + r * row_bytes(type, cols), c.act.data());
        if (!same_bits_or_both_nan(gpu[r], cpu) && bad++ < 3) ADD_FAILURE() << "row " << r << ": gpu " << gpu[r] << " cpu " << cpu;
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(CudaMatvec, FastOrderAgreesWithTheReferenceOrder) {
  REQUIRE_GPU();
  // A decode-sized row (7168: Flash's n_embd) and a row count that is not a
  // multiple of the warps per thread block.
  const int64_t rows = 301, cols = 7168;
  for (GgmlType type : all_types()) {
    SCOPED_TRACE(type_name(type));
    const MatvecCase c = make_matvec_case(type, Numerics::Default, rows, cols, 31);
    const std::vector<float> fast = run_matvec(c, type, rows, cols, MatvecOrder::Fast);
    const std::vector<float> ref = run_matvec(c, type, rows, cols, MatvecOrder::Reference);
    double scale = 0, worst = 0;
    for (int64_t r = 0; r < rows; ++r) scale = std::max(scale, std::fabs(static_cast<double>(ref[r])));
    for (int64_t r = 0; r < rows; ++r) worst = std::max(worst, std::fabs(static_cast<double>(fast[r]) - ref[r]));
    ASSERT_GT(scale, 0.0);
    // Float sums of up to 7168 terms in another order (a wrong term would be
    // off by the order of the result).
    EXPECT_LT(worst / scale, 1e-5) << "worst " << worst << " of " << scale;
  }
}

TEST(CudaMatvec, BatchEqualsOneActivationAtATimeBitForBit) {
  REQUIRE_GPU();
  // 7 activations: batches of 4, 2 and 1.
  const int64_t rows = 133, cols = 1024;
  const int n_acts = 7;
  for (GgmlType type : all_types()) {
    SCOPED_TRACE(type_name(type));
    const std::vector<uint8_t> w = random_weights(type, rows, cols, 51);
    const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(n_acts * cols), 52);
    const DeviceBuffer dw = to_device(w), dx = to_device(x);
    ActQuant form;
    const bool quantized = activation_quant(type, Numerics::Default, form);
    const int64_t act_bytes = quantized ? activation_row_bytes(form, cols) : cols * 4;
    DeviceBuffer dacts(static_cast<size_t>(act_bytes * n_acts));
    if (quantized)
      quantize_activations(form, dx.as<float>(), dacts.data(), n_acts, cols, nullptr);
    else
      ASSERT_EQ(cudaMemcpy(dacts.data(), dx.data(), x.size() * 4, cudaMemcpyDeviceToDevice), cudaSuccess);
    const int64_t ldy = rows + 3;
    DeviceBuffer dbatch(static_cast<size_t>(ldy * n_acts) * 4), done(static_cast<size_t>(rows) * 4);
    matvec_batch(type, dw.data(), rows, cols, dacts.data(), n_acts, dbatch.as<float>(), ldy, nullptr);
    sync();
    const std::vector<float> batch = from_device<float>(dbatch, static_cast<size_t>(ldy * n_acts));
    int bad = 0;
    for (int a = 0; a < n_acts; ++a) {
      matvec(type, dw.data(), rows, cols, dacts.as<uint8_t>() + a * act_bytes, done.as<float>(), MatvecOrder::Fast,
             nullptr);
      sync();
      const std::vector<float> one = from_device<float>(done, static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) bad += !same_bits_or_both_nan(one[r], batch[a * ldy + r]);
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(CudaMatvec, RoutedExpertsEqualEachExpertsOwnProductBitForBit) {
  REQUIRE_GPU();
  // 4 experts of 96 x 512; 5 token-slot pairs choosing 2, 0, 3, 2, 1.
  const int64_t rows = 96, cols = 512, n_expert = 4;
  const std::vector<int32_t> ids = {2, 0, 3, 2, 1};
  const int n_pairs = static_cast<int>(ids.size());
  for (GgmlType type : kQuantTypes) {
    SCOPED_TRACE(type_name(type));
    const std::vector<uint8_t> w = random_weights(type, rows * n_expert, cols, 61);
    const size_t matrix_bytes = row_bytes(type, cols) * static_cast<size_t>(rows);
    const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(n_pairs * cols), 62);
    const DeviceBuffer dw = to_device(w), dx = to_device(x), dids = to_device(ids);
    ActQuant form;
    ASSERT_TRUE(activation_quant(type, Numerics::Default, form));
    const int64_t act_bytes = activation_row_bytes(form, cols);
    DeviceBuffer dacts(static_cast<size_t>(act_bytes * n_pairs));
    quantize_activations(form, dx.as<float>(), dacts.data(), n_pairs, cols, nullptr);
    DeviceBuffer dy(static_cast<size_t>(rows * n_pairs) * 4), done(static_cast<size_t>(rows) * 4);
    matvec_experts(type, dw.data(), rows, cols, dids.as<int32_t>(), n_pairs, dacts.data(), dy.as<float>(), rows, nullptr);
    sync();
    const std::vector<float> y = from_device<float>(dy, static_cast<size_t>(rows * n_pairs));
    int bad = 0;
    for (int p = 0; p < n_pairs; ++p) {
      matvec(type, dw.as<uint8_t>() + ids[p] * matrix_bytes, rows, cols, dacts.as<uint8_t>() + p * act_bytes,
             done.as<float>(), MatvecOrder::Fast, nullptr);
      sync();
      const std::vector<float> one = from_device<float>(done, static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) bad += !same_bits_or_both_nan(one[r], y[p * rows + r]);
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(CudaMatvec, UnsupportedTypesAndShapesAreNamed) {
  REQUIRE_GPU();
  DeviceBuffer w(1024), a(1024), y(64);
  try {
    matvec(GgmlType::Q8_K, w.data(), 1, 256, a.data(), y.as<float>(), MatvecOrder::Fast, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "matvec: no GPU kernel for weight type q8_K");
  }
  try {
    matvec(GgmlType::Q4_K, w.data(), 1, 100, a.data(), y.as<float>(), MatvecOrder::Fast, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "matvec: a row of 100 q4_K values is not a whole number of blocks");
  }
}

// ---- cuBLAS products (prefill) ----

TEST(CudaGemm, MatchesADoublePrecisionProductOfTheDequantizedWeights) {
  REQUIRE_GPU();
  const int64_t rows = 96, cols = 1024, tokens = 7, ldy = 100;
  GemmRunner gemm(nullptr);
  // Dequantized weights through a scratch of 10 rows: 10 blocks of rows.
  GemmRunner chunked(nullptr, 10 * cols * 2);
  for (auto [type, runner] : [&] {
         std::vector<std::pair<GgmlType, GemmRunner*>> cases;
         for (GgmlType t : all_types()) cases.push_back({t, &gemm});
         for (GgmlType t : {GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::MXFP4}) cases.push_back({t, &chunked});
         return cases;
       }()) {
    SCOPED_TRACE(type_name(type) + (runner == &chunked ? " in blocks of rows" : ""));
    const std::vector<uint8_t> w = random_weights(type, rows, cols, 41);
    const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(tokens * cols), 43);
    std::vector<float> wf(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      quant::dequantize_row(type, w.data() + r * row_bytes(type, cols), wf.data() + r * cols, cols);
    const DeviceBuffer dw = to_device(w), dx = to_device(x);
    std::vector<float> init(static_cast<size_t>(tokens * ldy), 123.0f);
    const DeviceBuffer dy = to_device(init);
    runner->matmul(type, dw.data(), rows, cols, dx.as<float>(), tokens, dy.as<float>(), ldy);
    sync();
    const std::vector<float> y = from_device<float>(dy, init.size());
    double err2 = 0, ref2 = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0;
        for (int64_t k = 0; k < cols; ++k) ref += static_cast<double>(wf[r * cols + k]) * x[t * cols + k];
        const double d = y[t * ldy + r] - ref;
        err2 += d * d;
        ref2 += ref * ref;
      }
      for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], 123.0f) << "wrote past the rows";
    }
    const double rel = std::sqrt(err2 / ref2);
    // f16 rounding of weights and activations (2^-11 each), bf16 for MXFP4
    // and BF16 (2^-8 on the activations), f32 sums alone for F32.
    const double bound = type == GgmlType::F32 ? 1e-5 : (type == GgmlType::MXFP4 || type == GgmlType::BF16) ? 6e-3 : 1.5e-3;
    EXPECT_LT(rel, bound);
  }
}

// ---- int8 tensor-core products (prefill) ----

// Rows of 4 steps of 256 values, or of 11 32-value blocks (a step of 8 and a
// partial one).
int64_t int8_case_cols(GgmlType type) { return ggml_type_traits(type).block_elems == 256 ? 1024 : 352; }

// The CPU's product of every weight row with every token's activations, in
// the form `numerics` dots the type with: out[t * rows + r].
std::vector<float> cpu_products(GgmlType type, Numerics numerics, const std::vector<uint8_t>& w, int64_t rows,
                                const std::vector<float>& x, int64_t tokens, int64_t cols) {
  ActQuant form;
  if (!activation_quant(type, numerics, form)) throw Error("no activation form for " + type_name(type));
  const int64_t a_row = activation_row_bytes(form, cols);
  std::vector<uint8_t> act(static_cast<size_t>(tokens * a_row));
  cpu_quantize(form, x.data(), act.data(), tokens * cols);
  const ScalarDot dot = scalar_dot(type);
  std::vector<float> out(static_cast<size_t>(tokens * rows));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r)
      out[static_cast<size_t>(t * rows + r)] = dot(cols, w.data() + r * row_bytes(type, cols), act.data() + t * a_row);
  return out;
}

// Every int8 type through GemmRunner's int8 path (the GPU's activation
// quantizer, then matmul_int8 with the real mma) against the CPU's quantizer
// and scalar dot, bit for bit: 3 row tiles and 3 token tiles, the last of
// each partial, and an output stride past the rows.
TEST(CudaInt8Products, EqualTheCpuScalarKernelBitForBit) {
  REQUIRE_GPU();
  const int64_t rows = 150, tokens = 131, ldy = 153;
  for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
    GemmRunner gemm(nullptr);
    gemm.use_int8_tensor_cores(numerics);
    for (GgmlType type : kQuantTypes) {
      if (!int8_tensor_core_type(type)) continue;
      // Quality changes the rounding of the 32-value activation forms only.
      if (numerics == Numerics::Quality && type != GgmlType::Q8_0 && type != GgmlType::Q4_1 && type != GgmlType::Q4_K)
        continue;
      SCOPED_TRACE(type_name(type) + (numerics == Numerics::Quality ? " quality" : " default"));
      ASSERT_TRUE(gemm.int8_for(type));
      const int64_t cols = int8_case_cols(type);
      const std::vector<uint8_t> w = random_weights(type, rows, cols, 81);
      const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(tokens * cols), 82);
      const DeviceBuffer dw = to_device(w), dx = to_device(x);
      const DeviceBuffer dy = to_device(std::vector<float>(static_cast<size_t>(tokens * ldy), 123.0f));
      gemm.matmul(type, dw.data(), rows, cols, dx.as<float>(), tokens, dy.as<float>(), ldy);
      sync();
      const std::vector<float> y = from_device<float>(dy, static_cast<size_t>(tokens * ldy));
      const std::vector<float> cpu = cpu_products(type, numerics, w, rows, x, tokens, cols);
      int bad = 0;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          const float got = y[static_cast<size_t>(t * ldy + r)], want = cpu[static_cast<size_t>(t * rows + r)];
          if (!same_bits_or_both_nan(got, want) && bad++ < 3)
            ADD_FAILURE() << "token " << t << " row " << r << ": gpu " << got << " cpu " << want;
        }
        for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[static_cast<size_t>(t * ldy + r)], 123.0f) << "past the rows";
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// IQ1_M and float weights keep cuBLAS with the int8 path on.
TEST(CudaInt8Products, TypesWithoutTheKernelTakeCublas) {
  REQUIRE_GPU();
  GemmRunner gemm(nullptr);
  gemm.use_int8_tensor_cores(Numerics::Default);
  for (GgmlType type : {GgmlType::IQ1_M, GgmlType::F16, GgmlType::BF16, GgmlType::F32})
    EXPECT_FALSE(gemm.int8_for(type));
  GemmRunner off(nullptr);
  EXPECT_FALSE(off.int8_for(GgmlType::Q4_K));
}

// The expert tests' pairs: pair p takes expert (7p + p / 3) % 4 of 5, so
// expert 4 is unused and the groups are uneven.
std::vector<int32_t> test_expert_ids(int64_t pairs) {
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  for (size_t p = 0; p < ids.size(); ++p) ids[p] = static_cast<int32_t>((p * 7 + p / 3) % 4);
  return ids;
}

TEST(CudaExpertProducts, EveryPairGetsItsExpertsProductInPairOrder) {
  REQUIRE_GPU();
  const int64_t tokens = 9, rows = 64, cols = 512;
  const int k = 3, n_expert = 5;
  const std::vector<int32_t> ids = test_expert_ids(tokens * k);
  const backend::ExpertGroups groups = backend::group_pairs_by_expert(ids, n_expert);
  GemmRunner gemm(nullptr);
  ExpertProducts products(groups, k, nullptr);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::MXFP4, GgmlType::Q8_0}) {
    for (bool by_token : {true, false}) {
      SCOPED_TRACE(type_name(type) + (by_token ? " by token" : " by pair"));
      const std::vector<uint8_t> w = random_weights(type, rows * n_expert, cols, 71);
      const int64_t n_src = by_token ? tokens : tokens * k;
      const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(n_src * cols), 72);
      std::vector<float> wf(static_cast<size_t>(rows * n_expert * cols));
      for (int64_t r = 0; r < rows * n_expert; ++r)
        quant::dequantize_row(type, w.data() + r * row_bytes(type, cols), wf.data() + r * cols, cols);
      const DeviceBuffer dw = to_device(w), dx = to_device(x);
      DeviceBuffer dy(static_cast<size_t>(tokens * k * rows) * 4);
      products.run(gemm, type, dw.data(), rows, cols, dx.as<float>(), by_token, dy.as<float>());
      sync();
      const std::vector<float> y = from_device<float>(dy, static_cast<size_t>(tokens * k * rows));
      double err2 = 0, ref2 = 0;
      for (int64_t p = 0; p < tokens * k; ++p) {
        const float* xs = x.data() + (by_token ? p / k : p) * cols;
        for (int64_t r = 0; r < rows; ++r) {
          const float* wr = wf.data() + (ids[p] * rows + r) * cols;
          double ref = 0;
          for (int64_t c = 0; c < cols; ++c) ref += static_cast<double>(wr[c]) * xs[c];
          err2 += (y[p * rows + r] - ref) * (y[p * rows + r] - ref);
          ref2 += ref * ref;
        }
      }
      EXPECT_LT(std::sqrt(err2 / ref2), type == GgmlType::MXFP4 ? 6e-3 : 1.5e-3);
    }
  }
}

// The experts' products on the int8 path (activations quantized once for
// all experts): each pair's row equals the CPU's product with its expert,
// bit for bit, by token and by pair.
TEST(CudaExpertProducts, Int8PathEqualsTheCpuForEveryPair) {
  REQUIRE_GPU();
  const int64_t tokens = 70, rows = 80, cols = 512;
  const int k = 3, n_expert = 5;
  const std::vector<int32_t> ids = test_expert_ids(tokens * k);
  const backend::ExpertGroups groups = backend::group_pairs_by_expert(ids, n_expert);
  GemmRunner gemm(nullptr);
  gemm.use_int8_tensor_cores(Numerics::Default);
  ExpertProducts products(groups, k, nullptr);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::Q8_0, GgmlType::Q2_K}) {
    for (bool by_token : {true, false}) {
      SCOPED_TRACE(type_name(type) + (by_token ? " by token" : " by pair"));
      const std::vector<uint8_t> w = random_weights(type, rows * n_expert, cols, 91);
      const int64_t n_src = by_token ? tokens : tokens * k;
      const std::vector<float> x = quant::test::gaussian(static_cast<size_t>(n_src * cols), 92);
      const DeviceBuffer dw = to_device(w), dx = to_device(x);
      DeviceBuffer dy(static_cast<size_t>(tokens * k * rows) * 4);
      products.run(gemm, type, dw.data(), rows, cols, dx.as<float>(), by_token, dy.as<float>());
      sync();
      const std::vector<float> y = from_device<float>(dy, static_cast<size_t>(tokens * k * rows));
      const std::vector<float> all = cpu_products(type, Numerics::Default, w, rows * n_expert, x, n_src, cols);
      int bad = 0;
      for (int64_t p = 0; p < tokens * k; ++p) {
        const int64_t src = by_token ? p / k : p;
        for (int64_t r = 0; r < rows; ++r) {
          const float want = all[static_cast<size_t>(src * rows * n_expert + ids[static_cast<size_t>(p)] * rows + r)];
          const float got = y[static_cast<size_t>(p * rows + r)];
          if (!same_bits_or_both_nan(got, want) && bad++ < 3)
            ADD_FAILURE() << "pair " << p << " row " << r << ": gpu " << got << " cpu " << want;
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

}  // namespace
}  // namespace ds4::cuda
