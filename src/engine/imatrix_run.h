// ds4-imatrix's job: a text through the forward pass in chunks, the way
// llama-imatrix feeds it, collecting every weight matrix's input statistics
// (engine/imatrix_collector.h) into an importance matrix for ds4-quantize or
// llama-quantize.
//
// The text is tokenized as llama.cpp tokenizes a text file (control-token
// literals stay text, user-defined ones such as <think> become their ids)
// with BOS in front when the model's tokenizer adds one; it is cut
// into chunks of chunk_tokens, each evaluated in a fresh context with its
// first token replaced by BOS (when added), in prefill batches of the
// engine's prefill chunk (llama-imatrix's ubatch). Every token's logits are
// computed, as llama-imatrix does: the vocab head's inputs (with
// process_output) and the perplexity of each chunk's second half come from
// them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "model/imatrix.h"

namespace ds4::engine {

class Engine;

struct ImatrixRunOptions {
  int64_t chunk_tokens = 512;  // tokens per chunk (llama-imatrix -c)
  int64_t max_chunks = -1;     // at most this many chunks (-1: every whole chunk)
  int64_t skip_chunks = 0;     // chunks skipped at the start (llama-imatrix --chunk)
  bool process_output = false;  // collect output.weight too
  bool per_group = false;       // attn_output_a per group (ImatrixCollector::result)
  std::string dataset;          // recorded in imatrix.datasets (the text file's name)
};

struct ImatrixProgress {
  int64_t chunk = 0;     // chunks done
  int64_t n_chunks = 0;  // chunks in all
  double seconds = 0;    // since the start
  double perplexity = 0;  // over the second halves of the chunks done
};

struct ImatrixRunResult {
  model::Imatrix imatrix;
  int64_t n_tokens = 0;  // of the whole text, BOS included
  int64_t n_chunks = 0;
  double perplexity = 0;
};

// ds4::Error when the text is shorter than one chunk (after the skipped
// ones), on a backend that cannot report matrix inputs, or when an
// activation is not finite. progress (after each chunk) returning false
// stops early with what was collected so far.
ImatrixRunResult run_imatrix(Engine& engine, std::string_view text, const ImatrixRunOptions& options,
                             const std::function<bool(const ImatrixProgress&)>& progress = {});

}  // namespace ds4::engine
