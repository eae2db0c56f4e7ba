#include "backend/cpu/tensor_f32.h"

#include <string>

#include "core/error.h"
#include "quant/quant.h"

namespace ds4::cpu {

std::vector<float> tensor_to_f32(const model::TensorView &t, uint64_t n) {
  if (!t.present()) throw Error("tensor " + std::string(t.name) + " is absent");
  if (t.ne[0] * t.n_rows != n)
    throw Error("tensor " + std::string(t.name) + " holds " + std::to_string(t.ne[0] * t.n_rows) +
                " values, expected " + std::to_string(n));
  std::vector<float> v(static_cast<size_t>(n));
  quant::dequantize_row(t.type, t.data, v.data(), static_cast<int64_t>(n));
  return v;
}

}  // namespace ds4::cpu
