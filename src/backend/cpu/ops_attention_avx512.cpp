// AVX-512 kernels of Default attention: the template of ops_attention_simd.h
// at 16 lanes. The file gets the VNNI/BF16/VBMI flags of the higher levels too,
// but nothing here is integer or bf16 work, so the plain avx512 level runs it.
#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_attention_simd.h"

namespace ds4::cpu {

extern const AttentionRowKernels kAttentionRowsAvx512 = {"avx512", dots<simd::Avx512, float>,
                                                          dots<simd::Avx512, uint16_t>,
                                                          weighted_sum<simd::Avx512, float>,
                                                          weighted_sum<simd::Avx512, uint16_t>,
    dots2<simd::Avx512, uint16_t>, weighted_sum2<simd::Avx512, uint16_t>};

}  // namespace ds4::cpu
