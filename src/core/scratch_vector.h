// std::vector for scratch buffers whose every element is written before it is
// read: growing one default-initializes the new elements (no zero fill). The
// forward pass's per-pass buffers grow by hundreds of MB on a process's first
// long prompt, and value-initializing them was a serial memset on the calling
// thread (~6 % of a 512-token prefill on the bench models).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace ds4 {

template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using ScratchVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace ds4
