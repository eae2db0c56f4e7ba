#include "logits_comparison.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/cpu_features.h"

namespace ds4::reference {
namespace {

std::vector<double> softmax(const float* x, size_t n) {
  const double m = *std::max_element(x, x + n);
  std::vector<double> p(n);
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i] = std::exp(static_cast<double>(x[i]) - m);
  for (auto& v : p) v /= s;
  return p;
}

}  // namespace

LogitsComparison compare_logits(const std::vector<float>& ref, const std::vector<float>& other, size_t n_vocab) {
  LogitsComparison c;
  const size_t n = ref.size() / n_vocab;
  for (size_t t = 0; t < n; ++t) {
    const float *r = ref.data() + t * n_vocab, *o = other.data() + t * n_vocab;
    const auto [mn, mx] = std::minmax_element(r, r + n_vocab);
    double d = 0;
    for (size_t i = 0; i < n_vocab; ++i) d = std::max(d, std::fabs(static_cast<double>(r[i]) - o[i]));
    const double rel = d / (static_cast<double>(*mx) - *mn);
    if (std::getenv("DS4_PARITY_TRACE") && rel > 1e-5) std::printf("pos %zu rel %.3g\n", t, rel);
    if (!(rel <= c.worst_rel)) c.worst_rel = rel, c.worst_pos = static_cast<int>(t);
    if (std::max_element(r, r + n_vocab) - r == std::max_element(o, o + n_vocab) - o) ++c.top1_agree;
    const auto p = softmax(r, n_vocab), q = softmax(o, n_vocab);
    double kl = 0;
    for (size_t i = 0; i < n_vocab; ++i)
      if (p[i] > 0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
    c.mean_kl += kl;
    c.max_kl = std::max(c.max_kl, kl);
  }
  c.mean_kl /= static_cast<double>(n);
  return c;
}

bool replicated_kernels() {
  const auto& f = cpu_features();
  return f.avx512f && f.avx512dq && f.avx2 && f.fma;
}

}  // namespace ds4::reference
