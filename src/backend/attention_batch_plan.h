// Which KV rows each token of a batch attends to, worked out from positions
// and counts alone, so that a device can store a whole batch's rows first and
// then attend for every token at once (MODEL.md 6; the CPU's order in
// backend/cpu/attention_layer.cpp token_core: a token's raw row, and any
// compressed or index row its position completes, are stored before it
// attends).
//
// The raw window is a ring of n_swa slots (backend/cpu/layer_kv_state.h):
// a push writes slot `next`, advances it and grows the count up to n_swa;
// the window's rows, oldest first, are the count slots before `next`. A
// plan names each row it uses by where it is during the batch: a ring slot
// as the batch found it, or batch token i's row.
#pragma once

#include <cstdint>
#include <vector>

namespace ds4::backend {

struct WindowRow {
  bool from_batch = false;
  int32_t index = 0;  // ring slot, or batch token
  bool operator==(const WindowRow&) const = default;
};

struct AttentionBatchPlan {
  int n_swa = 0;
  int64_t first_pos = 0;
  int64_t n_tokens = 0;
  // Token t's window rows, oldest first: window[window_begin[t] ..
  // window_begin[t + 1]).
  std::vector<int64_t> window_begin;
  std::vector<WindowRow> window;
  // The compressed (index) rows token t sees: rows 0 .. n - 1 of the
  // layer's compressed (index) cache, those from before the batch and those
  // the batch's windows add up to and including token t's.
  std::vector<int64_t> compressed_visible;
  std::vector<int64_t> index_visible;
  // The ring after the batch: slot s holds ring_after[s] (slots the batch
  // did not write keep {false, s}); its count and next slot.
  std::vector<WindowRow> ring_after;
  int ring_count_after = 0;
  int ring_next_after = 0;

  int64_t window_rows() const { return static_cast<int64_t>(window.size()); }
};

// A batch of n_tokens tokens from first_pos on, over a ring holding
// ring_count rows with ring_next the next slot to write, on a layer of
// compress ratio `ratio` (0: no compressed rows; 4: index rows too) whose
// caches hold n_compressed and n_index rows. ds4::Error on n_swa < 1, a ring
// count or next slot outside the ring, a ratio other than 0, 4 or 128, or
// negative positions or counts.
AttentionBatchPlan plan_attention_batch(int n_swa, int ring_count, int ring_next, int64_t first_pos, int64_t n_tokens,
                                        int ratio, int64_t n_compressed, int64_t n_index);

}  // namespace ds4::backend
