// One layer's token-window compressor (MODEL.md 4.5): every token's projected
// kv and gate scores go into a frontier state; each time a window of `ratio`
// tokens completes, the state is pooled into one compressed row (gated
// per-column softmax), normalised, roped at the window's first position and
// QAT-rounded. Ratio 4 keeps two lanes (coff = 2): lane A of a window feeds
// the next window's row, lane B its own. Ratio 128 has one lane.
#pragma once

#include <cstdint>
#include <optional>
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

// What the emitted rows are used for; it fixes the row width and the QAT step.
//   Attention (D = head_dim): Default FP8 on the first D - n_rot dims; Quality none.
//   Indexer (D = indexer_head_dim, must be 128): Default Hadamard-128 + FP4;
//   Quality Hadamard-128 only (llama.cpp rotates index rows, no FP4).
enum class CompressorRole { Attention, Indexer };

class Compressor {
 public:
  // Binds the compressor of `layer` (attn_compressor or indexer_compressor by
  // role). Copies ape and norm to f32 once; kv/gate stay in the model's
  // mapping, which must outlive this object. ds4::Error when the layer has no such
  // compressor or the shapes do not fit.
  Compressor(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, CompressorRole role,
             Numerics numerics);

  // Feeds the token at absolute position `pos` (xn: the attention-normed
  // input, n_embd wide). Returns the compressed row (D wide) when this token
  // completes a window, i.e. (pos + 1) % ratio == 0. Positions must be fed in
  // order from 0 (or from a restored state); the state does not check.
  std::optional<std::vector<float>> step(std::span<const float> xn, int64_t pos, ThreadPool* pool = nullptr);

  // step() in two parts, for a batch of tokens: project() computes the kv
  // and gate projections of every row of `xn` (kv and score: n_rows x
  // state_width(), row-major); push() then feeds one token's projections at
  // `pos` (in order) and returns the completed row like step(). The
  // projections do not depend on the state, so a whole chunk is projected
  // at once; step(x, pos) == push(project(x), pos) bit for bit.
  void project(ActivationBatch& xn, float* kv, float* score, ThreadPool* pool) const;
  std::optional<std::vector<float>> push(const float* kv, const float* score, int64_t pos);

  // Back to the empty frontier: kv 0, score kPoolEmptyScore.
  void reset();

  int ratio() const { return ratio_; }
  int coff() const { return coff_; }
  int dim() const { return dim_; }           // D, width of an emitted row
  int state_rows() const { return coff_ * ratio_; }  // R
  int state_width() const { return coff_ * dim_; }   // W
  CompressorRole role() const { return role_; }

  // A pooled row made a compressed row as push() makes it: RMSNorm with the
  // norm weights, RoPE at the window's first position, then the role's QAT
  // step (a device that pools elsewhere finishes rows to the same values).
  void finish(std::span<float> y, int64_t window_start) const;
  // ape (ratio x W: row pos % ratio is added to a token's scores as it enters
  // the frontier) and the norm weights (D), as f32.
  std::span<const float> ape() const { return ape_; }
  std::span<const float> norm() const { return norm_; }

  // The frontier, row-major R x W (for snapshots and tests). For ratio 4,
  // rows 0..3 are the previous window, rows 4..7 the current one.
  std::span<float> state_kv() { return state_kv_; }
  std::span<float> state_score() { return state_score_; }
  std::span<const float> state_kv() const { return state_kv_; }
  std::span<const float> state_score() const { return state_score_; }

 private:
  model::CompressorWeights w_;  // views into the model's mapping
  CompressorRole role_;
  Numerics numerics_;
  int ratio_ = 0, coff_ = 1, dim_ = 0, n_rot_ = 0;
  float eps_ = 1e-6f;
  RopeParams rope_;  // the compressed layer's (YaRN) parameters
  std::vector<float> ape_;    // ratio x W
  std::vector<float> norm_;   // D
  std::vector<float> state_kv_, state_score_;  // R x W
  std::vector<float> kvc_, scc_;               // this token's projections, W
};

}  // namespace ds4::cpu
