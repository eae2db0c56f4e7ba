// Small weight tensors (norms, HC scales and bases, sinks) copied out of the
// mapping into f32 once at bind time.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek4_weights.h"

namespace ds4::cpu {

// All n elements of t as f32. ds4::Error naming the tensor when it is absent
// or does not hold exactly n elements.
std::vector<float> tensor_to_f32(const model::TensorView &t, uint64_t n);

}  // namespace ds4::cpu
