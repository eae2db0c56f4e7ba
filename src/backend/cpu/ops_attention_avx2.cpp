// AVX2 kernels of Default attention: the template of ops_attention_simd.h at
// 8 lanes.
#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_attention_simd.h"

namespace ds4::cpu {

extern const AttentionRowKernels kAttentionRowsAvx2 = {"avx2", dots<simd::Avx2, float>, dots<simd::Avx2, uint16_t>,
                                                        weighted_sum<simd::Avx2, float>,
                                                        weighted_sum<simd::Avx2, uint16_t>,
    dots2<simd::Avx2, uint16_t>, weighted_sum2<simd::Avx2, uint16_t>};

}  // namespace ds4::cpu
