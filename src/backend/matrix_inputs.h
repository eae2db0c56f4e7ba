// What an importance matrix is made of: the activation rows each weight
// matrix meets during an evaluation (ds4-imatrix listens through this). A
// backend with a listener set reports, for every chunk it evaluates, the
// inputs of every product with a model weight, as llama.cpp's graph forms
// them: the q_a / kv / compressor / indexer / router / shared-expert inputs,
// q_b's and the indexer's q-LoRA rows, each output group's heads for
// attn_output_a, the low-rank rows for attn_output_b, the unweighted
// RMS-normed streams for the HC mixes, the normed rows for the vocab head,
// and per routed expert the rows routed to it (gate/up: the normed input;
// down: the SwiGLU output). Products the backend skips because their result
// is not needed (the indexer before it scores) are reported all the same.
#pragma once

#include <cstdint>
#include <span>

namespace ds4::model {
struct TensorView;
}

namespace ds4::backend {

// Which matrix of a weight tensor the rows met.
struct MatrixSlice {
  enum class Kind {
    Whole,   // a 2-D weight
    Group,   // one group of a grouped product (attn_output_a: index of count)
    Expert,  // one routed expert of a 3-D tensor (index of count)
  };
  Kind kind = Kind::Whole;
  int index = 0;
  int count = 1;
};

class MatrixInputs {
 public:
  virtual ~MatrixInputs() = default;
  // `rows` (each as wide as the matrix's input) met `slice` of `w` in an
  // evaluation chunk of `chunk_tokens` tokens. Called from several threads
  // at once (routed experts run in parallel); the pointers are valid only
  // during the call.
  virtual void met(const model::TensorView& w, MatrixSlice slice, std::span<const float* const> rows,
                   int64_t chunk_tokens) = 0;
};

}  // namespace ds4::backend
