// The lightning indexer's scoring and selection on a GPU (backend/cpu/ops_indexer.h,
// MODEL.md 4.6), for a batch of tokens, each over the index rows visible at
// its position (always the first n of the layer's index cache):
//   score[c] = sum_h max(0, dot(row c, q_h)) * w_h
// with q the token's finished queries (roped, rotated, FP4 in Default) and w
// its scaled head weights; then the allowed rows: all of them when there are
// at most top_k, else the top_k scores (ties to the lower row, NaN last, as
// the CPU's Default), in increasing row order either way. The dots add in
// another order than the CPU's: scores within float rounding of it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ds4::cuda {

struct IndexerRows {
  const float* q = nullptr;        // n_tokens x n_head x dim
  const float* weights = nullptr;  // n_tokens x n_head
  const void* rows = nullptr;      // the index cache: rows of dim stored values, row_stride values apart
  bool f32_rows = false;           // values f32 (Quality) or f16 bits (Default)
  int64_t row_stride = 0;
  const int32_t* n_rows = nullptr;  // n_tokens: the cache rows each token sees (<= max_rows)
  int max_rows = 0;
  int64_t n_tokens = 0;
  int n_head = 0;
  int dim = 0;
  float* scores = nullptr;  // n_tokens x max_rows (entries past a token's n_rows untouched)
};

// ds4::Error when a token's queries and weights do not fit a thread block's
// shared memory (n_head x (dim + 1) floats over 48 KiB).
void indexer_scores_rows(const IndexerRows& rows, cudaStream_t stream);

// allowed[t * top_k + i], i < n_allowed[t] = min(n_rows[t], top_k): token t's
// allowed rows, increasing; scores as indexer_scores_rows left them.
// ds4::Error unless 1 <= top_k <= 4096.
void indexer_select_rows(const float* scores, const int32_t* n_rows, int64_t n_tokens, int max_rows, int top_k,
                         int32_t* allowed, int32_t* n_allowed, cudaStream_t stream);

}  // namespace ds4::cuda
