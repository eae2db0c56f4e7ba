// Lightning-indexer scoring and selection of compressed rows (MODEL.md 4.6,
// trap T11). The score formula is the same float expression in ds4
// (indexer_allowed_decode_one) and ggml (lightning_indexer); the numerics
// differ upstream (ds4 applies Hadamard + FP4 to queries and rows, llama.cpp
// only the Hadamard) and in the float order of the sums (Default: vector
// kernels; Quality: the scalar loops).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// scores[c] = sum_h max(0, dot(rows[c], q_h)) * weights[h], where q is
// n_head rows of head_dim and weights already carry 1/sqrt(dim*heads).
// Quality: the scalar loops below in their fixed float order (one running
// sum per dot, mul then add; heads summed in order), the order these scores
// have always had. Default: the vector kernels of indexer_score_kernels(),
// equal to Quality up to float rounding (at DS4_ISA=scalar, bit for bit).
// Either way a row's score depends only on that row, q and weights, never on
// which rows share the call, and f16 rows (a Default cache as stored, read in
// place) score exactly as the f32 rows holding their values.
void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const float* const> rows, std::span<float> scores,
                    Numerics numerics = Numerics::Default);
void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const uint16_t* const> rows, std::span<float> scores,
                    Numerics numerics = Numerics::Default);

// The scoring kernels of one ISA level (ops_indexer.cpp: scalar = the
// Quality loops; ops_indexer_avx2.cpp, ops_indexer_avx512.cpp: FMA chains
// over transposed queries, see ops_indexer_simd.h), over f32 or f16 rows.
struct IndexerScoreKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  void (*scores_f32)(const float* q, const float* weights, size_t n_head, size_t dim, const float* const* rows,
                     size_t n_rows, float* scores);
  void (*scores_f16)(const float* q, const float* weights, size_t n_head, size_t dim, const uint16_t* const* rows,
                     size_t n_rows, float* scores);
};

// The level the dot kernels run at (quant::dot_kernels(), so DS4_ISA picks
// it too; avx512vnni and avx512vbmi run the avx512 kernels). Chosen once.
const IndexerScoreKernels& indexer_score_kernels();
// The kernels of the dot level named `isa` (quant::dot_kernels_for: ds4::Error
// if unknown, not built or not runnable here).
const IndexerScoreKernels& indexer_score_kernels_for(const char* isa);

// indexer_scores with the given kernels (tests compare levels).
void indexer_scores(const IndexerScoreKernels& k, std::span<const float> q, std::span<const float> weights,
                    int head_dim, std::span<const float* const> rows, std::span<float> scores);
void indexer_scores(const IndexerScoreKernels& k, std::span<const float> q, std::span<const float> weights,
                    int head_dim, std::span<const uint16_t* const> rows, std::span<float> scores);

// Indices of the compressed rows attention may use, increasing: all of them
// when there are at most top_k, else the top_k highest scores. Ties: Default
// -> lower index (ds4's repeated strict-greater argmax); Quality -> where
// ggml's top_k (a libstdc++ partial_sort) puts them.
std::vector<int32_t> indexer_select(std::span<const float> scores, int top_k,
                                    Numerics numerics = Numerics::Default);

}  // namespace ds4::cpu
