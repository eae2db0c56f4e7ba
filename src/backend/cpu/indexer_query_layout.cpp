#include "backend/cpu/indexer_query_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ds4::cpu {

namespace {

struct Layout {
  std::vector<float> q, w, qt, wp;  // the q and w it was built from, and the layout
  size_t lanes = 0;
};

}  // namespace

IndexerQueryLayout indexer_query_layout(const float* q, const float* w, size_t n_head, size_t dim, size_t lanes) {
  thread_local Layout last;
  const size_t n_q = n_head * dim;
  // Same sizes and n_head > 0 -> same dim (n_head == 0 or dim == 0: nothing
  // in qt to differ). Empty spans may be null, which memcmp may not get.
  const bool same = last.lanes == lanes && last.q.size() == n_q && last.w.size() == n_head &&
                    (n_q == 0 || std::memcmp(last.q.data(), q, n_q * sizeof(float)) == 0) &&
                    (n_head == 0 || std::memcmp(last.w.data(), w, n_head * sizeof(float)) == 0);
  if (!same) {
    const size_t hp = (n_head + lanes - 1) / lanes * lanes;
    last.lanes = lanes;
    last.q.assign(q, q + n_q);
    last.w.assign(w, w + n_head);
    last.wp.assign(hp, 0.0f);
    std::copy(w, w + n_head, last.wp.begin());
    last.qt.resize(hp * dim);
    for (size_t i = 0; i < dim; ++i) {
      float* col = last.qt.data() + i * hp;
      for (size_t h = 0; h < n_head; ++h) col[h] = q[h * dim + i];
      std::fill(col + n_head, col + hp, 0.0f);
    }
  }
  return {last.qt.data(), last.wp.data(), last.wp.size()};
}

}  // namespace ds4::cpu
