// Requantizing a deepseek4 GGUF (ds4-quantize): every tensor of a source
// file (any type the engine reads: BF16, F16, F32, Q8_0, MXFP4, the K and IQ
// quants; one file or a shard set) written again in the type a quant mix, a
// per-tensor override or another file's layout gives it.
//
// A tensor whose type does not change is copied byte for byte (MXFP4 experts
// into the mxfp4 mix stay exactly the source's). Any other is dequantized to
// f32 (ggml's to_float, bit for bit) and quantized with the reference
// quantizers (ggml_quantize_chunk's bytes), row by row, so the output does not
// depend on the thread count. Importance: an imatrix entry when one is given
// (per routed expert for the expert tensors); else none, except for the types
// ggml will not quantize without one (IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M), which
// take ds4's weight-energy importance (per column, the sum over the matrix's
// rows of w^2; per expert for the routed experts).
//
// The output streams: tensors are quantized one at a time as the writer
// reaches them, each split over the thread pool by rows (one buffer of the
// output tensor plus a few rows of f32 per thread are in memory), written to
// OUT.part and renamed; an interrupted run resumes after the last whole tensor
// (gguf::Writer::WriteOptions::resume).
#pragma once

#include <cstdint>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/thread_pool.h"
#include "model/deepseek4_tensors.h"
#include "model/quant_mix.h"

namespace ds4::model {

// --tensor-type REGEX=TYPE (llama-quantize's): the first override whose
// pattern matches part of a tensor's name (std::regex_search) sets its type.
struct TypeOverride {
  std::string pattern;  // as given, for messages
  std::regex regex;
  GgmlType type;
};
// Parses "REGEX=TYPE" (TYPE a ggml type name, any case: q4_K, IQ2_XXS, bf16);
// throws ds4::Error naming the argument.
TypeOverride parse_type_override(const std::string& arg);

// Importance for one tensor: a value per column (ne[0]) per matrix (ne[2]
// of a routed expert tensor, 1 otherwise), matrix-major. Empty: none.
using ImportanceLookup = std::function<std::vector<float>(const std::string& tensor_name, uint64_t n_matrices,
                                                         uint64_t n_columns)>;

struct RequantizeOptions {
  QuantMix mix = QuantMix::Ds4Q2;
  std::vector<TypeOverride> overrides;
  // Each tensor in the type it has in this file (a layout to copy, e.g. a
  // file llama-quantize made); overrides still come first.
  const gguf::File* types_from = nullptr;
  ImportanceLookup importance;  // may be empty
  // Keys added after the source's (e.g. llama-quantize's quantize.imatrix.* provenance).
  std::vector<std::pair<std::string, gguf::MetaValue>> extra_metadata;
};

// What happens to one tensor.
struct TensorPlan {
  const gguf::TensorInfo* source;
  TensorSpec spec;
  GgmlType type;  // in the output
  bool copy;      // same type as the source: its bytes as they are
  std::string why;  // "mix ds4-q2", "--tensor-type ffn_down=q4_K", "layout of FILE"
};

// The plan for every tensor of `source` (a deepseek4 file, checked as the
// loader checks it), in the source's order. Throws ds4::Error naming the
// tensor when a type cannot hold its rows (row length not a whole number of
// blocks), cannot be quantized to, or `types_from` lacks the tensor or gives
// it another shape.
std::vector<TensorPlan> plan_requantize(const gguf::File& source, const RequantizeOptions& options);

// A writer for the output: the source's metadata (less split.* and
// general.file_type, which would misdescribe the result) and every tensor,
// filled by quantizing on `pool` when the writer reaches it. `source`, `plan`,
// `options` and `pool` must outlive the writer's write().
gguf::Writer requantize_writer(const gguf::File& source, const std::vector<TensorPlan>& plan,
                               const RequantizeOptions& options, ThreadPool& pool);

// One tensor of the plan quantized into dst (exactly its output bytes).
void requantize_tensor(const TensorPlan& t, const RequantizeOptions& options, ThreadPool& pool,
                       std::span<uint8_t> dst);

}  // namespace ds4::model
