#include "model/imatrix_statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

namespace ds4::model {
namespace {

// llama-imatrix's process_tensor_name: the dot-separated part after "blk"
// (else "-"), and the part before "weight" (else the whole name).
void split_name(const std::string& name, std::string& layer, std::string& tensor) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  layer.clear();
  tensor.clear();
  for (size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i] == "blk") {
      layer = parts[i + 1];
      break;
    }
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i] == "weight") {
      tensor = parts[i - 1];
      break;
    }
  if (tensor.empty()) tensor = name;
  if (layer.empty()) layer = "-";
}

// The entry's statistics, or a reason it has none (llama-imatrix's messages).
bool tensor_stats(const std::string& name, const ImatrixEntry& e, ImatrixTensorStats& ts, std::string& why) {
  if (e.counts.empty()) {
    why = "there are no activations for tensor " + name;
    return false;
  }
  if (e.sums.size() % e.counts.size() != 0) {
    why = "activation size mismatch for tensor " + name + " (" + std::to_string(e.counts.size()) + " vs " +
          std::to_string(e.sums.size()) + ")";
    return false;
  }
  const size_t n_mat = e.counts.size(), row = e.sums.size() / n_mat;
  std::vector<float> act;
  act.reserve(e.sums.size());
  for (size_t i = 0; i < n_mat; ++i) {
    if (e.counts[i] == 0) continue;
    for (size_t j = 0; j < row; ++j) act.push_back(e.sums[i * row + j] / e.counts[i]);
  }
  if (act.empty()) {
    why = "all counts are zero for tensor " + name;
    return false;
  }
  const auto n = static_cast<float>(act.size());
  const float total = std::accumulate(act.begin(), act.end(), 0.0f);
  const float mean = total / n;
  const float sqr_total = std::inner_product(act.begin(), act.end(), act.begin(), 0.0f);
  const float dev = std::sqrt(std::max(0.0f, sqr_total / n - mean * mean));
  const auto inactive = std::count_if(act.begin(), act.end(), [](float v) { return std::fabs(v) <= 1e-5f; });
  float entropy = 0;
  if (total > 0)
    for (float a : act)
      if (const float p = a / total; p > 0) entropy -= p * std::log2(p);
  int above = 0;
  if (dev > 0.0f)
    for (float a : act)
      if ((a - mean) / dev > 1) ++above;

  ts.name = name;
  split_name(name, ts.layer, ts.tensor);
  ts.sum_sqract = total;
  ts.mean_sqract = mean;
  ts.max_sqract = *std::max_element(act.begin(), act.end());
  ts.min_sqract = *std::min_element(act.begin(), act.end());
  ts.elements = static_cast<int>(act.size());
  ts.stddev = dev;
  ts.active = 1 - static_cast<float>(inactive) / n;
  ts.entropy = entropy;
  ts.zd = static_cast<float>(above) / static_cast<float>(ts.elements);
  return true;
}

// The name with the block number after the first "blk." lowered by one
// ("blk.-1." for block 0, which no entry has); empty without a block.
std::string previous_block_name(const std::string& name) {
  for (size_t at = name.find("blk."); at != std::string::npos; at = name.find("blk.", at + 1)) {
    const size_t digits = at + 4;
    size_t end = digits;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == digits || end >= name.size() || name[end] != '.') continue;
    const long blk = std::stol(name.substr(digits, end - digits));
    return name.substr(0, digits) + std::to_string(blk - 1) + name.substr(end);
  }
  return {};
}

float cosine(const std::vector<float>& a, const std::vector<float>& b) {
  const float dp = std::inner_product(a.begin(), a.end(), b.begin(), 0.0f);
  const float ma = std::sqrt(std::inner_product(a.begin(), a.end(), a.begin(), 0.0f));
  const float mb = std::sqrt(std::inner_product(b.begin(), b.end(), b.begin(), 0.0f));
  return dp / (ma * mb);
}

std::vector<ImatrixLayerStats> layer_stats(const std::vector<ImatrixTensorStats>& tensors) {
  struct Sums {
    float bias = 0, zd = 0, cossim = 0;
    int elements = 0;
  };
  std::map<int, Sums> by_layer;
  for (const ImatrixTensorStats& t : tensors) {
    int blk = -1;
    try {
      blk = std::stoi(t.layer);
    } catch (const std::exception&) {
      blk = -1;  // not in a block
    }
    Sums& s = by_layer[blk];
    s.bias += static_cast<float>(t.elements) * t.sum_sqract;
    s.zd += static_cast<float>(t.elements) * t.zd;
    s.cossim += static_cast<float>(t.elements) * t.cossim;
    s.elements += t.elements;
  }
  std::vector<ImatrixLayerStats> out;
  for (const auto& [blk, s] : by_layer) {
    if (blk < 0 || s.elements == 0) continue;
    const auto n = static_cast<float>(s.elements);
    out.push_back({blk, s.bias / n, s.zd / n, s.cossim / n});
  }
  return out;
}

}  // namespace

ImatrixStatistics imatrix_statistics(const Imatrix& m) {
  ImatrixStatistics s;
  for (const auto& [name, entry] : m.entries) {
    ImatrixTensorStats ts;
    std::string why;
    if (tensor_stats(name, entry, ts, why))
      s.tensors.push_back(std::move(ts));
    else
      s.skipped.push_back(std::move(why));
  }
  for (ImatrixTensorStats& t : s.tensors) {
    const std::string prev = previous_block_name(t.name);
    const auto it = prev.empty() ? m.entries.end() : m.entries.find(prev);
    const bool has_stats = it != m.entries.end() && std::any_of(s.tensors.begin(), s.tensors.end(), [&](const auto& o) {
                             return o.name == prev;
                           });
    // Sums of another size (a different expert count) have no cosine.
    if (has_stats && it->second.sums.size() == m.entries.at(t.name).sums.size())
      t.cossim = cosine(m.entries.at(t.name).sums, it->second.sums);
  }
  std::stable_sort(s.tensors.begin(), s.tensors.end(), [](const auto& a, const auto& b) {
    return a.tensor < b.tensor || (a.tensor == b.tensor && a.sum_sqract > b.sum_sqract);
  });
  s.layers = layer_stats(s.tensors);
  return s;
}

std::string format_imatrix_statistics(const ImatrixStatistics& s, const std::string& path) {
  std::string out;
  char line[512];
  const auto add = [&](int n) { out.append(line, static_cast<size_t>(std::clamp(n, 0, int{sizeof line} - 1))); };
  add(std::snprintf(line, sizeof line, "\nComputing statistics for %s (%d tensors)\n", path.c_str(),
                    static_cast<int>(s.tensors.size())));
  add(std::snprintf(line, sizeof line, "\n%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", " Layer",
                    "       Tensor", "          Σ(Act²)", "  Min", "            Max", "           μ", "   σ",
                    " % Active", "N", "   Entropy", "E (norm)", "ZD", "  CosSim"));
  out += std::string(167, '=') + "\n";
  for (const ImatrixTensorStats& t : s.tensors) {
    const float entropy_norm =
        t.elements > 0 ? 100.0f * (t.entropy / std::log2(static_cast<float>(t.elements))) : 0.0f;
    add(std::snprintf(line, sizeof line,
                      "%5s\t%-20s\t%10.2f\t%8.4f\t%11.4f\t%6.2f\t%6.2f\t%8.2f%%\t%6d\t%10.4f\t%6.2f%%\t%10.2f%%\t%8.4f\n",
                      t.layer.c_str(), t.tensor.c_str(), t.sum_sqract, t.min_sqract, t.max_sqract, t.mean_sqract,
                      t.stddev, t.active * 100.0f, t.elements, t.entropy, entropy_norm, 100.0f * t.zd, t.cossim));
  }
  add(std::snprintf(line, sizeof line, "\nComputing weighted average statistics per layer (%d layers)\n",
                    static_cast<int>(s.layers.size())));
  add(std::snprintf(line, sizeof line, "\n%s\t%s\t%s\t%s\n", "  Layer", "     μΣ(Act²)", "      μZD", "μCosSim"));
  out += std::string(48, '=') + "\n";
  for (const ImatrixLayerStats& l : s.layers)
    add(std::snprintf(line, sizeof line, "%5d\t%14.2f\t%10.4f%%\t%6.4f\n", l.layer, l.mean_sum_sqract, 100.0f * l.zd,
                      l.cossim));
  out += "\n";
  return out;
}

}  // namespace ds4::model
