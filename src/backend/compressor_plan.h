// How a batch of consecutive tokens moves through one layer's KV compressor
// (MODEL.md 4.5), worked out from the positions alone so that a device can
// run the whole batch as gathers: which rows each window that closes in the
// batch pools, and where every row of the frontier comes from afterwards.
//
// The CPU's compressor (backend/cpu/compressor.h) feeds tokens one by one:
// token at pos writes its projections (kv, and the gate score + ape[pos %
// ratio]) into frontier row r (ratio 4: 4 + pos % 4 of 8 two-lane rows;
// ratio 128: pos % 128 of 128 one-lane rows); when (pos + 1) % ratio == 0
// the frontier's rows are pooled (ratio 4: rows 0..3 through lane A, the
// previous window, then rows 4..7 through lane B) and, on ratio 4, rows 4..7
// are copied over rows 0..3. A plan names every row by where its values are:
// the frontier as it stood before the batch, or batch token i's projections,
// so pooling over the plan and rebuilding the frontier from it give the
// CPU's rows and state bit for bit.
#pragma once

#include <cstdint>
#include <vector>

namespace ds4::backend {

// A frontier-wide row (coff x dim floats): the frontier's row `index` before
// the batch, or batch token `index`'s projections (its score with ape added).
struct PlanRow {
  bool from_batch = false;
  int32_t index = 0;
  bool operator==(const PlanRow&) const = default;
};

struct CompressorPlan {
  int ratio = 0;
  int coff = 1;  // lanes: 2 on ratio 4, else 1
  int dim = 0;   // width of a pooled row; frontier rows are coff x dim
  int64_t first_pos = 0;
  int64_t n_tokens = 0;

  // The windows the batch closes, in order: window w pools candidates
  // [w * n_cand(), (w + 1) * n_cand()), was closed by batch token
  // closing_token[w] and starts at position window_start[w] (its RoPE
  // position).
  std::vector<PlanRow> candidates;
  std::vector<int32_t> closing_token;
  std::vector<int64_t> window_start;
  // Row r of the frontier after the batch.
  std::vector<PlanRow> frontier_after;
  // Batch token i's ape row (pos % ratio): its score row adds ape row ape_row[i].
  std::vector<int32_t> ape_row;

  int n_cand() const { return coff * ratio; }           // frontier rows, candidates per window
  int n_prev() const { return coff == 2 ? ratio : 0; }  // candidates read through lane A
  int width() const { return coff * dim; }
  int64_t n_windows() const { return static_cast<int64_t>(closing_token.size()); }
  // Where candidate c of a window starts within its row: lane B (ratio 4's
  // candidates from n_prev() on) reads columns dim .. 2 dim - 1.
  int lane_offset(int c) const { return coff == 2 && c >= n_prev() ? dim : 0; }
};

// The plan of n_tokens tokens from position first_pos on (the frontier
// holding whatever the tokens before first_pos left). ds4::Error on a ratio
// other than 4 or 128, dim < 1, first_pos < 0 or n_tokens < 0.
CompressorPlan plan_compressor_batch(int ratio, int dim, int64_t first_pos, int64_t n_tokens);

// The plan's rows as addresses: frontier row r at frontier + r * width,
// batch row i at batch + i * width, a candidate's address offset to its
// lane. Host or device addresses alike (only arithmetic is done on them).
struct PlanAddresses {
  std::vector<const float*> score, kv;                    // n_windows x n_cand (pooling order)
  std::vector<const float*> frontier_score, frontier_kv;  // n_cand: the new frontier's sources (whole rows)
};
PlanAddresses plan_addresses(const CompressorPlan& plan, const float* frontier_kv, const float* frontier_score,
                             const float* batch_kv, const float* batch_score);

}  // namespace ds4::backend
