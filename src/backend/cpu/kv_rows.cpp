#include "backend/cpu/kv_rows.h"

#include <algorithm>
#include <bit>
#include <string>

#include "core/error.h"
#include "core/fp16.h"

namespace ds4::cpu {

KvRows::KvRows(int width, Numerics numerics) : width_(width), f16_(numerics == Numerics::Default) {
  if (width_ < 0) throw Error("kv rows: width " + std::to_string(width_) + " is negative");
}

void KvRows::reserve(int64_t rows) {
  const auto n = static_cast<size_t>(rows) * static_cast<size_t>(width_);
  if (f16_)
    h_.reserve(n);
  else
    f_.reserve(n);
}

void KvRows::resize(int64_t n) {
  const auto values = static_cast<size_t>(n) * static_cast<size_t>(width_);
  if (f16_)
    h_.resize(values);
  else
    f_.resize(values);
  rows_ = n;
}

void KvRows::clear() { resize(0); }

void KvRows::append(std::span<const float> row) {
  if (row.size() != static_cast<size_t>(width_))
    throw Error("kv rows: appended row is not " + std::to_string(width_) + " wide");
  if (f16_)
    for (const float v : row) h_.push_back(f32_to_f16(v));
  else
    f_.insert(f_.end(), row.begin(), row.end());
  ++rows_;
}

void KvRows::set(int64_t r, std::span<const float> row) {
  if (row.size() != static_cast<size_t>(width_) || r < 0 || r >= rows_)
    throw Error("kv rows: row " + std::to_string(r) + " is out of range or not " + std::to_string(width_) + " wide");
  const size_t at = static_cast<size_t>(r) * static_cast<size_t>(width_);
  if (f16_)
    std::transform(row.begin(), row.end(), h_.begin() + static_cast<std::ptrdiff_t>(at), f32_to_f16);
  else
    std::copy(row.begin(), row.end(), f_.begin() + static_cast<std::ptrdiff_t>(at));
}

void KvRows::assign(std::span<const float> rows) {
  const auto w = static_cast<size_t>(width_);
  if (w == 0 ? !rows.empty() : rows.size() % w != 0)
    throw Error("kv rows: " + std::to_string(rows.size()) + " floats are not whole rows of " + std::to_string(width_));
  if (!f16_) {
    f_.assign(rows.begin(), rows.end());
  } else {
    // The rows were f16-rounded when first stored; a value that is not would
    // change on storage, so it is refused rather than silently rounded.
    for (size_t i = 0; i < rows.size(); ++i)
      if (std::bit_cast<uint32_t>(f16_round(rows[i])) != std::bit_cast<uint32_t>(rows[i]))
        throw Error("kv rows: row " + std::to_string(i / w) + " value " + std::to_string(i % w) + " (" +
                    std::to_string(rows[i]) + ") is not an f16 value");
    h_.resize(rows.size());
    std::transform(rows.begin(), rows.end(), h_.begin(), f32_to_f16);
  }
  rows_ = w == 0 ? 0 : static_cast<int64_t>(rows.size() / w);
}

const float *KvRows::row(int64_t r, float *scratch) const {
  const size_t at = static_cast<size_t>(r) * static_cast<size_t>(width_);
  if (!f16_) return f_.data() + at;
  std::transform(h_.begin() + static_cast<std::ptrdiff_t>(at), h_.begin() + static_cast<std::ptrdiff_t>(at) + width_,
                 scratch, f16_to_f32);
  return scratch;
}

}  // namespace ds4::cpu
