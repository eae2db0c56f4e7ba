#include "core/kernel_scratch.h"

#include <algorithm>

namespace ds4 {

namespace {
constexpr size_t kAlign = 64;
}

KernelScratch::KernelScratch() = default;
KernelScratch::~KernelScratch() = default;

uint8_t* KernelScratch::get(size_t bytes) {
  if (bytes > capacity_) {
    capacity_ = std::max(bytes, capacity_ * 2);
    storage_.clear();  // the old contents are not kept: nothing to copy
    storage_.resize(capacity_ + kAlign - 1);
  }
  const auto base = reinterpret_cast<uintptr_t>(storage_.data());
  return reinterpret_cast<uint8_t*>((base + kAlign - 1) & ~uintptr_t{kAlign - 1});
}

}  // namespace ds4
