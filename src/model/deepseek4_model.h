// A deepseek4 model opened for inference: the mapped GGUF, its validated
// configuration and the weight binding, in one object that keeps the mapping
// alive for the views. Loads ds4 / published DS4 files and llama.cpp-converted
// ones (docs/model-files.md).
#pragma once

#include <string>

#include "core/gguf.h"
#include "model/deepseek4_config.h"
#include "model/deepseek4_weights.h"

namespace ds4::model {

class Deepseek4Model {
 public:
  // Maps, validates and binds `path`. Throws ds4::Error naming the file and
  // the key or tensor at fault; a file cut short says so.
  static Deepseek4Model open(const std::string& path);
  // The same for an already opened file (tests, tools that hold the File).
  static Deepseek4Model bind(gguf::File file);

  const gguf::File& file() const { return file_; }
  const Deepseek4Config& config() const { return config_; }
  const Deepseek4HParams& hparams() const { return config_.hp; }
  const Deepseek4Weights& weights() const { return weights_; }

 private:
  Deepseek4Model(gguf::File file, Deepseek4Config config, Deepseek4Weights weights)
      : file_(std::move(file)), config_(std::move(config)), weights_(std::move(weights)) {}

  gguf::File file_;  // owns the mapping every view points into (moves keep it in place)
  Deepseek4Config config_;
  Deepseek4Weights weights_;
};

}  // namespace ds4::model
