// The numerics of the CPU backend are the backend-wide ones
// (backend/numerics.h). Each CPU op that differs between them takes the
// numerics explicitly; ops that are identical in both (RoPE, HC weighted sum
// / post) take none.
#pragma once

#include "backend/numerics.h"

namespace ds4::cpu {

using backend::Numerics;

}  // namespace ds4::cpu
