#include "backend/compressor_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ds4::backend {

CompressorPlan plan_compressor_batch(int ratio, int dim, int64_t first_pos, int64_t n_tokens) {
  if (ratio != 4 && ratio != 128) throw Error("compressor plan: ratio " + std::to_string(ratio) + " has no compressor");
  if (dim < 1) throw Error("compressor plan: row width " + std::to_string(dim));
  if (first_pos < 0 || n_tokens < 0)
    throw Error("compressor plan: " + std::to_string(n_tokens) + " tokens from position " + std::to_string(first_pos));
  CompressorPlan plan;
  plan.ratio = ratio;
  plan.coff = ratio == 4 ? 2 : 1;
  plan.dim = dim;
  plan.first_pos = first_pos;
  plan.n_tokens = n_tokens;
  const int n_cand = plan.n_cand();
  // The CPU's pushes, tracking where each frontier row's values are.
  std::vector<PlanRow> source(static_cast<size_t>(n_cand));
  for (int r = 0; r < n_cand; ++r) source[static_cast<size_t>(r)] = {false, r};
  plan.ape_row.reserve(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int64_t pos = first_pos + i;
    const int k = static_cast<int>(pos % ratio);
    plan.ape_row.push_back(k);
    source[static_cast<size_t>(plan.n_prev() + k)] = {true, static_cast<int32_t>(i)};
    if ((pos + 1) % ratio != 0) continue;
    plan.candidates.insert(plan.candidates.end(), source.begin(), source.end());
    plan.closing_token.push_back(static_cast<int32_t>(i));
    plan.window_start.push_back(pos + 1 - ratio);
    // Ratio 4: this window becomes the next one's previous window.
    if (plan.coff == 2) std::copy(source.begin() + ratio, source.end(), source.begin());
  }
  plan.frontier_after = std::move(source);
  return plan;
}

PlanAddresses plan_addresses(const CompressorPlan& plan, const float* frontier_kv, const float* frontier_score,
                             const float* batch_kv, const float* batch_score) {
  const auto width = static_cast<int64_t>(plan.width());
  const auto row = [&](const PlanRow& r, const float* frontier, const float* batch) {
    return (r.from_batch ? batch : frontier) + static_cast<int64_t>(r.index) * width;
  };
  PlanAddresses a;
  a.score.reserve(plan.candidates.size());
  a.kv.reserve(plan.candidates.size());
  const int n_cand = plan.n_cand();
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const int offset = plan.lane_offset(static_cast<int>(i % static_cast<size_t>(n_cand)));
    a.score.push_back(row(plan.candidates[i], frontier_score, batch_score) + offset);
    a.kv.push_back(row(plan.candidates[i], frontier_kv, batch_kv) + offset);
  }
  for (const PlanRow& r : plan.frontier_after) {
    a.frontier_score.push_back(row(r, frontier_score, batch_score));
    a.frontier_kv.push_back(row(r, frontier_kv, batch_kv));
  }
  return a;
}

}  // namespace ds4::backend
