// AVX2 kernels of Default indexer scoring (IndexerScoreKernels,
// ops_indexer.h): the template of ops_indexer_simd.h at 8 lanes, two rows by
// four head vectors (32 heads per pass) = 8 accumulators, which with the
// query vectors and broadcasts fit the 16 ymm registers.
#include "backend/cpu/ops_indexer.h"
#include "backend/cpu/ops_indexer_simd.h"

namespace ds4::cpu {

using IndexerScorerAvx2 = IndexerScorer<simd::Avx2, /*kRows=*/2, /*kHeadVecs=*/4>;

extern const IndexerScoreKernels kIndexerScoresAvx2 = {"avx2", IndexerScorerAvx2::scores<float>,
                                                       IndexerScorerAvx2::scores<uint16_t>};

}  // namespace ds4::cpu
