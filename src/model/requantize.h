// Requantizing a deepseek4 model (ds4-quantize): every tensor of a source
// (a GGUF in any type the engine reads: BF16, F16, F32, Q8_0, MXFP4, the K and
// IQ quants, one file or a shard set; or the official safetensors checkpoint,
// model/hf_checkpoint.h) written in the type a quant mix, a per-tensor
// override or another file's layout gives it.
//
// A tensor whose type does not change is copied byte for byte (MXFP4 experts
// into the mxfp4 mix stay exactly the source's; a checkpoint's FP4 experts are
// repacked into MXFP4 without loss). Any other is dequantized to
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
#include <optional>
#include <span>
#include <regex>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_metadata.h"
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
// of a routed expert tensor, 1 otherwise), matrix-major, or per equal block
// of each matrix's rows (a grouped product's imatrix: each group's rows get
// their block). Empty: none.
using ImportanceLookup = std::function<std::vector<float>(const std::string& tensor_name, uint64_t n_matrices,
                                                         uint64_t n_columns)>;

// One tensor to write, from a GGUF being requantized or a checkpoint being
// converted (model/hf_checkpoint.h).
struct SourceTensor {
  std::string name;           // the GGUF name
  std::vector<uint64_t> ne;   // GGUF order
  // The type it becomes without loss (copied when the plan asks for it): a
  // GGUF tensor's own type; a checkpoint's BF16 / F32 tensors, FP4 experts
  // (MXFP4) and hash table (I32). None for FP8 matrices.
  std::optional<GgmlType> native;
  std::string origin;  // what it is stored as, for --dry-run: "bf16", "F8_E4M3 x F8_E8M0 (128x128)"
  // Rows [row0, row0 + n) of the tensor (ne[0] values each; rows of a 3-D
  // tensor run matrix by matrix) as f32. Null for integer tables.
  std::function<void(uint64_t row0, uint64_t n, float* dst)> rows_f32;
  // The tensor in `native`, exactly its bytes.
  std::function<void(std::span<uint8_t> dst)> native_bytes;
  // The native bytes when they lie in a mapping as they are (written
  // without a copy).
  std::span<const uint8_t> view;
  // The mapped bytes it is read from (released from the process after use).
  std::vector<std::span<const uint8_t>> reads;

  uint64_t n_elements() const;
  uint64_t n_rows() const { return n_elements() / ne[0]; }
  uint64_t n_matrices() const { return (ne.size() > 2 ? ne[2] : 1) * (ne.size() > 3 ? ne[3] : 1); }
};

// What is being written: the model's hyperparameters, every tensor in
// output order, and the metadata the output starts with.
struct RequantizeInput {
  std::string path;  // for messages
  Deepseek4HParams hp;
  // What every output tensor is (deepseek4_tensors(hp), or an MTP layout's).
  std::vector<TensorSpec> specs;
  std::vector<SourceTensor> tensors;
  std::function<void(gguf::Writer&)> write_metadata;
  uint32_t alignment = gguf::kDefaultAlignment;
};

// A deepseek4 GGUF (one file or a shard set), checked as the loader checks
// it; its metadata less split.* and general.file_type (which would describe
// the source). `file` must outlive the input.
RequantizeInput gguf_input(const gguf::File& file);

// The output's metadata rewritten in `flavour` (model/deepseek4_metadata.h):
// the hyperparameter and general keys as that flavour writes them, then the
// source's other keys (tokenizer, provenance) as they are.
void set_metadata_flavour(RequantizeInput& input, const gguf::File& file, MetadataFlavour flavour);

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
  const SourceTensor* source;
  TensorSpec spec;
  GgmlType type;    // in the output
  bool copy;        // its native type: its bytes as they are
  std::string why;  // "mix ds4-q2", "--tensor-type ffn_down=q4_K", "layout of FILE"
};

// The plan for every tensor of `input`, in its order. Throws ds4::Error
// naming the tensor when a type cannot hold its rows (row length not a whole
// number of blocks), cannot be quantized to, or `types_from` lacks the
// tensor or gives it another shape.
std::vector<TensorPlan> plan_requantize(const RequantizeInput& input, const RequantizeOptions& options);

// A writer for the output: the input's metadata, options.extra_metadata and
// every tensor, filled by quantizing on `pool` when the writer reaches it.
// `input`, `plan`, `options` and `pool` must outlive the writer's write().
gguf::Writer requantize_writer(const RequantizeInput& input, const std::vector<TensorPlan>& plan,
                               const RequantizeOptions& options, ThreadPool& pool);

// One tensor of the plan quantized into dst (exactly its output bytes).
void requantize_tensor(const TensorPlan& t, const RequantizeOptions& options, ThreadPool& pool,
                       std::span<uint8_t> dst);

}  // namespace ds4::model
