// Reporting a batch of activation rows to a backend::MatrixInputs listener
// (ds4-imatrix): the CPU layers' one line per product.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/matrix_inputs.h"

namespace ds4::cpu {

// Rows X, X + stride, ... (n of them) met `slice` of w; nothing without a
// listener.
inline void report_inputs(backend::MatrixInputs* inputs, const model::TensorView& w, backend::MatrixSlice slice,
                          const float* X, int64_t n, int64_t stride, int64_t chunk_tokens) {
  if (inputs == nullptr || n <= 0) return;
  std::vector<const float*> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rows[static_cast<size_t>(r)] = X + r * stride;
  inputs->met(w, slice, rows, chunk_tokens);
}

}  // namespace ds4::cpu
