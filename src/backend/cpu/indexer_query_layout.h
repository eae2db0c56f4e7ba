// The indexer's queries laid out for the vector scoring kernels
// (ops_indexer_simd.h): q transposed, qt[i * hp + h] = q[h * dim + i], and
// the head weights wp, both zero-padded to hp heads (a multiple of the
// level's lanes). Indexer::select scores a token's rows in 64-row runs,
// several per thread, and transposing q costs about half of what scoring a
// run does, so each thread keeps its last layout and reuses it while q, w and
// the lanes are the same (compared by value, not trusted by address: the
// caller's buffers hold the next token's query later).
//
// Compiled without ISA flags, apart from the kernel files: the std::vector
// growth this needs must not be instantiated in them (core/kernel_scratch.h
// says why).
#pragma once

#include <cstddef>

namespace ds4::cpu {

struct IndexerQueryLayout {
  const float* qt;  // dim x hp
  const float* wp;  // hp
  size_t hp;
};

// This thread's layout of (q: n_head x dim, w: n_head) for `lanes`-wide
// vectors; valid until the thread's next call.
IndexerQueryLayout indexer_query_layout(const float* q, const float* w, size_t n_head, size_t dim, size_t lanes);

}  // namespace ds4::cpu
