// The check test_reference_requantize and test_reference_imatrix share:
// every tensor ds4-quantize quantizes from `source` with the per-tensor
// types of `theirs` (a file llama_model_quantize wrote) and, when given, an
// imatrix's importance, must be byte-identical to theirs. GoogleTest
// failures name `label`, the tensor and its type.
#pragma once

#include <string>

namespace ds4 {
class ThreadPool;
}
namespace ds4::gguf {
class File;
}
namespace ds4::model {
class Imatrix;
}

namespace ds4::reference {

// Returns how many tensors were quantized and compared (copied ones are not).
int expect_requantized_like(const gguf::File& source, const gguf::File& theirs, const model::Imatrix* imatrix,
                            ThreadPool& pool, const std::string& label);

}  // namespace ds4::reference
