#include "model/deepseek4_model.h"

#include "core/error.h"
#include "core/file_map.h"

namespace ds4::model {

Deepseek4Model Deepseek4Model::open(const std::string& path, const LoadOptions& load) {
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
  Deepseek4Model model = bind(std::move(file));
  const std::span<const uint8_t> bytes = model.file_.bytes();
  // The kernels stream the weights: 2 MiB pages wherever the kernel can.
  advise_pages(bytes, MapAccess::HugePages);
  if (load.huge_pages) {
    advise_pages(bytes, MapAccess::WillNeed);
    prefault_pages(bytes);
    if (ds4::huge_page_bytes(bytes) < bytes.size() / 10 * 9) {
      // Read again what the page cache held in small pages.
      drop_cached_pages(bytes, path);
      advise_pages(bytes, MapAccess::WillNeed);
      prefault_pages(bytes);
    }
  }
  if (load.mlock) {
    // mlock reads every page in itself, so it also warms.
    lock_pages(bytes, path);
    model.locked_bytes_ = (bytes.size() + page_bytes() - 1) / page_bytes() * page_bytes();
  } else if (load.warm) {
    advise_pages(bytes, MapAccess::WillNeed);  // the whole file's reads are queued at once
    prefault_pages(bytes);
  }
  return model;
}

uint64_t Deepseek4Model::huge_page_bytes() const { return ds4::huge_page_bytes(file_.bytes()); }

Deepseek4Model Deepseek4Model::bind(gguf::File file) {
  Deepseek4Config config = read_config(file);
  Deepseek4Weights weights = bind_weights(file, config);
  return Deepseek4Model(std::move(file), std::move(config), std::move(weights));
}

}  // namespace ds4::model
