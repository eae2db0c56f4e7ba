// Weight-matrix times activation: y[r] = row_r(W) . x for every output row of
// a 2-D weight or one expert matrix of a 3-D weight, rows split across a
// ThreadPool. Each weight type is dotted with the activation form its dot
// kernel (quant/dot.h) takes; the activation row is converted once per form.
//
// Activation form per weight type and numerics (sources in matvec.cpp):
//   weight     Default (ds4)                      Quality (llama.cpp CPU)
//   F32        f32                                f32
//   F16        f32                                f16-rounded f32
//   BF16       f32                                bf16-rounded f32
//   Q8_0       Q8_0, ds4 rounding                 Q8_0, ggml x86 rounding
//   MXFP4      Q8_0, ds4 rounding                 Q8_0, ggml x86 rounding
//   IQ4_NL     Q8_0, ds4 rounding                 Q8_0, ggml x86 rounding
//   Q2_K..Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_XS
//              Q8_K                               Q8_K (same codes)
//   Q4_0, Q5_0 Q8_0, ds4 rounding                 Q8_0, ggml x86 rounding
//   Q4_1, Q5_1 Q8_1, ds4 rounding                 Q8_1, ggml x86 rounding
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/numerics.h"
#include "core/ggml_type.h"
#include "core/scratch_vector.h"
#include "quant/blocks.h"

namespace ds4 {
class ThreadPool;
}
namespace ds4::model {
struct TensorView;
}

namespace ds4::cpu {

enum class ActivationForm { F32, F16Rounded, BF16Rounded, Q8_0, Q8_K, Q8_1 };

// The form a weight of `type` is dotted with; ds4::Error for a weight type
// without a dot kernel.
ActivationForm activation_form(GgmlType weight_type, Numerics numerics);

// One activation row and the forms built from it so far. Forms are built on
// first request and kept until reset(); buffers keep their capacity, so a
// reused cache stops allocating. get() is not thread-safe: call prepare() (or
// get()) for every form needed before fanning out, then read concurrently.
class ActivationCache {
 public:
  // Binds x (n elements; not copied, must stay valid while the cache is
  // used) and forgets earlier forms.
  void reset(const float* x, int64_t n, Numerics numerics);
  void prepare(GgmlType weight_type) { (void)get(weight_type); }
  // The activation as the dot kernel for `weight_type` takes it: const float*
  // for F32/F16/BF16 weights, const BlockQ8_0*, BlockQ8_K* or BlockQ8_1*
  // otherwise.
  const void* get(GgmlType weight_type);
  // Already built form (nullptr when not): safe to call concurrently.
  const void* built(GgmlType weight_type) const;

  int64_t size() const { return n_; }
  Numerics numerics() const { return numerics_; }

 private:
  const float* x_ = nullptr;
  int64_t n_ = 0;
  Numerics numerics_ = Numerics::Default;
  bool have_f16_ = false, have_bf16_ = false, have_q8_0_ = false, have_q8_K_ = false, have_q8_1_ = false;
  std::vector<float> f16_rounded_;   // x rounded to f16, held as f32
  std::vector<float> bf16_rounded_;  // x rounded to bf16, held as f32
  std::vector<quant::BlockQ8_0> q8_0_;
  std::vector<quant::BlockQ8_K> q8_K_;
  std::vector<quant::BlockQ8_1> q8_1_;
};

// The rows of a batch of activations (one per token), each converted to the
// forms the weights need. A form is built for every row at once (rows split
// over the pool) on first prepare() and kept until reset(); buffers keep their
// capacity. rows() is safe to call concurrently once prepared.
class ActivationBatch {
 public:
  // Binds n_rows rows of n_cols floats, row t at X + t * stride (not copied:
  // X must stay valid while the batch is used); forgets earlier forms.
  void reset(const float* X, int64_t n_rows, int64_t n_cols, int64_t stride, Numerics numerics);
  void prepare(GgmlType weight_type, ThreadPool* pool);
  // Row pointers in the form a `weight_type` weight is dotted with (as
  // ActivationCache::get gives them); prepare() must have run for the form.
  const void* const* rows(GgmlType weight_type) const;

  int64_t n_rows() const { return n_rows_; }
  int64_t n_cols() const { return n_cols_; }
  Numerics numerics() const { return numerics_; }

 private:
  struct Form {
    bool built = false;
    ScratchVector<uint8_t> bytes;     // converted rows, back to back (each written in full)
    std::vector<const void*> rows;    // n_rows pointers
  };
  Form& form(ActivationForm f) { return forms_[static_cast<size_t>(f)]; }
  const Form& form(ActivationForm f) const { return forms_[static_cast<size_t>(f)]; }

  const float* X_ = nullptr;
  int64_t n_rows_ = 0, n_cols_ = 0, stride_ = 0;
  Numerics numerics_ = Numerics::Default;
  Form forms_[6];
};

// y[r] = row_r . x for the ne[1] rows of w (expert == -1: a 2-D tensor) or of
// expert matrix `expert` of a 3-D tensor. x has ne[0] elements (a whole number
// of the type's blocks), y has ne[1]. pool == nullptr runs on the caller.
// Results do not depend on the pool size. ds4::Error on a bad type, expert or
// shape.
void matvec(const model::TensorView& w, int expert, const float* x, float* y, Numerics numerics, ThreadPool* pool);
// Same, with an activation cache bound to x (reuse it across the matrices
// that read the same x).
void matvec(const model::TensorView& w, int expert, ActivationCache& x, float* y, ThreadPool* pool);

// Y[t][r] = row_r . X[t] for n_tokens activation rows: X is n_tokens x ne[0],
// Y is n_tokens x ne[1], both row-major. Each Y[t] equals matvec(X[t]) bit
// for bit; each token row is converted once and each weight row is dotted
// with every token while it is in cache.
void matmul(const model::TensorView& w, int expert, const float* X, int64_t n_tokens, float* Y, Numerics numerics,
            ThreadPool* pool);
// Y[t * ldy + r] = row_r . acts[t] for n_acts activation rows already in the
// form w's type is dotted with (ActivationBatch::rows / ActivationCache::get):
// the batched form for prefill, where a tile of rows meets every activation
// through the tile kernels (quant/dot_tile.h). Each Y row equals matvec of
// its activation bit for bit, whatever n_acts and the pool size.
void matmul(const model::TensorView& w, int expert, const void* const* acts, int64_t n_acts, float* Y, int64_t ldy,
            Numerics numerics, ThreadPool* pool);
// Same over every row of a batch (the form is prepared here).
void matmul(const model::TensorView& w, int expert, ActivationBatch& X, float* Y, int64_t ldy, ThreadPool* pool);

// One product of a decode step for matvec_many: y (w's ne[1] outputs) = the
// matrix of w (expert -1: a 2-D tensor) . act, act in the form w's type is
// dotted with (ActivationBatch::rows / ActivationCache::get).
struct MatvecJob {
  const model::TensorView* w = nullptr;
  int expert = -1;
  const void* act = nullptr;
  float* y = nullptr;
};

// Several products in one pool run, their rows claimed from one queue:
// decode's products that read the same activation (q_a and kv; a
// compressor's kv and gate; an expert's gate and up) or one each (the grouped
// output LoRA's 8 matrices) then pay one join and one cold start instead of
// one per product. Each y equals matvec of its job bit for bit. ds4::Error on
// a bad type, expert or shape.
void matvec_many(std::span<const MatvecJob> jobs, Numerics numerics, ThreadPool* pool);

}  // namespace ds4::cpu
