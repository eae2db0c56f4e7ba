// Tile kernels (dot_tile.h) for Q8_0, MXFP4 and the float formats at the avx512 levels.
#include "quant/dot_tile.h"
#include "quant/dot_tile_loop.h"

namespace ds4::quant {

extern const DotKernels kDotAvx512;
extern const DotKernels kDotAvx512Vnni;

namespace tile_avx512 {
namespace {
template <bool kVnni>
const DotKernels& level() { return kVnni ? kDotAvx512Vnni : kDotAvx512; }
}  // namespace

template <bool kVnni>
void q8_0_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_detail::loop_dots<BlockQ8_0, BlockQ8_0>(level<kVnni>().q8_0_q8_0, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q8_0_q8_0<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);
template void q8_0_q8_0<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

template <bool kVnni>
void mxfp4_q8_0(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
                float* out, int64_t ldo) {
  tile_detail::loop_dots<BlockMXFP4, BlockQ8_0>(level<kVnni>().mxfp4_q8_0, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void mxfp4_q8_0<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);
template void mxfp4_q8_0<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

void f16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
             float* out, int64_t ldo) {
  tile_detail::loop_dots<uint16_t, float>(kDotAvx512.f16_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void bf16_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
              float* out, int64_t ldo) {
  tile_detail::loop_dots<uint16_t, float>(kDotAvx512.bf16_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

void f32_f32(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
             float* out, int64_t ldo) {
  tile_detail::loop_dots<float, float>(kDotAvx512.f32_f32, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}

}  // namespace tile_avx512
}  // namespace ds4::quant
