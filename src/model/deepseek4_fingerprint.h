// An identity for a deepseek4 model file, so that saved state made with one
// model is not loaded into another (docs/session-files.md). SHA-256 over the
// GGUF's bytes before the tensor data (header, metadata, tensor directory:
// every shape, type and offset) plus, for every tensor in directory order,
// its first and last kFingerprintSampleBytes bytes of data (all of it when
// the tensor is no longer than twice that). Two files of the same shape made
// with different seeds or quant mixes differ; a 100 GB file is not read in
// full. A shard set (gguf.h) hashes the directory of the single file it
// merges into (gguf_split.h) in place of its files' own, so a split model and
// its merged file (of a canonical source, the source itself) are one model.
// Not cached: each call hashes again (a few MB at most for Flash).
#pragma once

#include <array>
#include <cstdint>

namespace ds4::model {

class Deepseek4Model;

inline constexpr uint64_t kFingerprintSampleBytes = 4096;

std::array<uint8_t, 32> fingerprint(const Deepseek4Model& model);

}  // namespace ds4::model
