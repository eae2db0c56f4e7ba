// A deepseek4 model opened for inference: the mapped GGUF, its validated
// configuration and the weight binding, in one object that keeps the mapping
// alive for the views. Loads ds4 / published DS4 files and llama.cpp-converted
// ones (docs/model-files.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "model/deepseek4_config.h"
#include "model/deepseek4_weights.h"

namespace ds4::model {

// How open() readies the mapped weights. By default pages are read from the
// file (or found in the page cache) on first use.
struct LoadOptions {
  // mlock every page of the file, so the kernel never evicts the weights
  // (ds4 --mlock). open() throws when it cannot, naming the limit to raise.
  bool mlock = false;
  // Read the whole file in and map every page now, so that the first request
  // takes no page faults (ds4 --warm-weights). Prints nothing.
  bool warm = false;
  // Have the weights in 2 MiB pages (--huge-pages; implies warm): the
  // mapping always asks for them, but pages the page cache already holds in
  // 4 KiB pages (the file read or written before without that advice) stay
  // small. When fewer than 90 % of the file's bytes are mapped huge after
  // warming, those pages are dropped from the page cache (unless another
  // process maps them) and read from the file again, which costs one read of
  // the file. Prefill runs ~1.5x faster on the weights in 2 MiB pages
  // (docs/benchmarks.md).
  bool huge_pages = false;
  // The routed experts are read from the file by the SSD streaming cache
  // (--ssd-streaming): warming, locking and huge pages cover every other
  // tensor only, and the experts' pages of the mapping are never touched.
  bool stream_routed_experts = false;
  // A shard set may lack shards (a pipeline stage's host keeps the first and
  // its own: gguf::File::open_partial); what is absent stays unbound
  // (Deepseek4Weights::absent_tensors, require_present).
  bool partial_shards = false;
};

class Deepseek4Model {
 public:
  // Maps, validates and binds `path`, then readies the pages as `load` asks.
  // Throws ds4::Error naming the file and the key or tensor at fault; a file
  // cut short says so.
  static Deepseek4Model open(const std::string& path, const LoadOptions& load = {});
  // The same for an already opened file (tests, tools that hold the File).
  static Deepseek4Model bind(gguf::File file);

  const gguf::File& file() const { return file_; }
  const Deepseek4Config& config() const { return config_; }
  const Deepseek4HParams& hparams() const { return config_.hp; }
  const Deepseek4Weights& weights() const { return weights_; }
  // Bytes of the file locked in RAM by LoadOptions::mlock (whole pages); 0 without it.
  uint64_t locked_bytes() const { return locked_bytes_; }
  // Bytes of the files' mappings in 2 MiB pages now (huge_page_bytes of file_map.h).
  uint64_t huge_page_bytes() const;
  // Bytes of one of the model's files (one unless it is a shard set) and that file's path.
  struct FileRange {
    std::span<const uint8_t> bytes;
    const std::string* path;  // owned by file()
  };
  // Every file, whole.
  std::vector<FileRange> file_ranges() const;
  // The files' bytes without the routed experts' tensors, as page-aligned
  // ranges (what --ssd-streaming keeps resident), and their total.
  std::vector<FileRange> non_routed_ranges() const;
  uint64_t routed_expert_bytes() const;

 private:
  Deepseek4Model(gguf::File file, Deepseek4Config config, Deepseek4Weights weights)
      : file_(std::move(file)), config_(std::move(config)), weights_(std::move(weights)) {}

  gguf::File file_;  // owns the mapping every view points into (moves keep it in place)
  Deepseek4Config config_;
  Deepseek4Weights weights_;
  uint64_t locked_bytes_ = 0;
};

}  // namespace ds4::model
