// The validated configuration of a deepseek4 GGUF: every hyperparameter of the
// main layer stack plus what the file says about things the forward pass does
// not run (an MTP block, the tokenizer's pre-tokenizer name). Resolves the two
// file layouts in circulation (docs/model-files.md):
//   - ds4 / published DS4 GGUFs: block_count counts the main stack; the MTP
//     block lives in a separate file, though metadata may still declare it
//     (nextn_predict_layers) and per-layer arrays carry its entry.
//   - llama.cpp-converted GGUFs: block_count counts main + nextn layers and
//     the MTP block may sit in the same file as blk.<n_main>.* tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek4_hparams.h"

namespace ds4::gguf {
class File;
}

namespace ds4::model {

struct Deepseek4Config {
  Deepseek4HParams hp;  // the main stack only; validated

  uint32_t block_count = 0;           // deepseek4.block_count as stored
  uint32_t nextn_declared = 0;        // deepseek4.nextn_predict_layers (0 when absent)
  uint32_t mtp_layers_in_file = 0;    // MTP blocks carried as blk.<n_layer + i>.* (llama.cpp layout)
  uint32_t compress_ratio_entries = 0;  // length of attention.compress_ratios as stored
  std::string tokenizer_pre;          // tokenizer.ggml.pre, "" when absent (informational)

  // One line per layout difference that was resolved, for logs and tools.
  std::vector<std::string> notes;
};

// Reads and validates the configuration. Throws ds4::Error naming the file
// and the key: general.architecture missing or not "deepseek4"; a required
// key missing or of a type that cannot hold its value; a value breaking a
// family rule (Deepseek4HParams::validate); nextn_predict_layers larger than
// block_count; a llama.cpp MTP-only file (no main layers).
Deepseek4Config read_config(const gguf::File& f);

}  // namespace ds4::model
