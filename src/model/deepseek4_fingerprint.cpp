#include "model/deepseek4_fingerprint.h"

#include <algorithm>
#include <span>

#include "core/gguf_split.h"
#include "core/sha256.h"
#include "model/deepseek4_model.h"

namespace ds4::model {

std::array<uint8_t, 32> fingerprint(const Deepseek4Model& model) {
  const gguf::File& f = model.file();
  const std::span<const uint8_t> bytes = f.bytes();
  Sha256 h;
  if (f.is_split()) {
    // A shard set is hashed as the file it merges into, so that a session
    // saved with one layout loads with the other.
    h.update(gguf::merged_writer(f).directory());
  } else {
    // A file without tensors may end before its aligned data offset.
    h.update(bytes.first(static_cast<size_t>(std::min<uint64_t>(f.data_offset(), bytes.size()))));
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::span<const uint8_t> data = t.bytes();
    if (data.size() <= 2 * kFingerprintSampleBytes) {
      h.update(data);
    } else {
      h.update(data.first(kFingerprintSampleBytes));
      h.update(data.last(kFingerprintSampleBytes));
    }
  }
  return h.finish();
}

}  // namespace ds4::model
