// The identity of a deepseek4 model: its file's content fingerprint
// (core/gguf_fingerprint.h), so that saved state made with one model is not
// loaded into another and pipeline stages agree they run one model.
#pragma once

#include <array>
#include <cstdint>

namespace ds4::model {

class Deepseek4Model;

std::array<uint8_t, 32> fingerprint(const Deepseek4Model& model);

}  // namespace ds4::model
