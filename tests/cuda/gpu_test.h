// What the GPU test programs share: whether a usable GPU is here, and
// REQUIRE_GPU(), which skips a test without one, or fails it when
// DS4_REQUIRE_GPU is set (scripts/gpu-check.sh, where a GPU must be).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_devices.h"

namespace ds4::cuda::test {

// Whether GPU 0 is here and usable; the reason when not.
inline bool have_gpu(std::string& why) {
  static const GpuList list = list_gpus();
  if (list.devices.empty()) {
    why = list.unavailable;
    return false;
  }
  if (!list.devices[0].unsupported.empty()) {
    why = describe(list.devices[0]);
    return false;
  }
  return true;
}

}  // namespace ds4::cuda::test

#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    std::string why_;                                                                   \
    if (!::ds4::cuda::test::have_gpu(why_)) {                                           \
      if (std::getenv("DS4_REQUIRE_GPU")) FAIL() << "DS4_REQUIRE_GPU is set: " << why_; \
      GTEST_SKIP() << why_;                                                             \
    }                                                                                   \
  } while (0)
