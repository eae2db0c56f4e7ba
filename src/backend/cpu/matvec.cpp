#include "backend/cpu/matvec.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "model/deepseek4_weights.h"
#include "quant/dot.h"
#include "quant/dot_tile.h"
#include "quant/quant.h"

namespace ds4::cpu {

// Sources for the activation forms (see the table in matvec.h):
//  - llama.cpp: ggml-cpu.c type_traits_cpu[].vec_dot_type gives the form each
//    weight type is dotted with: F32->F32, F16->F16, BF16->BF16, Q8_0->Q8_0,
//    MXFP4/IQ4_NL->Q8_0, Q2_K..Q6_K/IQ2_XXS/IQ2_XS/IQ2_S/IQ3_XXS/IQ3_S/IQ1_S/IQ1_M/IQ4_XS->Q8_K. mul_mat
//    converts the activation with that type's from_float: ggml_cpu_fp32_to_fp16 (F16C, round to nearest
//    even), ggml_cpu_fp32_to_bf16 (round to nearest even), quantize_row_q8_0
//    (on x86 the AVX path: id = 127/amax, round half even; our
//    quantize_row_q8_0_act_ggml_x86) and quantize_row_q8_K (arch/x86/quants.c
//    calls quantize_row_q8_K_ref, whose codes quant::quantize_row_q8_K
//    reproduces).
//    Q4_0/Q5_0->Q8_0 and Q4_1/Q5_1->Q8_1; quantize_row_q8_1 on x86 is the
//    same AVX path as Q8_0's plus s = f16(d * sum of the int32 codes), d =
//    amax/127 in f32 (quant::quantize_row_q8_1_act_ggml_x86).
//  - ds4 (MODEL.md section 3): F16 weights are dotted with the f32 activation
//    in float, no activation rounding; Q8_0 activations use
//    lrintf(x * (1/d)) (quant::quantize_row_q8_0_act), also for MXFP4 and
//    IQ4_NL, which ds4 pairs with Q8_0 like llama.cpp; K-quants, IQ2_XXS and
//    IQ4_XS take Q8_K.
//    ds4 has no Q4_0 ... Q5_1 weights: they take llama.cpp's forms, Q4_0/Q5_0
//    with ds4's Q8_0, Q4_1/Q5_1 with Q8_1 made from ds4's Q8_0 codes plus the
//    same s = f16(d * sum) (quant::quantize_row_q8_1_act).
ActivationForm activation_form(GgmlType weight_type, Numerics numerics) {
  const bool quality = numerics == Numerics::Quality;
  switch (weight_type) {
    case GgmlType::F32: return ActivationForm::F32;
    case GgmlType::F16: return quality ? ActivationForm::F16Rounded : ActivationForm::F32;
    case GgmlType::BF16: return quality ? ActivationForm::BF16Rounded : ActivationForm::F32;
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0: return ActivationForm::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return ActivationForm::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::Q3_K:
    case GgmlType::Q5_K:
    case GgmlType::IQ4_XS: return ActivationForm::Q8_K;
    default: throw Error("matvec: no dot kernel for weight type " + std::string(ggml_type_name(weight_type)));
  }
}

void ActivationCache::reset(const float* x, int64_t n, Numerics numerics) {
  x_ = x;
  n_ = n;
  numerics_ = numerics;
  have_f16_ = have_bf16_ = have_q8_0_ = have_q8_K_ = have_q8_1_ = false;
}

const void* ActivationCache::built(GgmlType weight_type) const {
  switch (activation_form(weight_type, numerics_)) {
    case ActivationForm::F32: return x_;
    case ActivationForm::F16Rounded: return have_f16_ ? f16_rounded_.data() : nullptr;
    case ActivationForm::BF16Rounded: return have_bf16_ ? bf16_rounded_.data() : nullptr;
    case ActivationForm::Q8_0: return have_q8_0_ ? q8_0_.data() : nullptr;
    case ActivationForm::Q8_K: return have_q8_K_ ? q8_K_.data() : nullptr;
    case ActivationForm::Q8_1: return have_q8_1_ ? q8_1_.data() : nullptr;
  }
  return nullptr;
}

namespace {

// Bytes one row of n values takes in form f; ds4::Error when n does not fit
// the form's blocks.
size_t form_row_bytes(ActivationForm f, int64_t n) {
  const size_t un = static_cast<size_t>(n);
  switch (f) {
    case ActivationForm::F32:
    case ActivationForm::F16Rounded:
    case ActivationForm::BF16Rounded: return un * sizeof(float);
    case ActivationForm::Q8_0:
      if (n % quant::kQK8_0 != 0) throw Error("matvec: Q8_0 activation length not a multiple of 32");
      return un / quant::kQK8_0 * sizeof(quant::BlockQ8_0);
    case ActivationForm::Q8_K:
      if (n % quant::kQK_K != 0) throw Error("matvec: Q8_K activation length not a multiple of 256");
      return un / quant::kQK_K * sizeof(quant::BlockQ8_K);
    case ActivationForm::Q8_1:
      if (n % quant::kQK8_1 != 0) throw Error("matvec: Q8_1 activation length not a multiple of 32");
      return un / quant::kQK8_1 * sizeof(quant::BlockQ8_1);
  }
  return 0;
}

// x (n values) converted into form f at dst (form_row_bytes(f, n) bytes).
void convert_row(ActivationForm f, const float* x, int64_t n, Numerics numerics, void* dst) {
  const size_t un = static_cast<size_t>(n);
  switch (f) {
    case ActivationForm::F32: std::memcpy(dst, x, un * sizeof(float)); return;
    case ActivationForm::F16Rounded: {
      // f16 values are exact in f32, so the f16_f32 kernel sees exactly
      // llama.cpp's f16 activation and forms the same (exact) products.
      auto* y = static_cast<float*>(dst);
      for (size_t i = 0; i < un; ++i) y[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    }
    case ActivationForm::BF16Rounded: {
      auto* y = static_cast<float*>(dst);
      for (size_t i = 0; i < un; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    }
    case ActivationForm::Q8_0:
      if (numerics == Numerics::Quality) {
        quant::quantize_row_q8_0_act_ggml_x86(x, static_cast<quant::BlockQ8_0*>(dst), n);
      } else {
        quant::quantize_row_q8_0_act(x, static_cast<quant::BlockQ8_0*>(dst), n);
      }
      return;
    case ActivationForm::Q8_K: quant::quantize_row_q8_K(x, static_cast<quant::BlockQ8_K*>(dst), n); return;
    case ActivationForm::Q8_1:
      if (numerics == Numerics::Quality) {
        quant::quantize_row_q8_1_act_ggml_x86(x, static_cast<quant::BlockQ8_1*>(dst), n);
      } else {
        quant::quantize_row_q8_1_act(x, static_cast<quant::BlockQ8_1*>(dst), n);
      }
      return;
  }
}

}  // namespace

const void* ActivationCache::get(GgmlType weight_type) {
  if (const void* p = built(weight_type)) return p;
  const ActivationForm f = activation_form(weight_type, numerics_);
  if (!x_) throw Error("matvec: activation cache has no row bound");
  const size_t bytes = form_row_bytes(f, n_);
  const size_t n = static_cast<size_t>(n_);
  switch (f) {
    case ActivationForm::F32: return x_;
    case ActivationForm::F16Rounded:
      f16_rounded_.resize(n);
      convert_row(f, x_, n_, numerics_, f16_rounded_.data());
      have_f16_ = true;
      return f16_rounded_.data();
    case ActivationForm::BF16Rounded:
      bf16_rounded_.resize(n);
      convert_row(f, x_, n_, numerics_, bf16_rounded_.data());
      have_bf16_ = true;
      return bf16_rounded_.data();
    case ActivationForm::Q8_0:
      q8_0_.resize(bytes / sizeof(quant::BlockQ8_0));
      convert_row(f, x_, n_, numerics_, q8_0_.data());
      have_q8_0_ = true;
      return q8_0_.data();
    case ActivationForm::Q8_K:
      q8_K_.resize(bytes / sizeof(quant::BlockQ8_K));
      convert_row(f, x_, n_, numerics_, q8_K_.data());
      have_q8_K_ = true;
      return q8_K_.data();
    case ActivationForm::Q8_1:
      q8_1_.resize(bytes / sizeof(quant::BlockQ8_1));
      convert_row(f, x_, n_, numerics_, q8_1_.data());
      have_q8_1_ = true;
      return q8_1_.data();
  }
  throw Error("matvec: activation cache has no row bound");
}

void ActivationBatch::reset(const float* X, int64_t n_rows, int64_t n_cols, int64_t stride, Numerics numerics) {
  X_ = X;
  n_rows_ = n_rows;
  n_cols_ = n_cols;
  stride_ = stride;
  numerics_ = numerics;
  for (Form& f : forms_) f.built = false;
}

void ActivationBatch::prepare(GgmlType weight_type, ThreadPool* pool) {
  const ActivationForm f = activation_form(weight_type, numerics_);
  Form& form = this->form(f);
  if (form.built) return;
  form.rows.resize(static_cast<size_t>(n_rows_));
  if (f == ActivationForm::F32) {
    for (int64_t t = 0; t < n_rows_; ++t) form.rows[static_cast<size_t>(t)] = X_ + t * stride_;
    form.built = true;
    return;
  }
  const size_t row_bytes = form_row_bytes(f, n_cols_);
  form.bytes.resize(row_bytes * static_cast<size_t>(n_rows_));
  for (int64_t t = 0; t < n_rows_; ++t) form.rows[static_cast<size_t>(t)] = form.bytes.data() + row_bytes * t;
  auto convert = [&](int task, int n_tasks) {
    for (int64_t t = task; t < n_rows_; t += n_tasks)
      convert_row(f, X_ + t * stride_, n_cols_, numerics_, form.bytes.data() + row_bytes * t);
  };
  const int threads = pool ? pool->size() : 1;
  const int n_tasks = static_cast<int>(std::min<int64_t>(threads, n_rows_));
  if (pool && n_tasks > 1) {
    pool->run(n_tasks, convert);
  } else {
    convert(0, 1);
  }
  form.built = true;
}

const void* const* ActivationBatch::rows(GgmlType weight_type) const {
  const Form& f = form(activation_form(weight_type, numerics_));
  if (!f.built) throw Error("matmul: activation batch form not prepared");
  return f.rows.data();
}

namespace {

// One weight matrix: n_rows rows of n_cols elements, row_bytes apart.
struct WeightMatrix {
  GgmlType type;
  const uint8_t* data;
  uint64_t row_bytes;
  int64_t n_cols;
  int64_t n_rows;
};

// How a row is dotted: with our kernels, or in the float order of ggml's
// kernels (Quality) for a plain matrix (mul_mat) or a routed expert
// (mul_mat_id), which llama.cpp runs through different kernels.
struct DotOrder {
  bool ggml = false;
  bool expert = false;
  // ggml's x86 repack takes the matrix (Q4_0, IQ4_NL, ...): a 2-D matrix or
  // the experts, rows % 8 == 0 (a grouped 3-D matrix like attn_output_a is
  // not repacked); with >= 8 tokens the IQ types then take its IQP panel
  // path (per expert: its own tokens), else their plain vec_dot.
  bool repacked = false;
  bool iq_panel = false;
};

DotOrder dot_order(const model::TensorView& w, Numerics numerics, int64_t n_tokens) {
  if (numerics == Numerics::Default) return {};
  using K = model::TensorKind;
  const bool routed = w.kind == K::FfnGateExps || w.kind == K::FfnUpExps || w.kind == K::FfnDownExps;
  const bool repacked = (routed || w.ne[2] * w.ne[3] == 1) && w.ne[1] % 8 == 0;
  return {true, routed, repacked, repacked && n_tokens >= 8};
}

WeightMatrix select_matrix(const model::TensorView& w, int expert) {
  // The name is only needed on an error; building it per call would
  // allocate on every matvec.
  const auto name = [&] { return std::string(w.name); };
  if (!w.present()) throw Error("matvec: tensor " + name() + " is absent");
  const auto nbytes = ggml_nbytes(w.type, w.ne[0]);
  if (!nbytes || *nbytes != w.row_bytes) throw Error("matvec: tensor " + name() + " has a bad row size");
  if (expert < 0) {
    if (w.ne[2] * w.ne[3] != 1) throw Error("matvec: tensor " + name() + " is not 2-D; pass an expert");
    return {w.type, w.data, w.row_bytes, static_cast<int64_t>(w.ne[0]), static_cast<int64_t>(w.ne[1])};
  }
  if (w.ne[3] != 1 || static_cast<uint64_t>(expert) >= w.ne[2]) {
    throw Error("matvec: expert " + std::to_string(expert) + " out of range for " + name());
  }
  return {w.type, w.matrix(static_cast<uint64_t>(expert)), w.row_bytes, static_cast<int64_t>(w.ne[0]),
          static_cast<int64_t>(w.ne[1])};
}

float dot_row(const quant::DotKernels& k, GgmlType type, int64_t n, const uint8_t* row, const void* act,
              DotOrder order) {
  using namespace quant;
  if (order.ggml) {
    const bool expert = order.expert;
    switch (type) {
      case GgmlType::Q8_0:
        return dot_q8_0_q8_0_ggml_x86(n, reinterpret_cast<const BlockQ8_0*>(row),
                                      static_cast<const BlockQ8_0*>(act));
      case GgmlType::F32:
        return dot_f32_ggml_x86(n, reinterpret_cast<const float*>(row), static_cast<const float*>(act), expert);
      case GgmlType::F16:
        return dot_f16_ggml_x86(n, reinterpret_cast<const uint16_t*>(row), static_cast<const float*>(act), expert);
      case GgmlType::BF16:
        return dot_bf16_ggml_x86(n, reinterpret_cast<const uint16_t*>(row), static_cast<const float*>(act), expert);
      case GgmlType::Q4_K:
        if (!expert) break;  // 2-D K-quants would go through ggml's gemm: not replicated
        return dot_q4_K_q8_K_ggml_x86(n, reinterpret_cast<const BlockQ4_K*>(row), static_cast<const BlockQ8_K*>(act));
      case GgmlType::Q2_K:
        if (!expert) break;
        return dot_q2_K_q8_K_ggml_x86(n, reinterpret_cast<const BlockQ2_K*>(row), static_cast<const BlockQ8_K*>(act));
      case GgmlType::MXFP4:
        if (!expert) break;
        return dot_mxfp4_q8_0_ggml_x86(n, reinterpret_cast<const BlockMXFP4*>(row),
                                       static_cast<const BlockQ8_0*>(act));
      case GgmlType::Q6_K:
        return dot_q6_K_q8_K_ggml_x86(n, reinterpret_cast<const BlockQ6_K*>(row), static_cast<const BlockQ8_K*>(act));
      case GgmlType::Q5_K:
        return dot_q5_K_q8_K_ggml_x86(n, reinterpret_cast<const BlockQ5_K*>(row), static_cast<const BlockQ8_K*>(act));
      case GgmlType::Q3_K:
        return dot_q3_K_q8_K_ggml_x86(n, reinterpret_cast<const BlockQ3_K*>(row), static_cast<const BlockQ8_K*>(act));
      case GgmlType::IQ3_XXS:
        return order.iq_panel ? dot_iq3_xxs_q8_K_ggml_x86(n, reinterpret_cast<const BlockIQ3_XXS*>(row),
                                                          static_cast<const BlockQ8_K*>(act))
                              : vec_dot_iq3_xxs_q8_K_ggml_x86(n, reinterpret_cast<const BlockIQ3_XXS*>(row),
                                                              static_cast<const BlockQ8_K*>(act));
      case GgmlType::IQ3_S:
        if (!order.iq_panel) break;  // ggml's AVX2 vec_dot for IQ3_S: not replicated
        return dot_iq3_s_q8_K_ggml_x86(n, reinterpret_cast<const BlockIQ3_S*>(row), static_cast<const BlockQ8_K*>(act));
      case GgmlType::IQ4_XS:
        return order.iq_panel ? dot_iq4_xs_q8_K_ggml_x86(n, reinterpret_cast<const BlockIQ4_XS*>(row),
                                                         static_cast<const BlockQ8_K*>(act))
                              : vec_dot_iq4_xs_q8_K_ggml_x86(n, reinterpret_cast<const BlockIQ4_XS*>(row),
                                                             static_cast<const BlockQ8_K*>(act));
      case GgmlType::Q4_0:
        return order.repacked ? dot_q4_0_q8_0_ggml_x86(n, reinterpret_cast<const BlockQ4_0*>(row),
                                                       static_cast<const BlockQ8_0*>(act))
                              : tinyblas_q4_0_q8_0_ggml_x86(n, reinterpret_cast<const BlockQ4_0*>(row),
                                                            static_cast<const BlockQ8_0*>(act));
      case GgmlType::IQ4_NL:
        return order.repacked ? dot_iq4_nl_q8_0_ggml_x86(n, reinterpret_cast<const BlockIQ4_NL*>(row),
                                                         static_cast<const BlockQ8_0*>(act))
                              : tinyblas_iq4_nl_q8_0_ggml_x86(n, reinterpret_cast<const BlockIQ4_NL*>(row),
                                                              static_cast<const BlockQ8_0*>(act));
      case GgmlType::Q5_0:
        return dot_q5_0_q8_0_ggml_x86(n, reinterpret_cast<const BlockQ5_0*>(row), static_cast<const BlockQ8_0*>(act));
      case GgmlType::Q4_1:
        return dot_q4_1_q8_1_ggml_x86(n, reinterpret_cast<const BlockQ4_1*>(row), static_cast<const BlockQ8_1*>(act));
      case GgmlType::Q5_1:
        return dot_q5_1_q8_1_ggml_x86(n, reinterpret_cast<const BlockQ5_1*>(row), static_cast<const BlockQ8_1*>(act));
      case GgmlType::IQ2_XXS:
        if (!expert) break;
        return dot_iq2_xxs_q8_K_ggml_x86(n, reinterpret_cast<const BlockIQ2_XXS*>(row),
                                         static_cast<const BlockQ8_K*>(act));
      default: break;
    }
  }
  switch (type) {
    case GgmlType::F32: return k.f32_f32(n, reinterpret_cast<const float*>(row), static_cast<const float*>(act));
    case GgmlType::F16: return k.f16_f32(n, reinterpret_cast<const uint16_t*>(row), static_cast<const float*>(act));
    case GgmlType::BF16: return k.bf16_f32(n, reinterpret_cast<const uint16_t*>(row), static_cast<const float*>(act));
    case GgmlType::Q8_0:
      return k.q8_0_q8_0(n, reinterpret_cast<const BlockQ8_0*>(row), static_cast<const BlockQ8_0*>(act));
    case GgmlType::MXFP4:
      return k.mxfp4_q8_0(n, reinterpret_cast<const BlockMXFP4*>(row), static_cast<const BlockQ8_0*>(act));
    case GgmlType::Q2_K:
      return k.q2_K_q8_K(n, reinterpret_cast<const BlockQ2_K*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::Q4_K:
      return k.q4_K_q8_K(n, reinterpret_cast<const BlockQ4_K*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::Q6_K:
      return k.q6_K_q8_K(n, reinterpret_cast<const BlockQ6_K*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ2_XXS:
      return k.iq2_xxs_q8_K(n, reinterpret_cast<const BlockIQ2_XXS*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ2_XS:
      return k.iq2_xs_q8_K(n, reinterpret_cast<const BlockIQ2_XS*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ2_S:
      return k.iq2_s_q8_K(n, reinterpret_cast<const BlockIQ2_S*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ1_M:
      return k.iq1_m_q8_K(n, reinterpret_cast<const BlockIQ1_M*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ1_S:
      return k.iq1_s_q8_K(n, reinterpret_cast<const BlockIQ1_S*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ3_XXS:
      return k.iq3_xxs_q8_K(n, reinterpret_cast<const BlockIQ3_XXS*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ3_S:
      return k.iq3_s_q8_K(n, reinterpret_cast<const BlockIQ3_S*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::Q3_K:
      return k.q3_K_q8_K(n, reinterpret_cast<const BlockQ3_K*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::Q5_K:
      return k.q5_K_q8_K(n, reinterpret_cast<const BlockQ5_K*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::IQ4_NL:
      return k.iq4_nl_q8_0(n, reinterpret_cast<const BlockIQ4_NL*>(row), static_cast<const BlockQ8_0*>(act));
    case GgmlType::IQ4_XS:
      return k.iq4_xs_q8_K(n, reinterpret_cast<const BlockIQ4_XS*>(row), static_cast<const BlockQ8_K*>(act));
    case GgmlType::Q4_0:
      return k.q4_0_q8_0(n, reinterpret_cast<const BlockQ4_0*>(row), static_cast<const BlockQ8_0*>(act));
    case GgmlType::Q4_1:
      return k.q4_1_q8_1(n, reinterpret_cast<const BlockQ4_1*>(row), static_cast<const BlockQ8_1*>(act));
    case GgmlType::Q5_0:
      return k.q5_0_q8_0(n, reinterpret_cast<const BlockQ5_0*>(row), static_cast<const BlockQ8_0*>(act));
    case GgmlType::Q5_1:
      return k.q5_1_q8_1(n, reinterpret_cast<const BlockQ5_1*>(row), static_cast<const BlockQ8_1*>(act));
    default: return 0;  // activation_form() rejected the type earlier
  }
}

quant::TileKernel tile_kernel(const quant::TileKernels& k, GgmlType type) {
  switch (type) {
    case GgmlType::F32: return k.f32_f32;
    case GgmlType::F16: return k.f16_f32;
    case GgmlType::BF16: return k.bf16_f32;
    case GgmlType::Q8_0: return k.q8_0_q8_0;
    case GgmlType::MXFP4: return k.mxfp4_q8_0;
    case GgmlType::Q2_K: return k.q2_K_q8_K;
    case GgmlType::Q4_K: return k.q4_K_q8_K;
    case GgmlType::IQ2_XXS: return k.iq2_xxs_q8_K;
    case GgmlType::Q6_K: return k.q6_K_q8_K;
    case GgmlType::Q5_K: return k.q5_K_q8_K;
    case GgmlType::Q3_K: return k.q3_K_q8_K;
    case GgmlType::IQ4_XS: return k.iq4_xs_q8_K;
    case GgmlType::IQ3_XXS: return k.iq3_xxs_q8_K;
    case GgmlType::IQ2_XS:
      return k.iq2_xs_q8_K;
    case GgmlType::IQ1_M:
      return k.iq1_m_q8_K;
    case GgmlType::IQ2_S:
      return k.iq2_s_q8_K;
    default: return nullptr;
  }
}

// Row chunks start at multiples of 16 rows: 16 floats fill a 64-byte cache
// line, so two threads never write the same line of a y row (given an
// aligned y). Tiles of 16 rows are dotted with every token before moving on,
// so a tile's weights (<= 16 rows of one matrix) stay in cache.
constexpr int64_t kRowAlign = 16;
constexpr int kTasksPerThread = 4;
// Rows per float tile-kernel call: the kernels lay a call's weight rows and
// activations out once, so bigger calls amortise that (64 rows measured
// ~1.4x faster than 16 at 64 tokens); thread chunks stay 16-row aligned.
constexpr int64_t kTileKernelRows = 64;
// Decode's guided claims: a 1 / (threads * kGuidedShare) share of the rows
// left, at least kMinGuidedBlocks 16-row blocks (64 rows: a few microseconds
// of streaming, well above the cost of a claim and a cold first block).
constexpr int64_t kGuidedShare = 2;
constexpr int64_t kMinGuidedBlocks = 4;
constexpr int64_t kFloatSplitRows = 4;

// Dots rows [row_begin, row_end) of m with n_tokens activations into Y.
struct RowRange {
  WeightMatrix m;
  const void* const* acts;
  int64_t n_tokens;
  float* Y;
  int64_t ldy;
  DotOrder order;
  const quant::DotKernels& kernels = quant::dot_kernels();
  // In our own order: the tile kernels, bit-identical to the dot kernels, so
  // a token's result does not depend on its batch. They also serve a single
  // token (decode): several rows in flight stream weights from memory faster
  // than one row at a time, and they fall back to the one-row kernel where
  // that is faster.
  quant::TileKernel tile = !order.ggml ? tile_kernel(quant::tile_kernels(), m.type) : nullptr;
  // Integer tiles block their rows internally and lay each activation out
  // once per call, so they get the whole range; the float tiles stream every
  // row of a call past each pass of activations, so their calls stay small.
  bool float_weights = m.type == GgmlType::F16 || m.type == GgmlType::BF16 || m.type == GgmlType::F32;

  // 16-row aligned but for the matrix's end and decode's split of a float
  // matrix of few rows (4-row aligned).
  void operator()(int64_t row_begin, int64_t row_end) const {
    const int64_t tile_rows = !tile ? kRowAlign : float_weights ? kTileKernelRows : row_end - row_begin;
    for (int64_t tile_start = row_begin; tile_start < row_end; tile_start += tile_rows) {
      const int64_t tile_end = std::min(row_end, tile_start + tile_rows);
      if (tile) {
        tile(m.n_cols, m.data + static_cast<uint64_t>(tile_start) * m.row_bytes, m.row_bytes, tile_end - tile_start,
             acts, n_tokens, Y + tile_start, ldy);
        continue;
      }
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        float* y = Y + tok * ldy;
        for (int64_t r = tile_start; r < tile_end; ++r) {
          y[r] = dot_row(kernels, m.type, m.n_cols, m.data + static_cast<uint64_t>(r) * m.row_bytes, acts[tok],
                         order);
        }
      }
    }
  }
};

// Decode streams the weights once: guided self-scheduling over the products'
// rows (one pool run for all of them), each claim a share of what is left
// (down to kMinGuidedBlocks 16-row blocks) within one product, so the threads
// finish within a few rows of each other. With fixed chunks the last one ran
// alone for half a chunk on average (1/16 of the product at 8 chunks, 2
// threads), at one core's bandwidth. A float matrix of few rows (the HC mixes:
// 24 rows of 16384) is split evenly in units of 4 rows instead, or one thread
// would stream all of it (two threads then share one output cache line,
// written once per row).
void decode_rows(const std::vector<RowRange>& products, ThreadPool* pool) {
  const int threads = pool->size();
  std::vector<int64_t> unit(products.size()), first(products.size() + 1, 0);
  int64_t min_take = kMinGuidedBlocks;
  for (size_t i = 0; i < products.size(); ++i) {
    const RowRange& p = products[i];
    const bool few_float_rows = p.float_weights && p.m.n_rows < kRowAlign * kMinGuidedBlocks * threads;
    unit[i] = few_float_rows ? kFloatSplitRows : kRowAlign;
    const int64_t n_units = (p.m.n_rows + unit[i] - 1) / unit[i];
    if (few_float_rows) min_take = std::min(min_take, (n_units + threads - 1) / threads);
    first[i + 1] = first[i] + n_units;
  }
  const int64_t total = first.back();
  const int64_t divisor = static_cast<int64_t>(threads) * kGuidedShare;
  std::atomic<int64_t> next{0};
  pool->run(threads, [&](int, int) {
    int64_t begin = next.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t left = total - begin;
      if (left <= 0) return;
      const size_t i = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), begin) - first.begin() - 1);
      const int64_t take = std::min(first[i + 1] - begin, std::max(min_take, left / divisor));
      if (!next.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed)) continue;
      const int64_t u0 = begin - first[i];
      products[i](u0 * unit[i], std::min(products[i].m.n_rows, (u0 + take) * unit[i]));
      begin = next.load(std::memory_order_relaxed);
    }
  });
}

// Y[t * ldy + r] = row_r . acts[t] for t < n_tokens, r < n_rows.
void dot_rows(const WeightMatrix& m, const void* const* acts, int64_t n_tokens, float* Y, int64_t ldy,
              DotOrder order, ThreadPool* pool) {
  const RowRange rows{m, acts, n_tokens, Y, ldy, order};
  const int64_t n_blocks = (m.n_rows + kRowAlign - 1) / kRowAlign;
  // Several tasks per thread, claimed as threads free up: a thread slowed by
  // the rest of the machine then takes fewer of them instead of holding up
  // the whole product.
  const int threads = pool ? pool->size() : 1;
  const int n_tasks = static_cast<int>(std::min<int64_t>(threads > 1 ? threads * kTasksPerThread : 1, n_blocks));
  if (n_tasks <= 0) return;
  if (!pool || n_tasks == 1) {
    rows(0, m.n_rows);
    return;
  }
  if (n_tokens == 1) {
    decode_rows({rows}, pool);
    return;
  }
  const int64_t chunk = (n_blocks + n_tasks - 1) / n_tasks * kRowAlign;
  pool->run(n_tasks, [&](int t, int /*n*/) { rows(t * chunk, std::min(m.n_rows, (t + 1) * chunk)); });
}

}  // namespace

void matvec(const model::TensorView& w, int expert, ActivationCache& x, float* y, ThreadPool* pool) {
  const WeightMatrix m = select_matrix(w, expert);
  if (x.size() != m.n_cols) throw Error("matvec: activation length does not match " + std::string(w.name));
  const void* act = x.get(m.type);
  dot_rows(m, &act, 1, y, m.n_rows, dot_order(w, x.numerics(), 1), pool);
}

void matvec(const model::TensorView& w, int expert, const float* x, float* y, Numerics numerics, ThreadPool* pool) {
  ActivationCache cache;
  cache.reset(x, static_cast<int64_t>(w.ne[0]), numerics);
  matvec(w, expert, cache, y, pool);
}

void matmul(const model::TensorView& w, int expert, const void* const* acts, int64_t n_acts, float* Y, int64_t ldy,
            Numerics numerics, ThreadPool* pool) {
  const WeightMatrix m = select_matrix(w, expert);
  if (n_acts <= 0) return;
  if (ldy < m.n_rows) throw Error("matmul: output stride below the row count of " + std::string(w.name));
  dot_rows(m, acts, n_acts, Y, ldy, dot_order(w, numerics, n_acts), pool);
}

void matvec_many(std::span<const MatvecJob> jobs, Numerics numerics, ThreadPool* pool) {
  if (jobs.empty()) return;
  std::vector<RowRange> products;
  products.reserve(jobs.size());
  for (const MatvecJob& job : jobs) {
    const WeightMatrix m = select_matrix(*job.w, job.expert);
    products.push_back(RowRange{m, &job.act, 1, job.y, m.n_rows, dot_order(*job.w, numerics, 1)});
  }
  if (pool == nullptr || pool->size() == 1) {
    for (const RowRange& p : products) p(0, p.m.n_rows);
    return;
  }
  decode_rows(products, pool);
}

void matmul(const model::TensorView& w, int expert, ActivationBatch& X, float* Y, int64_t ldy, ThreadPool* pool) {
  const WeightMatrix m = select_matrix(w, expert);
  if (X.n_cols() != m.n_cols) throw Error("matmul: activation length does not match " + std::string(w.name));
  if (X.n_rows() <= 0) return;
  X.prepare(m.type, pool);
  matmul(w, expert, X.rows(m.type), X.n_rows(), Y, ldy, X.numerics(), pool);
}

void matmul(const model::TensorView& w, int expert, const float* X, int64_t n_tokens, float* Y, Numerics numerics,
            ThreadPool* pool) {
  const WeightMatrix m = select_matrix(w, expert);
  if (n_tokens <= 0) return;
  ActivationBatch batch;
  batch.reset(X, n_tokens, m.n_cols, m.n_cols, numerics);
  matmul(w, expert, batch, Y, m.n_rows, pool);
}

}  // namespace ds4::cpu
