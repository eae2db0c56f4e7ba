// What the compressor batch tests share (tests/unit/test_compressor_plan.cpp
// on the host, tests/cuda/test_cuda_layers.cpp on a GPU): the cases they walk
// on the tiny synthetic model (both roles of the ratio-4 layer 1 and the
// ratio-128 layer 2, each in both numerics), and random projections to feed
// them, so both check the same ground against cpu::Compressor.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/compressor.h"
#include "backend/numerics.h"

namespace ds4::test {

struct CompressorCase {
  int layer;
  cpu::CompressorRole role;
  backend::Numerics numerics;

  std::string name() const {
    return "layer " + std::to_string(layer) + (role == cpu::CompressorRole::Indexer ? " indexer" : "") +
           (numerics == backend::Numerics::Quality ? " quality" : " default");
  }
};

inline std::vector<CompressorCase> tiny_compressor_cases() {
  std::vector<CompressorCase> cases;
  for (auto [layer, role] : {std::pair{1, cpu::CompressorRole::Attention}, std::pair{1, cpu::CompressorRole::Indexer},
                             std::pair{2, cpu::CompressorRole::Attention}})
    for (backend::Numerics numerics : {backend::Numerics::Default, backend::Numerics::Quality})
      cases.push_back({layer, role, numerics});
  return cases;
}

// kv ~ N(0, 1) and gate scores ~ N(0, 2) for `tokens` tokens of `width`.
struct CompressorProjections {
  std::vector<float> kv, score;
};

inline CompressorProjections random_compressor_projections(int tokens, int width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  CompressorProjections p;
  p.kv.resize(static_cast<size_t>(tokens) * static_cast<size_t>(width));
  p.score.resize(p.kv.size());
  for (float& v : p.kv) v = g(rng);
  for (float& v : p.score) v = 2.0f * g(rng);
  return p;
}

}  // namespace ds4::test
