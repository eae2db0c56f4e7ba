// Deterministic top-k selection, used by the MoE router and the indexer.
#pragma once

#include <cstdint>
#include <span>

namespace ds4::cpu {

// Writes the indices of the out.size() largest scores, largest first; equal
// scores put the lower index first (ds4's insertion top-k keeps the earlier
// index ahead on ties; llama.cpp's std::sort leaves ties unspecified, so this
// rule serves both). NaN scores are never selected ahead of numbers.
// Requires out.size() <= scores.size().
void top_k_desc(std::span<const float> scores, std::span<int32_t> out);

// ggml's CPU GGML_OP_TOP_K (llama.cpp's indexer; Quality): the indices sorted
// by std::partial_sort with "score greater" and nothing else, so ties fall
// where libstdc++'s heap selection leaves them, exactly as in ggml. Indexer
// scores tie often: a row whose dot with every head is negative scores 0.
void top_k_ggml(std::span<const float> scores, std::span<int32_t> out);

// ggml's ggml_argsort_top_k (llama.cpp's MoE router; Quality): std::sort of
// all indices by "score greater", the first out.size() of them.
void argsort_top_k_ggml(std::span<const float> scores, std::span<int32_t> out);

}  // namespace ds4::cpu
