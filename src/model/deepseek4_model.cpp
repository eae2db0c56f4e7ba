#include "model/deepseek4_model.h"

#include "core/error.h"

namespace ds4::model {

Deepseek4Model Deepseek4Model::open(const std::string& path) {
  gguf::File file = [&] {
    try {
      return gguf::File::open(path);
    } catch (const Error& e) {
      // The reader names the tensor whose bytes are missing; say what that
      // usually means for a multi-GB weight file.
      const std::string what = e.what();
      if (what.find("past the end of the file") != std::string::npos)
        throw Error(what + " - the file is truncated (incomplete download or copy?)");
      throw;
    }
  }();
  return bind(std::move(file));
}

Deepseek4Model Deepseek4Model::bind(gguf::File file) {
  Deepseek4Config config = read_config(file);
  Deepseek4Weights weights = bind_weights(file, config);
  return Deepseek4Model(std::move(file), std::move(config), std::move(weights));
}

}  // namespace ds4::model
