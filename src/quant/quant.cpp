// Type dispatch for the reference dequantizers and quantizers.
#include "quant/quant.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"

namespace ds4::quant {
namespace {

bool dequantize_supported(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q8_K:
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::MXFP4:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::Q3_K:
    case GgmlType::Q5_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      return true;
    default:
      return false;
  }
}

void check_count(const char* what, GgmlType type, int64_t n) {
  const uint32_t block = ggml_type_traits(type).block_elems;
  if (n < 0 || n % block != 0) {
    throw Error(std::string(what) + ": " + std::to_string(n) + " elements is not a whole number of " +
                std::string(ggml_type_name(type)) + " blocks (" + std::to_string(block) + " elements each)");
  }
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  if (!dequantize_supported(type)) {
    throw Error("dequantize: unsupported type " + std::string(ggml_type_name(type)));
  }
  check_count("dequantize", type, n);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      break;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      break;
    }
    case GgmlType::Q8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); break;
    case GgmlType::Q8_K: dequantize_row_q8_K(static_cast<const BlockQ8_K*>(src), dst, n); break;
    case GgmlType::Q2_K: dequantize_row_q2_K(static_cast<const BlockQ2_K*>(src), dst, n); break;
    case GgmlType::Q4_K: dequantize_row_q4_K(static_cast<const BlockQ4_K*>(src), dst, n); break;
    case GgmlType::Q6_K: dequantize_row_q6_K(static_cast<const BlockQ6_K*>(src), dst, n); break;
    case GgmlType::IQ2_XXS: dequantize_row_iq2_xxs(static_cast<const BlockIQ2_XXS*>(src), dst, n); break;
    case GgmlType::IQ2_XS: dequantize_row_iq2_xs(static_cast<const BlockIQ2_XS*>(src), dst, n); break;
    case GgmlType::IQ2_S: dequantize_row_iq2_s(static_cast<const BlockIQ2_S*>(src), dst, n); break;
    case GgmlType::IQ1_M: dequantize_row_iq1_m(static_cast<const BlockIQ1_M*>(src), dst, n); break;
    case GgmlType::IQ1_S: dequantize_row_iq1_s(static_cast<const BlockIQ1_S*>(src), dst, n); break;
    case GgmlType::MXFP4: dequantize_row_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n); break;
    case GgmlType::IQ3_XXS: dequantize_row_iq3_xxs(static_cast<const BlockIQ3_XXS*>(src), dst, n); break;
    case GgmlType::IQ3_S: dequantize_row_iq3_s(static_cast<const BlockIQ3_S*>(src), dst, n); break;
    case GgmlType::Q3_K: dequantize_row_q3_K(static_cast<const BlockQ3_K*>(src), dst, n); break;
    case GgmlType::Q5_K: dequantize_row_q5_K(static_cast<const BlockQ5_K*>(src), dst, n); break;
    case GgmlType::IQ4_NL: dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); break;
    case GgmlType::IQ4_XS: dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); break;
    case GgmlType::Q4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); break;
    case GgmlType::Q4_1: dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); break;
    case GgmlType::Q5_0: dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); break;
    case GgmlType::Q5_1: dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); break;
    default: break;
  }
}

bool quantize_supported(GgmlType type) { return type != GgmlType::Q8_K && dequantize_supported(type); }

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const float* importance) {
  if (!quantize_supported(type)) {
    throw Error("quantize: unsupported type " + std::string(ggml_type_name(type)) +
                (type == GgmlType::Q8_K ? " (use quantize_row_q8_K for activations)" : ""));
  }
  check_count("quantize", type, n);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case GgmlType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      break;
    }
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      break;
    }
    case GgmlType::Q8_0: quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); break;
    case GgmlType::Q2_K: quantize_row_q2_K(src, static_cast<BlockQ2_K*>(dst), n, importance); break;
    case GgmlType::Q4_K: quantize_row_q4_K(src, static_cast<BlockQ4_K*>(dst), n, importance); break;
    case GgmlType::Q6_K: quantize_row_q6_K(src, static_cast<BlockQ6_K*>(dst), n, importance); break;
    case GgmlType::IQ2_XXS: quantize_row_iq2_xxs(src, static_cast<BlockIQ2_XXS*>(dst), n, importance); break;
    case GgmlType::IQ2_XS: quantize_row_iq2_xs(src, static_cast<BlockIQ2_XS*>(dst), n, importance); break;
    case GgmlType::IQ2_S: quantize_row_iq2_s(src, static_cast<BlockIQ2_S*>(dst), n, importance); break;
    case GgmlType::IQ1_M: quantize_row_iq1_m(src, static_cast<BlockIQ1_M*>(dst), n, importance); break;
    case GgmlType::IQ1_S: quantize_row_iq1_s(src, static_cast<BlockIQ1_S*>(dst), n, importance); break;
    case GgmlType::MXFP4: quantize_row_mxfp4(src, static_cast<BlockMXFP4*>(dst), n); break;
    case GgmlType::IQ3_XXS: quantize_row_iq3_xxs(src, static_cast<BlockIQ3_XXS*>(dst), n, importance); break;
    case GgmlType::IQ3_S: quantize_row_iq3_s(src, static_cast<BlockIQ3_S*>(dst), n, importance); break;
    case GgmlType::Q3_K: quantize_row_q3_K(src, static_cast<BlockQ3_K*>(dst), n, importance); break;
    case GgmlType::Q5_K: quantize_row_q5_K(src, static_cast<BlockQ5_K*>(dst), n, importance); break;
    case GgmlType::IQ4_NL: quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n, importance); break;
    case GgmlType::IQ4_XS: quantize_row_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n, importance); break;
    case GgmlType::Q4_0: quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n, importance); break;
    case GgmlType::Q4_1: quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n, importance); break;
    case GgmlType::Q5_0: quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n, importance); break;
    case GgmlType::Q5_1: quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n, importance); break;
    default: break;
  }
}

void weight_energy_importance(const float* w, int64_t nrows, int64_t n_per_row, float* importance) {
  for (int64_t c = 0; c < n_per_row; ++c) importance[c] = 0.0f;
  for (int64_t r = 0; r < nrows; ++r) {
    const float* row = w + r * n_per_row;
    for (int64_t c = 0; c < n_per_row; ++c) importance[c] += row[c] * row[c];
  }
}

void quantize_rows(GgmlType type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                   const float* importance) {
  if (!quantize_supported(type)) {
    throw Error("quantize: unsupported type " + std::string(ggml_type_name(type)));
  }
  check_count("quantize", type, n_per_row);
  if (nrows < 0) throw Error("quantize: negative row count " + std::to_string(nrows));
  std::vector<float> energy;
  if (!importance && (type == GgmlType::IQ2_XXS || type == GgmlType::IQ2_XS || type == GgmlType::IQ1_S)) {
    energy.resize(static_cast<size_t>(n_per_row));
    weight_energy_importance(src, nrows, n_per_row, energy.data());
    importance = energy.data();
  }
  const uint64_t row_bytes = *ggml_nbytes(type, static_cast<uint64_t>(n_per_row));
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < nrows; ++r) {
    quantize_row(type, src + r * n_per_row, out + static_cast<uint64_t>(r) * row_bytes, n_per_row, importance);
  }
}

}  // namespace ds4::quant
