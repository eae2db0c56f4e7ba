#include "core/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DS4_X86 1
#endif

namespace ds4 {
namespace {

#ifdef DS4_X86
struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(uint32_t leaf, uint32_t subleaf) {
  CpuidRegs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

// XCR0 via xgetbv, written as inline asm so this file needs no -mxsave.
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t reg, int n) { return (reg >> n) & 1u; }

CpuFeatures detect() {
  CpuFeatures f;
  const uint32_t max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  const CpuidRegs l0 = cpuid(0, 0);
  f.amd = l0.ebx == 0x68747541u && l0.edx == 0x69746e65u && l0.ecx == 0x444d4163u;  // "AuthenticAMD"
  const CpuidRegs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.ecx, 27);
  const bool avx = bit(l1.ecx, 28);
  if (!osxsave || !avx) return f;  // without AVX nothing we dispatch on is usable

  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;            // SSE + AVX state
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  if (!ymm_state) return f;

  f.fma = bit(l1.ecx, 12);
  f.f16c = bit(l1.ecx, 29);
  if (max_leaf < 7) return f;
  const CpuidRegs l7 = cpuid(7, 0);
  f.avx2 = bit(l7.ebx, 5);
  f.bmi2 = bit(l7.ebx, 8);
  f.avx_vnni = false;
  if (l7.eax >= 1) {
    const CpuidRegs l7s1 = cpuid(7, 1);
    f.avx_vnni = bit(l7s1.eax, 4);
    if (zmm_state) f.avx512bf16 = bit(l7s1.eax, 5);
  }
  if (zmm_state) {
    f.avx512f = bit(l7.ebx, 16);
    f.avx512dq = bit(l7.ebx, 17);
    f.avx512bw = bit(l7.ebx, 30);
    f.avx512vl = bit(l7.ebx, 31);
    f.avx512vnni = bit(l7.ecx, 11);
    f.avx512vbmi = bit(l7.ecx, 1);
    f.avx512bitalg = bit(l7.ecx, 12);
  }
  if (!f.avx512f) {
    // The AVX-512 sub-features are meaningless without the foundation.
    f.avx512dq = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512vbmi = f.avx512bitalg = f.avx512bf16 = false;
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace ds4
