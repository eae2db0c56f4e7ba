// Tile kernels (dot_tile.h) for Q2_K, Q4_K and IQ2_XXS at the avx512 levels.
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
void q2_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_detail::loop_dots<BlockQ2_K, BlockQ8_K>(level<kVnni>().q2_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q2_K_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);
template void q2_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

template <bool kVnni>
void q4_K_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
               float* out, int64_t ldo) {
  tile_detail::loop_dots<BlockQ4_K, BlockQ8_K>(level<kVnni>().q4_K_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void q4_K_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);
template void q4_K_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

template <bool kVnni>
void iq2_xxs_q8_K(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts, int64_t n_acts,
                  float* out, int64_t ldo) {
  tile_detail::loop_dots<BlockIQ2_XXS, BlockQ8_K>(level<kVnni>().iq2_xxs_q8_K, n, w, row_bytes, n_rows, acts, n_acts, out, ldo);
}
template void iq2_xxs_q8_K<false>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);
template void iq2_xxs_q8_K<true>(int64_t, const uint8_t*, uint64_t, int64_t, const void* const*, int64_t, float*, int64_t);

}  // namespace tile_avx512
}  // namespace ds4::quant
