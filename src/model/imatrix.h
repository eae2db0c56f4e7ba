// Importance matrices in llama.cpp's formats (what llama-imatrix writes and
// llama-quantize reads), so that its files drive our quantizer and ours drive
// its.
//
// GGUF form (current): general.type = "imatrix", imatrix.datasets (array of
// strings), imatrix.chunk_count and imatrix.chunk_size (u32); per weight
// tensor NAME two F32 tensors, NAME.in_sum2 [n_per_row, n_mat] (per column
// of each matrix, the sum of squared activations that met it) and
// NAME.counts [1, n_mat] (the activation rows each matrix met; n_mat is the
// expert count of a routed expert tensor, else 1). Other tensors (.in_sum,
// statistics) are ignored, as llama-quantize does.
// Legacy .dat: i32 entry count; per entry i32 name length, the name, i32
// ncall, i32 nval, nval f32 sums; then optionally i32 chunk count, i32
// dataset-name length and the name.
//
// The importance a quantizer gets (llama-quantize's load_imatrix): per
// matrix, sums / count, or 1 for every column where the count is 0; legacy,
// sums / ncall (the sums as they are when ncall is 0).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ds4::model {

struct ImatrixEntry {
  std::vector<float> sums;    // n_mat x n_per_row, matrix-major
  std::vector<float> counts;  // n_mat (legacy: one value, its ncall)
};

class Imatrix {
 public:
  // Reads either form (GGUF by its magic, else legacy); throws ds4::Error
  // naming the file and the entry at fault (truncated, sizes that disagree,
  // non-F32 data, a .in_sum2 without its .counts).
  static Imatrix load(const std::string& path);
  // Writes the GGUF form (as llama-imatrix does; entries in name order).
  void save(const std::string& path) const;
  // Writes the legacy .dat as llama-imatrix's --output-format dat does: per
  // entry (name order; entries no row met are left out) ncall = the most
  // rows any of its matrices met / chunk_size, rounded up, and each value
  // sum / count x ncall (1 x ncall where the count is 0); then chunk_count
  // and the last dataset. Needs chunk_size.
  void save_legacy(const std::string& path) const;
  // Adds `other` as llama-imatrix's --in-file does: a GGUF file's raw sums
  // and counts (one count broadcast over several matrices), a legacy file's
  // per-call means scaled back by chunk_size (sums and ncall x chunk_size);
  // datasets appended; chunk_size set and chunk_count = the most rows any
  // matrix met / chunk_size. ds4::Error naming the entry and both files when
  // the sizes differ.
  void add(const Imatrix& other, uint32_t chunk_size);

  // The quantizer's importance for `tensor`, blocks x n_columns values, one
  // block per matrix, or for a grouped product (attn_output_a, which llama.cpp
  // multiplies as n_groups matrices of the file's rows in turn, so
  // llama-imatrix writes n_groups x n_columns values) one per group; nullopt
  // without an entry. Throws when the entry's size is not a whole multiple of
  // the tensor's matrices (llama-quantize refuses any other size, the grouped
  // one included).
  std::optional<std::vector<float>> importance(const std::string& tensor, uint64_t n_matrices,
                                               uint64_t n_columns) const;

  std::map<std::string, ImatrixEntry> entries;
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0;
  uint32_t chunk_size = 0;
  bool legacy = false;  // loaded from a .dat
  std::string path;     // where it was loaded from (messages, provenance keys)
};

}  // namespace ds4::model
