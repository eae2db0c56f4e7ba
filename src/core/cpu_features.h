// x86 CPU features that the kernel dispatcher needs, read once with cpuid and
// checked against the OS-enabled register state (xgetbv): a feature whose
// registers the OS does not save is reported as absent.
#pragma once

namespace ds4 {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512vbmi = false;
  bool avx512bitalg = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;
  bool amd = false;  // vendor AuthenticAMD (kernel choices measured to differ by vendor)
};

const CpuFeatures& cpu_features();

}  // namespace ds4
