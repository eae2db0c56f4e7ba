// Growable scratch memory for the kernel files of one ISA level (*_avx2.cpp,
// *_avx512.cpp). Those files are compiled with their level's flags, so any
// inline or template function they instantiate out of line (std::vector's
// growth, say) is emitted as an AVX2 or AVX-512 copy of a function the whole
// program shares, and the linker keeps one of the copies at random: an
// AVX-512 copy of vector<uint8_t>::resize kept for every caller crashed the
// AVX2 tiles with SIGILL on an AVX2-only CPU. These members are compiled in a
// file without ISA flags; kernel files keep their scratch here, never in std
// containers (tests/cli/check_isa_objects.sh enforces it on the build).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/scratch_vector.h"

namespace ds4 {

class KernelScratch {
 public:
  KernelScratch();
  ~KernelScratch();
  KernelScratch(const KernelScratch&) = delete;
  KernelScratch& operator=(const KernelScratch&) = delete;

  // At least `bytes` bytes aligned to 64, uninitialised; valid until the next
  // get (which keeps no contents when it grows).
  uint8_t* get(size_t bytes);

  // get() for `count` elements of a trivial type.
  template <typename T>
  T* get_as(size_t count) {
    return reinterpret_cast<T*>(get(count * sizeof(T)));
  }

 private:
  ScratchVector<uint8_t> storage_;
  size_t capacity_ = 0;
};

}  // namespace ds4
