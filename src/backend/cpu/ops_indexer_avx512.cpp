// AVX-512 kernels of Default indexer scoring (IndexerScoreKernels,
// ops_indexer.h): the template of ops_indexer_simd.h at 16 lanes, four rows
// by four head vectors (64 heads, the Flash indexer) = 16 accumulators. The
// file gets the VNNI/BF16/VBMI flags of the higher levels too, but nothing here
// is integer or bf16 work, so the plain avx512 level runs it.
#include "backend/cpu/ops_indexer.h"
#include "backend/cpu/ops_indexer_simd.h"

namespace ds4::cpu {

using IndexerScorerAvx512 = IndexerScorer<simd::Avx512, /*kRows=*/4, /*kHeadVecs=*/4>;

extern const IndexerScoreKernels kIndexerScoresAvx512 = {"avx512", IndexerScorerAvx512::scores<float>,
                                                         IndexerScorerAvx512::scores<uint16_t>};

}  // namespace ds4::cpu
