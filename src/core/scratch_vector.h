// std::vector for scratch buffers whose every element is written before it is
// read: growing one default-initializes the new elements (no zero fill). The
// forward pass's per-pass buffers grow by hundreds of MB on a process's first
// long prompt, and value-initializing them was a serial memset on the calling
// thread (~6 % of a 512-token prefill on the bench models). Buffers of 2 MiB
// or more are asked for in 2 MiB pages (MADV_HUGEPAGE): their first touch then
// takes one page fault per 2 MiB instead of per 4 KiB (a 512-token prefill
// touches ~250 MB of them, ~60k faults in 4 KiB pages), and reading them takes
// fewer TLB misses.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <cstdint>
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

  static constexpr size_t kHugePage = size_t{2} << 20;

  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage || alignof(T) > kHugePage) return std::allocator<T>::allocate(n);
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p == nullptr) throw std::bad_alloc();
    (void)::madvise(p, rounded, MADV_HUGEPAGE);  // advice: without THP the pages stay 4 KiB
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugePage || alignof(T) > kHugePage) {
      std::allocator<T>::deallocate(p, n);
    } else {
      std::free(p);
    }
  }

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
