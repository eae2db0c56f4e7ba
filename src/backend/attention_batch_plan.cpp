#include "backend/attention_batch_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ds4::backend {
namespace {

// Windows of `ratio` positions that close at positions first .. last
// (a window closes at p when (p + 1) % ratio == 0).
int64_t windows_closed(int ratio, int64_t first, int64_t last) {
  if (ratio == 0 || last < first) return 0;
  return (last + 1) / ratio - first / ratio;
}

}  // namespace

AttentionBatchPlan plan_attention_batch(int n_swa, int ring_count, int ring_next, int64_t first_pos, int64_t n_tokens,
                                        int ratio, int64_t n_compressed, int64_t n_index) {
  const std::string where = "attention batch plan: ";
  if (n_swa < 1) throw Error(where + "a window of " + std::to_string(n_swa) + " rows");
  if (ring_count < 0 || ring_count > n_swa || ring_next < 0 || ring_next >= n_swa)
    throw Error(where + "ring of " + std::to_string(ring_count) + " rows, next slot " + std::to_string(ring_next) +
                ", in " + std::to_string(n_swa) + " slots");
  if (ratio != 0 && ratio != 4 && ratio != 128) throw Error(where + "compress ratio " + std::to_string(ratio));
  if (first_pos < 0 || n_tokens < 0 || n_compressed < 0 || n_index < 0)
    throw Error(where + std::to_string(n_tokens) + " tokens from position " + std::to_string(first_pos) + ", " +
                std::to_string(n_compressed) + " compressed and " + std::to_string(n_index) + " index rows");
  AttentionBatchPlan plan;
  plan.n_swa = n_swa;
  plan.first_pos = first_pos;
  plan.n_tokens = n_tokens;
  std::vector<WindowRow> slot(static_cast<size_t>(n_swa));
  for (int s = 0; s < n_swa; ++s) slot[static_cast<size_t>(s)] = {false, s};
  int next = ring_next, count = ring_count;
  plan.window_begin.reserve(static_cast<size_t>(n_tokens) + 1);
  plan.window.reserve(static_cast<size_t>(n_tokens) * static_cast<size_t>(std::min(n_swa, ring_count + 1)));
  for (int64_t t = 0; t < n_tokens; ++t) {
    slot[static_cast<size_t>(next)] = {true, static_cast<int32_t>(t)};
    next = (next + 1) % n_swa;
    count = std::min(count + 1, n_swa);
    plan.window_begin.push_back(plan.window_rows());
    for (int i = 0; i < count; ++i)
      plan.window.push_back(slot[static_cast<size_t>((next - count + i + n_swa) % n_swa)]);
    const int64_t closed = windows_closed(ratio, first_pos, first_pos + t);
    plan.compressed_visible.push_back(n_compressed + closed);
    plan.index_visible.push_back(ratio == 4 ? n_index + closed : n_index);
  }
  plan.window_begin.push_back(plan.window_rows());
  plan.ring_after = std::move(slot);
  plan.ring_count_after = count;
  plan.ring_next_after = next;
  return plan;
}

}  // namespace ds4::backend
