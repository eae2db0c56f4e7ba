// Splitting a GGUF model into a shard set and merging one back, in the
// layout of llama.cpp's gguf-split (which both engines load, see gguf.h):
// shard k is PREFIX-0000{k+1}-of-0000N.gguf; the first holds every metadata
// key of the source, then split.no (u16), split.tensors.count (i32) and
// split.count (u16), the order gguf-split leaves them in; the others hold only
// those three keys. Tensors keep the source's order and each shard is a
// canonical GGUF (tensors packed in order, padded to the alignment), so a
// canonical source splits into the bytes gguf-split writes, and merging gives
// back the source byte for byte. (gguf-split's own merge keeps the split.*
// keys, with split.count 0; ours drops them.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "core/gguf_writer.h"

namespace ds4::gguf {

// Where shards end. One of the three; they are not combined.
struct SplitOptions {
  enum class By { Tensors, Size, Layers };
  By by = By::Tensors;
  uint32_t max_tensors = 128;  // By::Tensors: as gguf-split --split-max-tensors
  uint64_t max_bytes = 0;      // By::Size: tensor bytes (each padded to 32) per shard, as --split-max-size
  // By::Layers: a shard starts at the first tensor of each of these layers
  // (blk.N.*), ascending and >= 1: {22} puts blk.0-21 and what comes before
  // them in the first shard, blk.22 on and what follows in the second (one
  // shard per pipeline stage).
  std::vector<uint32_t> layer_starts;
  bool no_tensor_first_split = false;  // the first shard holds only metadata (--no-tensor-first-split)
};

// Tensor indices (into source.tensors()) per shard, in order. Throws
// ds4::Error when a shard would be empty (Layers: a start past the last layer,
// or two starts with no tensor between) or the tensors are not in layer order.
std::vector<std::vector<size_t>> plan_split(const File& source, const SplitOptions& options);

// The writer of shard `index` of `plan`; its tensors view the source's
// mapping, so `source` must outlive it. With `record_fingerprint` the first
// shard also carries the whole set's identity (gguf_fingerprint.h), so that a
// host holding only some shards (a pipeline stage's) knows which model it runs.
Writer shard_writer(const File& source, const std::vector<std::vector<size_t>>& plan, size_t index,
                    bool record_fingerprint = false);

// The writer of the single file a shard set (or any File) merges into: the
// first file's metadata less the split.* keys (and the recorded
// fingerprint), every tensor in order,
// viewing the source's mappings.
Writer merged_writer(const File& source);

// Writes every shard of `plan` as shard_path(prefix, k, n); refuses (before
// writing anything) when one of those files exists. Returns their paths.
std::vector<std::string> write_split(const File& source, const std::vector<std::vector<size_t>>& plan,
                                     const std::string& prefix, bool record_fingerprint = false);

// Writes merged_writer(source) to `path`; refuses when `path` exists.
void write_merged(const File& source, const std::string& path);

// The layer of a tensor named blk.N.*; -1 for any other name.
int64_t tensor_layer(std::string_view name);

}  // namespace ds4::gguf
