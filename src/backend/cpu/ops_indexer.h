// Lightning-indexer scoring and selection of compressed rows (MODEL.md 4.6,
// trap T11). The score formula is the same float expression in ds4
// (indexer_allowed_decode_one) and ggml (lightning_indexer), so there is no
// Numerics switch; the numerics differ only upstream (ds4 applies
// Hadamard + FP4 to queries and rows, llama.cpp only the Hadamard).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// scores[c] = sum_h max(0, dot(rows[c], q_h)) * weights[h], heads in order,
// where q is n_head rows of head_dim and weights already carry 1/sqrt(dim*heads).
void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const float* const> rows, std::span<float> scores);
// The same over f16 rows (a Default cache as stored): each row is converted
// to f32 (exact) once, then scored in the same float order, so the scores
// are those of the f32 overload on the converted rows, bit for bit.
void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const uint16_t* const> rows, std::span<float> scores);

// Indices of the compressed rows attention may use, increasing: all of them
// when there are at most top_k, else the top_k highest scores. Ties: Default
// -> lower index (ds4's repeated strict-greater argmax); Quality -> where
// ggml's top_k (a libstdc++ partial_sort) puts them.
std::vector<int32_t> indexer_select(std::span<const float> scores, int top_k,
                                    Numerics numerics = Numerics::Default);

}  // namespace ds4::cpu
