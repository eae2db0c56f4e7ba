#include "model/deepseek4_fingerprint.h"

#include "core/gguf_fingerprint.h"
#include "model/deepseek4_model.h"

namespace ds4::model {

std::array<uint8_t, 32> fingerprint(const Deepseek4Model& model) { return gguf::content_fingerprint(model.file()); }

}  // namespace ds4::model
