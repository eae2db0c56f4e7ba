// Activation quantizers on the GPU: one thread per block, each the host
// scalar quantizer's operations (quant/act_quant.cpp), so the codes and
// scales equal the CPU's bit for bit.
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_kernels.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

using dev::f32_to_f16;

__device__ float block_amax32(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float ax = fabsf(x[j]);
    amax = amax > ax ? amax : ax;
  }
  return amax;
}

// Nearest-even codes of x * id saturated to int8 (NaN -> -128).
__device__ void round_even_codes(const float* x, float id, int8_t* q) {
  for (int j = 0; j < 32; ++j) {
    const float r = rintf(x[j] * id);
    q[j] = r >= 127.0f ? int8_t{127} : r >= -128.0f ? static_cast<int8_t>(r) : int8_t{-128};
  }
}

// A 32-value block: ds4's d = amax / 127 and id = 1 / d, or ggml x86's id =
// 127 / amax.
template <bool kGgmlX86>
__device__ float quantize32(const float* x, uint16_t& d_out, int8_t* q) {
  const float amax = block_amax32(x);
  const float d = amax / 127.0f;
  float id;
  if constexpr (kGgmlX86) {
    id = amax != 0.0f ? 127.0f / amax : 0.0f;
  } else {
    id = d ? 1.0f / d : 0.0f;
  }
  d_out = f32_to_f16(d);
  round_even_codes(x, id, q);
  return id;
}

template <bool kGgmlX86>
__global__ void quantize_q8_0_kernel(const float* x, quant::BlockQ8_0* y, int64_t n_blocks) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n_blocks) return;
  quantize32<kGgmlX86>(x + 32 * i, y[i].d, y[i].qs);
}

template <bool kGgmlX86>
__global__ void quantize_q8_1_kernel(const float* x, quant::BlockQ8_1* y, int64_t n_blocks) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n_blocks) return;
  const float* xb = x + 32 * i;
  const float id = quantize32<kGgmlX86>(xb, y[i].d, y[i].qs);
  const float d = block_amax32(xb) / 127.0f;
  if constexpr (kGgmlX86) {
    // ggml sums the int32 conversions (NaN and out of range: INT_MIN),
    // wrapping, before the saturating packs.
    uint32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      const float r = rintf(xb[j] * id);
      sum += static_cast<uint32_t>(r >= -2147483648.0f && r < 2147483648.0f ? static_cast<int32_t>(r) : INT_MIN);
    }
    y[i].s = f32_to_f16(d * static_cast<float>(static_cast<int32_t>(sum)));
  } else {
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += y[i].qs[j];
    y[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

// quant::quantize_row_q8_K_scalar_block: the signed element of largest
// magnitude (the first on ties) maps to -127.
__global__ void quantize_q8_K_kernel(const float* x, quant::BlockQ8_K* y, int64_t n_blocks) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n_blocks) return;
  const float* xb = x + 256 * i;
  quant::BlockQ8_K& b = y[i];
  float max = 0, amax = 0;
  for (int j = 0; j < 256; ++j) {
    const float ax = fabsf(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (!amax) {
    b.d = 0;
    for (int j = 0; j < 256; ++j) b.qs[j] = 0;
    for (int g = 0; g < 16; ++g) b.bsums[g] = 0;
    return;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < 256; ++j) {
    const int v = dev::nearest_int(iscale * xb[j]);
    b.qs[j] = static_cast<int8_t>(v > 127 ? 127 : v < -128 ? -128 : v);
  }
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
    b.bsums[g] = static_cast<int16_t>(sum);
  }
  b.d = 1 / iscale;
}

constexpr int kThreads = 128;

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

bool activation_quant(GgmlType weight_type, backend::Numerics numerics, ActQuant& out) {
  const bool quality = numerics == backend::Numerics::Quality;
  switch (weight_type) {
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
      out = quality ? ActQuant::Q8_0_GgmlX86 : ActQuant::Q8_0;
      return true;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      out = quality ? ActQuant::Q8_1_GgmlX86 : ActQuant::Q8_1;
      return true;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ4_XS:
      out = ActQuant::Q8_K;
      return true;
    default:
      return false;
  }
}

int64_t activation_row_bytes(ActQuant form, int64_t n_cols) {
  switch (form) {
    case ActQuant::Q8_0:
    case ActQuant::Q8_0_GgmlX86:
      return n_cols / 32 * static_cast<int64_t>(sizeof(quant::BlockQ8_0));
    case ActQuant::Q8_1:
    case ActQuant::Q8_1_GgmlX86:
      return n_cols / 32 * static_cast<int64_t>(sizeof(quant::BlockQ8_1));
    case ActQuant::Q8_K:
      return n_cols / 256 * static_cast<int64_t>(sizeof(quant::BlockQ8_K));
  }
  return 0;
}

void quantize_activations(ActQuant form, const float* x, void* y, int64_t n_rows, int64_t n_cols,
                          cudaStream_t stream) {
  const int64_t block = form == ActQuant::Q8_K ? 256 : 32;
  if (n_cols % block != 0)
    throw Error("quantize_activations: " + std::to_string(n_cols) + " columns are not a whole number of " +
                std::to_string(block) + "-value blocks");
  // Rows are back to back and every row a whole number of blocks, so the
  // rows are one run of blocks.
  const int64_t n_blocks = n_rows * n_cols / block;
  if (n_blocks == 0) return;
  int device = -1;
  (void)cudaGetDevice(&device);
  switch (form) {
    case ActQuant::Q8_0:
      quantize_q8_0_kernel<false><<<grid_for(n_blocks), kThreads, 0, stream>>>(x, static_cast<quant::BlockQ8_0*>(y), n_blocks);
      break;
    case ActQuant::Q8_0_GgmlX86:
      quantize_q8_0_kernel<true><<<grid_for(n_blocks), kThreads, 0, stream>>>(x, static_cast<quant::BlockQ8_0*>(y), n_blocks);
      break;
    case ActQuant::Q8_1:
      quantize_q8_1_kernel<false><<<grid_for(n_blocks), kThreads, 0, stream>>>(x, static_cast<quant::BlockQ8_1*>(y), n_blocks);
      break;
    case ActQuant::Q8_1_GgmlX86:
      quantize_q8_1_kernel<true><<<grid_for(n_blocks), kThreads, 0, stream>>>(x, static_cast<quant::BlockQ8_1*>(y), n_blocks);
      break;
    case ActQuant::Q8_K:
      quantize_q8_K_kernel<<<grid_for(n_blocks), kThreads, 0, stream>>>(x, static_cast<quant::BlockQ8_K*>(y), n_blocks);
      break;
  }
  cuda_check_launch("quantize_activations", device);
}

}  // namespace ds4::cuda
