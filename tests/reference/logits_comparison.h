// How our logits are compared with llama.cpp's in the parity tests
// (test_reference_forward, test_reference_llama_presets).
#pragma once

#include <cstddef>
#include <vector>

namespace ds4::reference {

struct LogitsComparison {
  double worst_rel = 0;  // max over positions of max|d| / the reference row's range
  int worst_pos = -1;
  int top1_agree = 0;    // positions whose argmax is the same
  double mean_kl = 0, max_kl = 0;  // KL(ref || other) over positions, in double
};

// Row by row over [n_tokens][n_vocab] logits. DS4_PARITY_TRACE=1 prints every
// position whose error exceeds 1e-5 of its row's range.
LogitsComparison compare_logits(const std::vector<float>& ref, const std::vector<float>& other, size_t n_vocab);

// --quality replicates the kernels of llama.cpp's AVX-512 CPU variants; on
// other CPUs llama.cpp runs kernels we do not replicate.
bool replicated_kernels();

}  // namespace ds4::reference
