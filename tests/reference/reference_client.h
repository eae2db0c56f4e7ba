// C++ access to the llama.cpp reference (ds4-ref-runner) for cross-implementation
// tests. Each call runs the runner as a subprocess and caches its result on disk,
// keyed by SHA-256 of everything that determines it, so repeated test runs are fast.
//
// Cache folder: $DS4_REFERENCE_CACHE, else the compiled-in default (.cache/reference
// in the source tree). Failures of the runner throw ds4::Error with its message.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/ggml_type.h"

namespace ds4::reference {

// True when the runner binary exists and is executable.
bool available();

// Path of the runner binary (compiled in).
std::string runner_path();

// All-position logits of `tokens` (used exactly as given), row-major
// [tokens.size()][n_vocab]: row i is the distribution after token i.
// `ubatch` = 0 decodes all tokens in one physical batch. ggml's threads spin at
// barriers, so on a busy machine threads = 1 is often much faster.
std::vector<float> logits(const std::string& model, const std::vector<int32_t>& tokens, int threads = 2,
                          int ubatch = 0);

// The n greedily generated ids after `tokens` (argmax, first index on ties).
std::vector<int32_t> greedy(const std::string& model, const std::vector<int32_t>& tokens, int n, int threads = 2);

// llama.cpp's tokenization of `text` (no BOS/EOS added, special tokens parsed).
std::vector<int32_t> tokenize(const std::string& model, const std::string& text);

// llama.cpp loads `model` (with `load_mtp`, its MTP block too, every tensor's
// shape checked) and reports one JSON object: n_layer, n_layer_nextn,
// n_vocab, n_embd, n_params. A file it refuses throws with its message.
std::string model_info(const std::string& model, bool load_mtp);

// ggml's own to_float over raw blocks holding n elements of `type`.
std::vector<float> dequantize(GgmlType type, std::span<const uint8_t> blocks, int64_t n);

// ggml_quantize_chunk of x, as rows of `row` elements. `imatrix` (row floats,
// per column, may be null) is ggml's importance matrix.
std::vector<uint8_t> quantize(GgmlType type, std::span<const float> x, int64_t row, const float* imatrix);

// llama.cpp's llama_model_quantize of `model` with one of llama-quantize's
// presets ("Q4_K_M", "IQ2_XXS", ...), written to `out`. With
// `imatrix_from_weights` the runner passes an importance matrix made from the
// weights (per column, the sum of squared weights), where the IQ1/IQ2 presets
// need one. Cached like the other modes (by the input file's bytes).
void quantize_model(const std::string& model, const std::string& preset, bool imatrix_from_weights,
                    const std::string& out);
// The same with the importance read from an imatrix file (GGUF or legacy
// .dat) as llama-quantize reads one (values = sums / counts per matrix).
void quantize_model_with_imatrix(const std::string& model, const std::string& preset, const std::string& imatrix,
                                 const std::string& out);

// llama-imatrix over `text` (the runner's imatrix mode: its chunking, BOS
// and collection rules on llama.cpp's activations): chunks of ctx tokens, at
// most `chunks`; the imatrix GGUF written to `out`. Cached like the others.
void imatrix(const std::string& model, const std::string& text, int64_t ctx, int64_t chunks, const std::string& out);

}  // namespace ds4::reference
