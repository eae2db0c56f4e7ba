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

}  // namespace ds4::cpu
