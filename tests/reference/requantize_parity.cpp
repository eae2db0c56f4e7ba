#include "requantize_parity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/gguf.h"
#include "core/thread_pool.h"
#include "model/imatrix.h"
#include "model/requantize.h"

namespace ds4::reference {

int expect_requantized_like(const gguf::File& source, const gguf::File& theirs, const model::Imatrix* imatrix,
                            ThreadPool& pool, const std::string& label) {
  model::RequantizeOptions o;
  o.types_from = &theirs;
  if (imatrix != nullptr) {
    o.importance = [imatrix](const std::string& name, uint64_t n_matrices, uint64_t cols) {
      return imatrix->importance(name, n_matrices, cols).value_or(std::vector<float>{});
    };
  }
  const model::RequantizeInput in = model::gguf_input(source);  // the plan points into it
  int compared = 0;
  for (const model::TensorPlan& t : model::plan_requantize(in, o)) {
    if (t.copy) continue;
    const gguf::TensorInfo& want = theirs.tensor(t.source->name);
    std::vector<uint8_t> got(want.nbytes);
    model::requantize_tensor(t, o, pool, got);
    EXPECT_TRUE(std::ranges::equal(got, want.bytes()))
        << label << ": " << t.source->name << " as " << ggml_type_name(t.type) << " differs";
    ++compared;
  }
  return compared;
}

}  // namespace ds4::reference
