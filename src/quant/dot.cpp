// ISA-level registry and runtime selection of the dot kernels.
//
// Adding a level: define `extern const DotKernels kDotAvx2 = {"avx2", ...};`
// in a dot_avx2.cpp (which gets the ISA flags), declare it below, and append
// one row to kLevels with the CPU features it needs. Rows go from the
// simplest to the best level.
#include "quant/dot.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cpu_features.h"
#include "core/error.h"

namespace ds4::quant {

extern const DotKernels kDotScalar;
extern const DotKernels kDotAvx2;        // dot_avx2.cpp
extern const DotKernels kDotAvx512;      // dot_avx512.cpp
extern const DotKernels kDotAvx512Vnni;  // dot_avx512.cpp
extern const DotKernels kDotAvx512Vbmi;  // dot_avx512.cpp

namespace {

struct IsaLevel {
  const char* name;
  const DotKernels* kernels;  // null while the level is not built
  bool (*cpu_can_run)(const CpuFeatures&);
  // Picked by default where it runs and this holds (else only by DS4_ISA).
  bool (*chosen_by_default)(const CpuFeatures&);
};

bool always(const CpuFeatures&) { return true; }
bool has_avx2(const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c && f.bmi2; }
bool has_avx512(const CpuFeatures& f) {
  return has_avx2(f) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
}
bool has_avx512vnni(const CpuFeatures& f) { return has_avx512(f) && f.avx512vnni; }
// The level's IQ2_XXS decode also reads sign bits with vpshufbitqmb (BITALG,
// present wherever VBMI is but on Cannon Lake).
bool has_avx512vbmi(const CpuFeatures& f) { return has_avx512vnni(f) && f.avx512vbmi && f.avx512bitalg; }
// avx512vbmi differs from avx512vnni only in decoding IQ2_XXS's grid from
// registers instead of gathering it: 1.6x the one-row speed on AMD Zen 5,
// where vpgatherqq is slow, while on Intel (Sapphire/Emerald Rapids) the
// gathers measured faster than an in-register decode.
bool gathers_slow(const CpuFeatures& f) { return f.amd; }

const std::array<IsaLevel, 5> kLevels = {{
    {"scalar", &kDotScalar, always, always},
    {"avx2", &kDotAvx2, has_avx2, always},
    {"avx512", &kDotAvx512, has_avx512, always},
    {"avx512vnni", &kDotAvx512Vnni, has_avx512vnni, always},
    {"avx512vbmi", &kDotAvx512Vbmi, has_avx512vbmi, gathers_slow},
}};

const DotKernels& select_from_env() {
  const char* forced = std::getenv("DS4_ISA");
  if (forced && *forced) return dot_kernels_for(forced);
  const DotKernels* best = nullptr;
  for (const IsaLevel& level : kLevels) {
    if (level.kernels && level.cpu_can_run(cpu_features()) && level.chosen_by_default(cpu_features())) {
      best = level.kernels;
    }
  }
  return *best;  // scalar always qualifies
}

}  // namespace

const DotKernels& dot_kernels_scalar() { return kDotScalar; }

const DotKernels& dot_kernels_for(const char* isa) {
  for (const IsaLevel& level : kLevels) {
    if (std::strcmp(level.name, isa) != 0) continue;
    if (!level.kernels) throw Error(std::string("ISA level '") + isa + "' is not built into this binary");
    if (!level.cpu_can_run(cpu_features())) {
      throw Error(std::string("ISA level '") + isa + "' is not supported by this CPU");
    }
    return *level.kernels;
  }
  throw Error(std::string("unknown ISA level '") + isa + "' (expected scalar, avx2, avx512, avx512vnni or avx512vbmi)");
}

const DotKernels& dot_kernels() {
  static const DotKernels& chosen = select_from_env();
  return chosen;
}

bool dot_level_available(const char* isa) {
  for (const DotKernels* k : dot_kernels_available())
    if (std::strcmp(k->isa, isa) == 0) return true;
  return false;
}

std::vector<const DotKernels*> dot_kernels_available() {
  std::vector<const DotKernels*> out;
  for (const IsaLevel& level : kLevels) {
    if (level.kernels && level.cpu_can_run(cpu_features())) out.push_back(level.kernels);
  }
  return out;
}

}  // namespace ds4::quant
