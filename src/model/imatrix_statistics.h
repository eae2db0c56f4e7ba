// What llama-imatrix --show-statistics prints about an importance matrix,
// computed as it computes it (tools/imatrix/imatrix.cpp of the pinned
// llama.cpp): per weight tensor, over its per-column mean squared
// activations (sums / count of each matrix; matrices no row met left out):
// their sum Σ(Act²), min, max, mean μ and deviation σ, the share above 1e-5
// ("% Active"), the count N, the entropy of the values as a distribution
// (and as a share of log2 N), ZD (the share with a z-score above 1), and
// CosSim: the cosine between the tensor's raw sums and those of the same
// tensor one block earlier (0 where there is none). Then, per block, those
// figures weighted by N. Float arithmetic in llama.cpp's order, so the
// printed figures agree with its tool's.
#pragma once

#include <string>
#include <vector>

#include "model/imatrix.h"

namespace ds4::model {

struct ImatrixTensorStats {
  std::string name;    // the entry, e.g. blk.3.ffn_down_exps.weight
  std::string layer;   // "3", or "-" outside the blocks
  std::string tensor;  // the part before ".weight": ffn_down_exps
  float sum_sqract = 0, min_sqract = 0, max_sqract = 0, mean_sqract = 0, stddev = 0;
  float active = 0;  // 0..1
  int elements = 0;
  float entropy = 0;
  float zd = 0;  // 0..1
  float cossim = 0;
};

struct ImatrixLayerStats {
  int layer = 0;
  float mean_sum_sqract = 0, zd = 0, cossim = 0;  // weighted by each tensor's N
};

struct ImatrixStatistics {
  std::vector<ImatrixTensorStats> tensors;  // by tensor name, then Σ(Act²) descending
  std::vector<ImatrixLayerStats> layers;    // by block
  std::vector<std::string> skipped;         // why an entry has no statistics
};

// Statistics of every entry of `m` (sums and counts as loaded and combined by
// Imatrix::add, which is how llama-imatrix loads the file it shows).
ImatrixStatistics imatrix_statistics(const Imatrix& m);

// llama-imatrix's two tables (tab-separated, its column formats), headed by
// the file's name.
std::string format_imatrix_statistics(const ImatrixStatistics& s, const std::string& path);

}  // namespace ds4::model
