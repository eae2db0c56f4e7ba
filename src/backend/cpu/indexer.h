// The lightning indexer of a ratio-4 layer (MODEL.md 4.6): which compressed
// rows the token at `pos` may attend to. With at most top_k rows, all of them
// (no scoring); else the top_k rows by score sum_h w[h] * relu(row . q_h),
// where q comes from the q-LoRA output and w from the normed layer input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/matvec.h"
#include "backend/cpu/numerics.h"
#include "backend/cpu/ops_rope.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::cpu {

class Indexer {
 public:
  // Binds indexer_attn_q_b and indexer_proj of `layer` (views into the
  // model's mapping, which must outlive this object). ds4::Error on a layer
  // without an indexer or an indexer key length other than 128.
  Indexer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, Numerics numerics);

  // Indices of the allowed rows, increasing. qr: q-LoRA output after its
  // RMSNorm (q_lora_rank); xn: attention-normed input (n_embd); rows: the
  // index rows visible at pos (each head_dim() wide, as the index compressor
  // emitted and the cache stored them).
  std::vector<int32_t> allowed(std::span<const float> qr, std::span<const float> xn, int64_t pos,
                               std::span<const float* const> rows, ThreadPool* pool = nullptr) const;
  // The same over f16 rows (a Default cache reads its rows in place; the
  // result equals allowed() on the rows converted to f32).
  std::vector<int32_t> allowed(std::span<const float> qr, std::span<const float> xn, int64_t pos,
                               std::span<const uint16_t* const> rows, ThreadPool* pool = nullptr) const;

  // The parts of allowed(), for tests and diagnostics.
  // q: n_head x head_dim = indexer_attn_q_b . qr, each head's tail roped at
  // pos, then Hadamard-128 (+ FP4 in Default).
  void query(std::span<const float> qr, int64_t pos, std::span<float> q, ThreadPool* pool = nullptr) const;
  // w: n_head = (indexer_proj . xn) * 1/sqrt(n_head * head_dim).
  void head_weights(std::span<const float> xn, std::span<float> w, ThreadPool* pool = nullptr) const;

  // Prefill: the two projections allowed() needs, for a batch of tokens at
  // once: QB (n x n_head*head_dim) = indexer_attn_q_b . qr, PW (n x n_head)
  // = indexer_proj . xn, raw (before RoPE, rotation and scale).
  void project(ActivationBatch& qr, ActivationBatch& xn, float* QB, float* PW, ThreadPool* pool = nullptr) const;
  // allowed() from one token's rows of project()'s output (finished in
  // place); equals allowed() on that token's qr and xn bit for bit.
  std::vector<int32_t> allowed_projected(float* qb, float* pw, int64_t pos, std::span<const float* const> rows,
                                         ThreadPool* pool = nullptr) const;
  std::vector<int32_t> allowed_projected(float* qb, float* pw, int64_t pos, std::span<const uint16_t* const> rows,
                                         ThreadPool* pool = nullptr) const;

  int n_head() const { return n_head_; }
  int head_dim() const { return head_dim_; }
  int top_k() const { return top_k_; }

 private:
  template <class Row>
  std::vector<int32_t> allowed_rows(std::span<const float> qr, std::span<const float> xn, int64_t pos,
                                    std::span<const Row* const> rows, ThreadPool* pool) const;
  template <class Row>
  std::vector<int32_t> allowed_projected_rows(float* qb, float* pw, int64_t pos, std::span<const Row* const> rows,
                                              ThreadPool* pool) const;
  // Scores of every row (split over the pool) and the top-k selection.
  template <class Row>
  std::vector<int32_t> select(std::span<const float> q, std::span<const float> w, std::span<const Row* const> rows,
                              ThreadPool* pool) const;
  // RoPE, Hadamard (+ FP4) of a projected query; scale of projected weights.
  void finish_query(std::span<float> q, int64_t pos) const;
  void finish_weights(std::span<float> w) const;

  model::TensorView q_b_, proj_;
  Numerics numerics_;
  int n_head_ = 0, head_dim_ = 0, top_k_ = 0;
  RopeParams rope_;  // compressed-layer (ratio 4) parameters, as for the index rows
};

}  // namespace ds4::cpu
