// ggml tensor type ids as stored in GGUF files, and the block geometry of each.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ds4 {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;   // lower-case ggml name, e.g. "q8_0"
  uint32_t block_elems;    // elements per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
};

// Traits of a type id read from a file; nullptr when the id is not a ggml type.
const GgmlTypeTraits* ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_type_traits(GgmlType type);

std::string_view ggml_type_name(GgmlType type);
// Case-insensitive lookup by ggml name ("q8_0", "IQ2_XXS", "mxfp4").
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of n_elems elements of `type`. Returns nullopt when n_elems is not a
// whole number of blocks or the byte count overflows 64 bits.
std::optional<uint64_t> ggml_nbytes(GgmlType type, uint64_t n_elems);

}  // namespace ds4
