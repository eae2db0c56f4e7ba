#include "model/synthetic_weights.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf_writer.h"
#include "quant/blocks.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/iq4_values.h"
#include "quant/k_scales.h"
#include "quant/quant.h"

namespace ds4::model {
namespace {

// Rows are drawn in chunks of about this many elements; the chunk index is part
// of the stream seed, so this constant is part of the file format of our
// synthetic weights (changing it changes every file).
constexpr uint64_t kChunkElems = 1u << 18;

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// ---- Random codes for the routed-expert formats ----
// Each generator gives blocks whose dequantized values have mean 0 and
// standard deviation `std` in expectation.

// Q2_K: x = d*sc*q - dmin*m per 16 elements. With m = sc and dmin = 1.5 d,
// x = d*sc*(q - 1.5): symmetric levels +-0.5, +-1.5 (variance 1.25 for uniform q).
constexpr uint32_t kQ2ScaleLo = 8, kQ2ScaleSpan = 8;  // sub-block scales 8..15
// Q4_K: x = d*sc*q - dmin*m per 32 elements; m = sc, dmin = 7.5 d gives
// x = d*sc*(q - 7.5) (variance 21.25 for uniform q in 0..15).
constexpr uint32_t kQ4ScaleLo = 32, kQ4ScaleSpan = 32;  // 6-bit scales 32..63
// IQ2_XXS: x = d*(0.5 + s)/4 * grid * sign per group of 32, s a 4-bit scale.
constexpr uint32_t kIq2ScaleLo = 4, kIq2ScaleSpan = 8;  // scales 4..11

double mean_square_of_range(uint32_t lo, uint32_t span, double offset) {
  double s = 0;
  for (uint32_t v = lo; v < lo + span; ++v) s += (v + offset) * (v + offset);
  return s / span;
}

// Fills n_bytes (a multiple of 8) with successive rng.next() words, uniform codes.
void random_bytes(Rng& rng, uint8_t* dst, size_t n_bytes) {
  for (size_t i = 0; i < n_bytes; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(dst + i, &r, 8);
  }
}

// Mean of grid_value^2 over IQ2_XXS's 256 codebook points (8 bytes each).
constexpr double iq2xxs_grid_mean_square() {
  double s = 0;
  for (uint64_t g : quant::kIq2xxsGrid)
    for (int j = 0; j < 8; ++j) {
      const double v = static_cast<double>((g >> (8 * j)) & 0xFF);
      s += v * v;
    }
  return s / (256.0 * 8.0);
}

void random_q2_K(Rng& rng, float std, quant::BlockQ2_K* out, int64_t n_blocks) {
  const double sc2 = mean_square_of_range(kQ2ScaleLo, kQ2ScaleSpan, 0.0);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(sc2 * 1.25)));
  const uint16_t dmin = f32_to_f16(1.5f * f16_to_f32(d));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockQ2_K& blk = out[b];
    uint64_t bits = rng.next();
    for (int j = 0; j < 16; ++j) {
      const uint32_t sc = kQ2ScaleLo + static_cast<uint32_t>(bits & 7);
      bits >>= 3;
      blk.scales[j] = static_cast<uint8_t>(sc | (sc << 4));
    }
    random_bytes(rng, blk.qs, sizeof blk.qs);
    blk.d = d;
    blk.dmin = dmin;
  }
}

// Q4_K's and Q5_K's packed 6-bit scales, each in kQ4ScaleLo.., with min = scale.
void random_k_scales(Rng& rng, uint8_t (&packed)[quant::kKScaleSize]) {
  uint64_t bits = rng.next();
  uint8_t sc[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(kQ4ScaleLo + (bits & 31));
    bits >>= 5;
  }
  std::memset(packed, 0, sizeof packed);
  quant::pack_q4_K_scale_min(sc, sc, packed);
}

void random_q4_K(Rng& rng, float std, quant::BlockQ4_K* out, int64_t n_blocks) {
  const double sc2 = mean_square_of_range(kQ4ScaleLo, kQ4ScaleSpan, 0.0);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(sc2 * 21.25)));
  const uint16_t dmin = f32_to_f16(7.5f * f16_to_f32(d));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockQ4_K& blk = out[b];
    random_k_scales(rng, blk.scales);
    random_bytes(rng, blk.qs, sizeof blk.qs);
    blk.d = d;
    blk.dmin = dmin;
  }
}

void random_iq2_xxs(Rng& rng, float std, quant::BlockIQ2_XXS* out, int64_t n_blocks) {
  const double s2 = mean_square_of_range(kIq2ScaleLo, kIq2ScaleSpan, 0.5) / 16.0;
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(s2 * iq2xxs_grid_mean_square())));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockIQ2_XXS& blk = out[b];
    blk.d = d;
    for (int g = 0; g < 8; ++g) {
      const uint64_t r = rng.next();
      // Low word: four grid indices. High word: four 7-bit sign indices and
      // the 4-bit scale in the top nibble.
      const uint32_t grid = static_cast<uint32_t>(r);
      const uint32_t signs = static_cast<uint32_t>(r >> 32) & 0x0FFFFFFFu;
      const uint32_t scale = kIq2ScaleLo + static_cast<uint32_t>((r >> 60) & 7);
      const uint32_t aux[2] = {grid, signs | (scale << 28)};
      std::memcpy(&blk.qs[4 * g], aux, sizeof aux);
    }
  }
}

// IQ3_XXS: x = d*(0.5 + s)/2 * grid * sign, IQ3_S: x = d*(1 + 2s) * grid *
// sign, per 32 elements with a 4-bit scale s; scales as IQ2_XXS's (4..11).
// Mean of grid_value^2 over an IQ3 codebook (4 bytes per point).
template <size_t N>
constexpr double iq3_grid_mean_square(const std::array<uint32_t, N>& grid) {
  double s = 0;
  for (uint32_t g : grid)
    for (int j = 0; j < 4; ++j) {
      const double v = static_cast<double>((g >> (8 * j)) & 0xFF);
      s += v * v;
    }
  return s / (static_cast<double>(N) * 4.0);
}

void random_iq3_xxs(Rng& rng, float std, quant::BlockIQ3_XXS* out, int64_t n_blocks) {
  const double s2 = mean_square_of_range(kIq2ScaleLo, kIq2ScaleSpan, 0.5) / 4.0;
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(s2 * iq3_grid_mean_square(quant::kIq3xxsGrid))));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockIQ3_XXS& blk = out[b];
    blk.d = d;
    for (int sub = 0; sub < 8; ++sub) {
      // Eight grid indices, then four 7-bit sign indices and the scale nibble.
      const uint64_t grid = rng.next();
      std::memcpy(&blk.qs[8 * sub], &grid, 8);
      const uint64_t r = rng.next();
      const uint32_t scale = kIq2ScaleLo + static_cast<uint32_t>((r >> 60) & 7);
      const uint32_t aux = (static_cast<uint32_t>(r) & 0x0FFFFFFFu) | (scale << 28);
      std::memcpy(&blk.qs[quant::kQK_K / 4 + 4 * sub], &aux, 4);
    }
  }
}

void random_iq3_s(Rng& rng, float std, quant::BlockIQ3_S* out, int64_t n_blocks) {
  const double s2 = 4.0 * mean_square_of_range(kIq2ScaleLo, kIq2ScaleSpan, 0.5);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(s2 * iq3_grid_mean_square(quant::kIq3sGrid))));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockIQ3_S& blk = out[b];
    blk.d = d;
    random_bytes(rng, blk.qs, sizeof blk.qs);
    random_bytes(rng, blk.qh, sizeof blk.qh);
    random_bytes(rng, blk.signs, sizeof blk.signs);
    const uint64_t r = rng.next();
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = kIq2ScaleLo + static_cast<uint32_t>((r >> (8 * k)) & 7);
      const uint32_t hi = kIq2ScaleLo + static_cast<uint32_t>((r >> (8 * k + 4)) & 7);
      blk.scales[k] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void random_mxfp4(Rng& rng, float std, quant::BlockMXFP4* out, int64_t n_blocks) {
  // x = k * 2^(e-128), k uniform over the 16 codes: E[k^2] = 274/8. Blocks mix
  // the two exponents around the target so E[x^2] = std^2 exactly.
  constexpr double kMeanK2 = 274.0 / 8.0;
  const double t = std::log2(std::max<double>(std, 1e-30) / std::sqrt(kMeanK2));
  const double lo = std::floor(t);
  const double p_up = (std::pow(4.0, t - lo) - 1.0) / 3.0;
  const int e_lo = static_cast<int>(std::clamp(128.0 + lo, 1.0, 253.0));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockMXFP4& blk = out[b];
    blk.e = static_cast<uint8_t>(e_lo + (rng.uniform() < p_up ? 1 : 0));
    random_bytes(rng, blk.qs, sizeof blk.qs);
  }
}

// Q5_K: x = d*sc*q - dmin*m per 32 elements, q in 0..31; m = sc and
// dmin = 15.5 d give x = d*sc*(q - 15.5), scales as Q4_K's.
void random_q5_K(Rng& rng, float std, quant::BlockQ5_K* out, int64_t n_blocks) {
  const double sc2 = mean_square_of_range(kQ4ScaleLo, kQ4ScaleSpan, 0.0);
  const double q2 = mean_square_of_range(0, 32, -15.5);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(sc2 * q2)));
  const uint16_t dmin = f32_to_f16(15.5f * f16_to_f32(d));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockQ5_K& blk = out[b];
    random_k_scales(rng, blk.scales);
    random_bytes(rng, blk.qh, sizeof blk.qh);
    random_bytes(rng, blk.qs, sizeof blk.qs);
    blk.d = d;
    blk.dmin = dmin;
  }
}

// The K-quants and IQ4_XS with signed sub-block scales (Q6_K's sc, Q3_K's
// sc - 32, IQ4_XS's ls - 32): magnitudes 8..15 with a random sign, so the
// values' mean is 0 although the codes' is not.
constexpr uint32_t kSignedScaleLo = 8, kSignedScaleSpan = 8;
int signed_scale(uint64_t& bits) {
  const int mag = static_cast<int>(kSignedScaleLo + (bits & 7));
  const int s = (bits & 8) ? -mag : mag;
  bits >>= 4;
  return s;
}

// Q6_K: x = d*sc*(q - 32), q in 0..63, sc int8 per 16 elements.
void random_q6_K(Rng& rng, float std, quant::BlockQ6_K* out, int64_t n_blocks) {
  const double sc2 = mean_square_of_range(kSignedScaleLo, kSignedScaleSpan, 0.0);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(sc2 * mean_square_of_range(0, 64, -32.0))));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockQ6_K& blk = out[b];
    random_bytes(rng, blk.ql, sizeof blk.ql);
    random_bytes(rng, blk.qh, sizeof blk.qh);
    uint64_t bits = rng.next();
    for (int8_t& sc : blk.scales) sc = static_cast<int8_t>(signed_scale(bits));
    blk.d = d;
  }
}

// Q3_K: x = d*(sc - 32)*(q - 4), q in 0..7, sc 6 bits per 16 elements.
void random_q3_K(Rng& rng, float std, quant::BlockQ3_K* out, int64_t n_blocks) {
  const double sc2 = mean_square_of_range(kSignedScaleLo, kSignedScaleSpan, 0.0);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(sc2 * mean_square_of_range(0, 8, -4.0))));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockQ3_K& blk = out[b];
    random_bytes(rng, blk.hmask, sizeof blk.hmask);
    random_bytes(rng, blk.qs, sizeof blk.qs);
    std::memset(blk.scales, 0, sizeof blk.scales);
    uint64_t bits = rng.next();
    for (int j = 0; j < 16; ++j) {
      const auto sc = static_cast<uint32_t>(32 + signed_scale(bits));
      blk.scales[j % 8] = static_cast<uint8_t>(blk.scales[j % 8] | ((sc & 0xF) << (j < 8 ? 0 : 4)));
      blk.scales[8 + j % 4] = static_cast<uint8_t>(blk.scales[8 + j % 4] | ((sc >> 4) << (2 * (j / 4))));
    }
    blk.d = d;
  }
}

// Mean of value^2 over IQ4_NL's 16 non-linear levels.
constexpr double iq4nl_mean_square() {
  double s = 0;
  for (int8_t v : quant::kIq4nlValues) s += static_cast<double>(v) * v;
  return s / 16.0;
}

// IQ4_XS: x = d*(ls - 32)*value[q], ls 6 bits per 32 elements.
void random_iq4_xs(Rng& rng, float std, quant::BlockIQ4_XS* out, int64_t n_blocks) {
  const double sc2 = mean_square_of_range(kSignedScaleLo, kSignedScaleSpan, 0.0);
  const uint16_t d = f32_to_f16(static_cast<float>(std / std::sqrt(sc2 * iq4nl_mean_square())));
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockIQ4_XS& blk = out[b];
    random_bytes(rng, blk.qs, sizeof blk.qs);
    uint64_t bits = rng.next();
    blk.scales_h = 0;
    std::memset(blk.scales_l, 0, sizeof blk.scales_l);
    for (int s = 0; s < 8; ++s) {
      const auto ls = static_cast<uint32_t>(32 + signed_scale(bits));
      blk.scales_l[s / 2] = static_cast<uint8_t>(blk.scales_l[s / 2] | ((ls & 0xF) << (4 * (s % 2))));
      blk.scales_h = static_cast<uint16_t>(blk.scales_h | ((ls >> 4) << (2 * s)));
    }
    blk.d = d;
  }
}

// IQ4_NL: x = d*value[q] per 32 elements, d's sign random per block.
void random_iq4_nl(Rng& rng, float std, quant::BlockIQ4_NL* out, int64_t n_blocks) {
  const float d = static_cast<float>(std / std::sqrt(iq4nl_mean_square()));
  const uint16_t pos = f32_to_f16(d), neg = f32_to_f16(-d);
  for (int64_t b = 0; b < n_blocks; b += 64) {
    uint64_t signs = rng.next();
    for (int64_t k = b; k < std::min(n_blocks, b + 64); ++k, signs >>= 1) {
      out[k].d = (signs & 1) ? neg : pos;
      random_bytes(rng, out[k].qs, sizeof out[k].qs);
    }
  }
}

bool has_random_codes(GgmlType type) {
  switch (type) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::MXFP4: return true;
    default: return false;
  }
}

void random_codes(GgmlType type, Rng& rng, float std, uint8_t* dst, int64_t n_blocks) {
  switch (type) {
    case GgmlType::Q2_K: random_q2_K(rng, std, reinterpret_cast<quant::BlockQ2_K*>(dst), n_blocks); break;
    case GgmlType::Q4_K: random_q4_K(rng, std, reinterpret_cast<quant::BlockQ4_K*>(dst), n_blocks); break;
    case GgmlType::IQ2_XXS: random_iq2_xxs(rng, std, reinterpret_cast<quant::BlockIQ2_XXS*>(dst), n_blocks); break;
    case GgmlType::MXFP4: random_mxfp4(rng, std, reinterpret_cast<quant::BlockMXFP4*>(dst), n_blocks); break;
    case GgmlType::IQ3_XXS: random_iq3_xxs(rng, std, reinterpret_cast<quant::BlockIQ3_XXS*>(dst), n_blocks); break;
    case GgmlType::IQ3_S: random_iq3_s(rng, std, reinterpret_cast<quant::BlockIQ3_S*>(dst), n_blocks); break;
    case GgmlType::Q3_K: random_q3_K(rng, std, reinterpret_cast<quant::BlockQ3_K*>(dst), n_blocks); break;
    case GgmlType::Q5_K: random_q5_K(rng, std, reinterpret_cast<quant::BlockQ5_K*>(dst), n_blocks); break;
    case GgmlType::Q6_K: random_q6_K(rng, std, reinterpret_cast<quant::BlockQ6_K*>(dst), n_blocks); break;
    case GgmlType::IQ4_NL: random_iq4_nl(rng, std, reinterpret_cast<quant::BlockIQ4_NL*>(dst), n_blocks); break;
    case GgmlType::IQ4_XS: random_iq4_xs(rng, std, reinterpret_cast<quant::BlockIQ4_XS*>(dst), n_blocks); break;
    default: throw Error("synthetic weights: no random-code generator for " + std::string(ggml_type_name(type)));
  }
}

// Float values of one row, then stored in `type`.
void store_row(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, n * sizeof(float)); break;
    case GgmlType::F16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      break;
    }
    case GgmlType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      break;
    }
    default: quant::quantize_row(type, src, dst, n); break;
  }
}

// Runs body(chunk) for chunk in [0, n_chunks) on up to n_threads threads.
template <typename Body>
void for_each_chunk(uint64_t n_chunks, unsigned n_threads, Body&& body) {
  const unsigned workers = static_cast<unsigned>(std::min<uint64_t>(std::max(1u, n_threads), n_chunks));
  if (workers <= 1) {
    for (uint64_t c = 0; c < n_chunks; ++c) body(c);
    return;
  }
  std::atomic<uint64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto run = [&] {
    try {
      for (uint64_t c; (c = next.fetch_add(1)) < n_chunks;) body(c);
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!error) error = std::current_exception();
      next = n_chunks;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < workers; ++t) pool.emplace_back(run);
  run();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t st = seed;
  for (uint64_t& s : s_) s = splitmix64(st);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }

uint32_t Rng::below(uint32_t n) { return static_cast<uint32_t>((next() >> 32) * n >> 32); }

// Box-Muller in Marsaglia's polar form (no trigonometry), in double.
float Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return static_cast<float>(spare_);
  }
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double f = std::sqrt(-2.0 * std::log(s) / s);
  spare_ = v * f;
  has_spare_ = true;
  return static_cast<float>(u * f);
}

uint64_t stream_seed(uint64_t seed, std::string_view tensor_name, uint64_t chunk) {
  uint64_t st = seed;
  uint64_t h = splitmix64(st) ^ fnv1a64(tensor_name);
  h = splitmix64(h) ^ chunk;
  return splitmix64(h);
}

// Gains: every matrix has std gain/sqrt(row length), so its outputs have std
// `gain` for unit-variance inputs.
//  - embedding N(0, 1): the HC state starts at unit scale.
//  - projections, compressor, indexer, experts, output head: gain 1.
//  - router: gain 2, so sqrt-softplus scores spread over ~0.3..2.5, plus a
//    distinct per-expert bias in [-0.5, 0.5] (SpreadBias) so top-k ties are rare.
//  - HC fn: gain 1 over the 4*n_embd flat state (mixes O(1)); scales U(0.5, 1),
//    bases N(0, 0.5^2): sigmoid and Sinkhorn inputs O(1), not saturated.
//  - norms N(1, 0.05^2); attention sinks N(0, 1); compressor ape N(0, 0.5^2).
WeightInit weight_init(const TensorSpec& spec, const Deepseek4HParams& hp) {
  using K = WeightInit::Kind;
  const float unit = 1.0f / std::sqrt(static_cast<float>(spec.row_length()));
  switch (spec.family()) {
    case TensorFamily::Embedding: return {K::Normal, 0.0f, 1.0f};
    case TensorFamily::Norm: return {K::Normal, 1.0f, 0.05f};
    case TensorFamily::HcScale: return {K::Uniform, 0.0f, 0.0f, 0.5f, 1.0f};
    case TensorFamily::HcBase: return {K::Normal, 0.0f, 0.5f};
    case TensorFamily::AttnSinks: return {K::Normal, 0.0f, 1.0f};
    case TensorFamily::CompressorApe: return {K::Normal, 0.0f, 0.5f};
    case TensorFamily::Router: return {K::Normal, 0.0f, 2.0f * unit};
    case TensorFamily::RouterBias: return {K::SpreadBias, 0.0f, 0.0f, -0.5f, 0.5f};
    case TensorFamily::Tid2Eid: return {K::Tid2Eid, 0.0f, 0.0f, 0.0f, static_cast<float>(hp.n_expert)};
    case TensorFamily::HcFn:
    case TensorFamily::OutputHead:
    case TensorFamily::AttnProjection:
    case TensorFamily::CompressorProj:
    case TensorFamily::IndexerProj:
    case TensorFamily::SharedExpert:
    case TensorFamily::RoutedGateUp:
    case TensorFamily::RoutedDown: return {K::Normal, 0.0f, unit};
  }
  throw Error("synthetic weights: no init for " + spec.name);
}

void fill_tensor(const TensorSpec& spec, GgmlType type, const WeightInit& init, uint64_t seed,
                 std::span<uint8_t> dst, unsigned n_threads) {
  const int64_t row_len = static_cast<int64_t>(spec.row_length());
  const uint64_t n_rows = spec.n_elements() / spec.row_length();
  const auto row_bytes = ggml_nbytes(type, spec.row_length());
  if (!row_bytes || *row_bytes * n_rows != dst.size())
    throw Error("synthetic weights: " + spec.name + " buffer of " + std::to_string(dst.size()) +
                " bytes does not hold " + std::to_string(n_rows) + " rows of " + std::string(ggml_type_name(type)));

  using K = WeightInit::Kind;
  if (init.kind == K::Tid2Eid) {
    if (type != GgmlType::I32) throw Error("synthetic weights: " + spec.name + " must be I32");
    const auto n_expert = static_cast<uint32_t>(init.hi);
    if (static_cast<uint64_t>(row_len) > n_expert)
      throw Error("synthetic weights: " + spec.name + " needs " + std::to_string(row_len) +
                  " distinct experts per token, only " + std::to_string(n_expert) + " exist");
    const uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunkElems / row_len);
    // Skewed: expert popularity[r] has weight 1 / (1 + r)^skew.
    std::vector<int32_t> popularity(n_expert);
    std::vector<double> cumulative(n_expert);
    if (init.skew > 0.0f) {
      for (uint32_t e = 0; e < n_expert; ++e) popularity[e] = static_cast<int32_t>(e);
      Rng order(stream_seed(seed, spec.name, ~uint64_t{0}));
      for (uint32_t i = n_expert; i > 1; --i) std::swap(popularity[i - 1], popularity[order.below(i)]);
      double sum = 0;
      for (uint32_t r = 0; r < n_expert; ++r) cumulative[r] = sum += std::pow(1.0 + r, -static_cast<double>(init.skew));
    }
    for_each_chunk((n_rows + rows_per_chunk - 1) / rows_per_chunk, n_threads, [&](uint64_t c) {
      Rng rng(stream_seed(seed, spec.name, c));
      std::vector<int32_t> pool(n_expert);
      const uint64_t r1 = std::min(n_rows, (c + 1) * rows_per_chunk);
      if (init.skew > 0.0f) {
        // Weighted draws without replacement: redraw a repeat.
        for (uint64_t r = c * rows_per_chunk; r < r1; ++r) {
          int32_t* row = pool.data();
          for (int64_t i = 0; i < row_len;) {
            const double u = rng.uniform() * cumulative.back();
            const auto rank = static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) -
                                                  cumulative.begin());
            const int32_t e = popularity[std::min<size_t>(rank, n_expert - 1)];
            if (std::find(row, row + i, e) == row + i) row[i++] = e;
          }
          std::memcpy(dst.data() + r * row_len * sizeof(int32_t), row, row_len * sizeof(int32_t));
        }
        return;
      }
      for (uint64_t r = c * rows_per_chunk; r < r1; ++r) {
        for (uint32_t e = 0; e < n_expert; ++e) pool[e] = static_cast<int32_t>(e);
        // Partial Fisher-Yates: the first row_len slots are a uniform draw
        // without replacement.
        for (int64_t i = 0; i < row_len; ++i) {
          const uint32_t j = static_cast<uint32_t>(i) + rng.below(n_expert - static_cast<uint32_t>(i));
          std::swap(pool[i], pool[j]);
        }
        std::memcpy(dst.data() + r * row_len * sizeof(int32_t), pool.data(), row_len * sizeof(int32_t));
      }
    });
    return;
  }

  if (init.kind == K::SpreadBias) {
    // One permutation over the whole tensor (a single row of n_expert).
    const uint64_t n = spec.n_elements();
    std::vector<float> v(n);
    for (uint64_t i = 0; i < n; ++i)
      v[i] = n == 1 ? 0.5f * (init.lo + init.hi)
                    : init.lo + (init.hi - init.lo) * static_cast<float>(i) / static_cast<float>(n - 1);
    Rng rng(stream_seed(seed, spec.name, 0));
    for (uint64_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.below(static_cast<uint32_t>(i))]);
    if (init.skew > 0.0f) {
      // v is now a random order; the expert at position r of a second random
      // order (its popularity rank) loses skew * ln(1 + r).
      std::vector<uint32_t> rank(n);
      for (uint64_t i = 0; i < n; ++i) rank[i] = static_cast<uint32_t>(i);
      for (uint64_t i = n; i > 1; --i) std::swap(rank[i - 1], rank[rng.below(static_cast<uint32_t>(i))]);
      for (uint64_t i = 0; i < n; ++i) v[i] -= init.skew * std::log(1.0f + static_cast<float>(rank[i]));
    }
    for (uint64_t r = 0; r < n_rows; ++r) store_row(type, v.data() + r * row_len, dst.data() + r * *row_bytes, row_len);
    return;
  }

  const bool codes = has_random_codes(type) && init.kind == K::Normal && init.mean == 0.0f;
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunkElems / row_len);
  for_each_chunk((n_rows + rows_per_chunk - 1) / rows_per_chunk, n_threads, [&](uint64_t c) {
    Rng rng(stream_seed(seed, spec.name, c));
    const uint64_t r0 = c * rows_per_chunk, r1 = std::min(n_rows, r0 + rows_per_chunk);
    uint8_t* out = dst.data() + r0 * *row_bytes;
    if (codes) {
      const int64_t blocks = static_cast<int64_t>((r1 - r0) * row_len / ggml_type_traits(type).block_elems);
      random_codes(type, rng, init.std, out, blocks);
      return;
    }
    std::vector<float> row(row_len);
    for (uint64_t r = r0; r < r1; ++r) {
      if (init.kind == K::Uniform) {
        for (float& x : row) x = init.lo + (init.hi - init.lo) * static_cast<float>(rng.uniform());
      } else {
        for (float& x : row) x = init.mean + init.std * rng.normal();
      }
      store_row(type, row.data(), out, row_len);
      out += *row_bytes;
    }
  });
}

size_t add_synthetic_tensors(gguf::Writer& w, const Deepseek4HParams& hp, QuantMix mix, uint64_t seed,
                             unsigned n_threads, float routing_skew) {
  check_mix(mix, hp);
  if (!(routing_skew >= 0.0f)) throw Error("routing skew must be >= 0, got " + std::to_string(routing_skew));
  const std::vector<TensorSpec> specs = deepseek4_tensors(hp);
  for (const TensorSpec& spec : specs) {
    const GgmlType type = tensor_type(mix, spec);
    WeightInit init = weight_init(spec, hp);
    if (init.kind == WeightInit::Kind::SpreadBias || init.kind == WeightInit::Kind::Tid2Eid) init.skew = routing_skew;
    w.add_tensor(spec.name, type, spec.ne, [spec, type, init, seed, n_threads](std::span<uint8_t> dst) {
      fill_tensor(spec, type, init, seed, dst, n_threads);
    });
  }
  return specs.size();
}

}  // namespace ds4::model
