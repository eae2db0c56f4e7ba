// An identity for a GGUF's content, so that state made with one model file is
// not used with another (docs/session-files.md), and so that the stages of a
// pipeline agree they run one model. SHA-256 over the bytes before the tensor
// data (header, metadata, tensor directory: every shape, type and offset)
// plus, for every tensor in directory order, its first and last
// kFingerprintSampleBytes bytes of data (all of it when the tensor is no
// longer than twice that). Two files of the same shape made with different
// seeds or quant mixes differ; a 100 GB file is not read in full.
//
// A shard set (gguf.h) hashes the directory of the single file it merges into
// (gguf_split.h) in place of its files' own, so a split model and its merged
// file (of a canonical source, the source itself) are one model. A set opened
// with shards absent (File::open_partial: a pipeline stage's host keeps only
// its own) cannot be hashed; `ds4-gguf split --split-layers` records the
// whole set's identity in the first shard (kSplitFingerprintKey, 64 hex
// digits), and that is its identity then.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ds4::gguf {

class File;

inline constexpr uint64_t kFingerprintSampleBytes = 4096;
inline constexpr std::string_view kSplitFingerprintKey = "ds4.split.fingerprint";

using Fingerprint = std::array<uint8_t, 32>;

// The identity of `f`: hashed when every file is present; the recorded one
// of a partial set, which without it throws ds4::Error naming the absent
// shards.
Fingerprint content_fingerprint(const File& f);

// The identity a complete shard set made from `f` has (its merged
// directory's hash): what a split of f records.
Fingerprint merged_fingerprint(const File& f);

std::string fingerprint_hex(const Fingerprint& fp);

}  // namespace ds4::gguf
