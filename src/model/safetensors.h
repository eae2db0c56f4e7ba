// Reading Hugging Face safetensors checkpoints: one `*.safetensors` file or
// a set of shards listed by `model.safetensors.index.json` ("weight_map":
// tensor name -> shard file, relative to the index).
//
// A file is a u64 little-endian header length N, N bytes of JSON
// {"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//  ..., "__metadata__": {..}} and the data, offsets relative to its start.
// Each shard is mapped read-only and its header validated once: known dtype,
// shape product times the dtype size equal to end - begin, offsets inside
// the file, no two tensors overlapping. Anything else throws one ds4::Error
// naming the shard (and the tensor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/file_map.h"

namespace ds4::model {

enum class StDtype { F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I16, I32, I64, F64, BOOL };

std::string_view st_dtype_name(StDtype t);  // as the header spells it: "F8_E4M3"
size_t st_dtype_size(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype;
  std::vector<uint64_t> shape;  // row-major, outermost first (PyTorch order)
  std::span<const uint8_t> data;
  const std::string* shard;  // the file holding it (messages)

  uint64_t elements() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  FileMap map_;
  std::map<std::string, StTensor> tensors_;
};

// Every tensor of a checkpoint, whatever shard holds it.
class SafetensorsSet {
 public:
  // `path`: a model.safetensors.index.json, a .safetensors file, or a
  // folder holding one of them. With an index, every shard it names is
  // opened and every tensor it lists must be in its shard; a tensor in two
  // shards is refused.
  static SafetensorsSet open(const std::string& path);

  const StTensor* find(std::string_view name) const;
  // Throws "<where>: tensor 'NAME' missing" naming the index or file.
  const StTensor& get(std::string_view name) const;
  const std::map<std::string, const StTensor*, std::less<>>& tensors() const { return index_; }
  const std::string& folder() const { return folder_; }

 private:
  std::string where_;   // the index or the single file
  std::string folder_;  // where config.json and tokenizer.json are looked for
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const StTensor*, std::less<>> index_;
};

}  // namespace ds4::model
