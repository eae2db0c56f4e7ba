// A table of equally wide KV-cache rows held in the storage type of the
// numerics: Default stores f16 (ds4's cache rounds every row to f16, so the
// f16 bits hold the value exactly in half the bytes), Quality stores f32
// (llama.cpp's reference settings use an F32 KV cache). Readers get f32 rows:
// a pointer into the table when it holds f32, a conversion into their scratch
// when it holds f16; f16 rows can also be read as bits (the indexer does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// Bytes a cached value takes in `numerics` (memory accounting).
inline constexpr uint32_t kv_elem_bytes(Numerics numerics) { return numerics == Numerics::Default ? 2 : 4; }

class KvRows {
 public:
  // width >= 0; a 0-wide table holds no rows (a layer without that kind).
  KvRows(int width, Numerics numerics);

  int width() const { return width_; }
  bool is_f16() const { return f16_; }
  int64_t rows() const { return rows_; }
  // Bytes of the rows held (capacity not counted).
  size_t bytes() const { return static_cast<size_t>(rows_) * static_cast<size_t>(width_) * (f16_ ? 2 : 4); }

  void reserve(int64_t rows);
  // n rows of zeros (a ring that is overwritten in place).
  void resize(int64_t n);
  void clear();

  // Appends / overwrites one width-wide row, rounded to f16 when stored as f16.
  void append(std::span<const float> row);
  void set(int64_t r, std::span<const float> row);
  // Replaces every row with `rows` (whole rows), values that were rounded
  // when first stored: kept verbatim, never rounded again. ds4::Error, table
  // unchanged, when the size is not whole rows or an f16 table is given a
  // value f16 does not hold exactly (the message names the row and value).
  void assign(std::span<const float> rows);

  // Row r as f32: the stored row (f32 table) or its exact conversion written
  // to scratch (width floats, f16 table).
  const float *row(int64_t r, float *scratch) const;
  // Row r's f16 bits; f16 tables only.
  const uint16_t *f16_row(int64_t r) const { return h_.data() + static_cast<size_t>(r) * width_; }

 private:
  int width_ = 0;
  bool f16_ = false;
  int64_t rows_ = 0;
  std::vector<float> f_;     // f32 table
  std::vector<uint16_t> h_;  // f16 table
};

}  // namespace ds4::cpu
