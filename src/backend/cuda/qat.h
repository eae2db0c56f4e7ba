// DeepSeek V4's quantisation-aware round trips on a GPU (backend/cpu/ops_qat.h,
// MODEL.md section 3), in place, batched over rows (device pointers,
// asynchronous on `stream`): the same float operations as the CPU's, so the
// values are bit-identical to it, with one caveat: the power-of-two block
// scale takes ceil(log2(amax / max)), computed here as the correctly
// rounded float log2 (a double log2 rounded once), where the CPU calls
// glibc's log2f (at most 0.502 ulp). The two gave the same ceiling for every
// one of the first million floats above each power of two from 2^-30 to 2^9
// and a million random ones in each of those binades (checked on the host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ds4::cuda {

// cpu::fp8_e4m3_round_trip on the first n values (a multiple of 64) of each
// of n_rows rows, `stride` floats apart: the 448 non-rope KV dims.
void fp8_e4m3_round_trip_rows(float* x, int64_t n_rows, int64_t stride, int n, cudaStream_t stream);

// cpu::hadamard128 (with_fp4: cpu::indexer_qat, the rotation then
// cpu::fp4_e2m1_round_trip) on each of n_chunks consecutive 128-value chunks
// of each row: an indexer row (1 chunk) or an indexer query (one per head).
void hadamard128_rows(float* x, int64_t n_rows, int64_t stride, int n_chunks, bool with_fp4, cudaStream_t stream);

}  // namespace ds4::cuda
