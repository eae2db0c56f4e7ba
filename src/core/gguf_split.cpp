#include "core/gguf_split.h"

#include <sys/stat.h>

#include <charconv>
#include <limits>

#include "core/error.h"
#include "core/gguf_fingerprint.h"

namespace ds4::gguf {

namespace {

// The keys that describe a split, not the model: dropped when merging.
bool is_split_key(std::string_view key) {
  return key == kSplitNoKey || key == kSplitCountKey || key == kSplitTensorsCountKey || key == kSplitFingerprintKey;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

uint64_t padded(uint64_t n) { return (n + kDefaultAlignment - 1) / kDefaultAlignment * kDefaultAlignment; }

void add_tensors(Writer& w, const File& source, const std::vector<size_t>& indices) {
  const std::vector<TensorInfo>& all = source.tensors();
  for (size_t i : indices) w.add_tensor_view(all[i].name, all[i].type, all[i].ne, all[i].bytes());
}

std::vector<std::vector<size_t>> plan_by_layers(const File& source, const std::vector<uint32_t>& starts) {
  for (size_t k = 0; k < starts.size(); ++k) {
    if (starts[k] == 0 || (k > 0 && starts[k] <= starts[k - 1])) {
      throw Error(source.path() + ": layer starts must be ascending and at least 1 (layer 0 starts the first shard)");
    }
  }
  std::vector<std::vector<size_t>> plan(1);
  size_t next = 0;    // the next start not yet reached
  int64_t last = -1;  // the highest layer seen
  const std::vector<TensorInfo>& all = source.tensors();
  for (size_t i = 0; i < all.size(); ++i) {
    const int64_t layer = tensor_layer(all[i].name);
    if (layer >= 0) {
      if (layer < last) {
        throw Error(source.path() + ": tensor " + quote_name(all[i].name) + " comes after layer " +
                    std::to_string(last) + "'s tensors; a file whose layers are not in order cannot be split by layer");
      }
      last = layer;
      while (next < starts.size() && layer >= starts[next]) {
        if (plan.back().empty() || layer > starts[next]) {
          throw Error(source.path() + ": no tensor of layer " + std::to_string(starts[next]) +
                      " starts a shard (layers " + std::to_string(starts[next]) + " to " + std::to_string(layer) +
                      " would be empty or are missing)");
        }
        plan.emplace_back();
        ++next;
      }
    }
    plan.back().push_back(i);
  }
  if (next < starts.size()) {
    throw Error(source.path() + ": layer " + std::to_string(starts[next]) + " is past the last layer (" +
                std::to_string(last) + ")");
  }
  return plan;
}

}  // namespace

int64_t tensor_layer(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  const std::string_view rest = name.substr(4);
  int64_t n = -1;
  const auto r = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (r.ec != std::errc() || r.ptr == rest.data() || r.ptr == rest.data() + rest.size() || *r.ptr != '.') return -1;
  return n;
}

std::vector<std::vector<size_t>> plan_split(const File& source, const SplitOptions& o) {
  const size_t n = source.tensors().size();
  if (n == 0) throw Error(source.path() + ": has no tensors to split");
  std::vector<std::vector<size_t>> plan;
  if (o.by == SplitOptions::By::Layers) {
    plan = plan_by_layers(source, o.layer_starts);
  } else {
    if (o.by == SplitOptions::By::Tensors && o.max_tensors == 0) throw Error("the tensors per shard must be at least 1");
    if (o.by == SplitOptions::By::Size && o.max_bytes == 0) throw Error("the shard size must be at least 1 byte");
    plan.emplace_back();
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t t = padded(source.tensors()[i].nbytes);
      // As gguf-split: by count, every max_tensors-th tensor (of the file)
      // opens a shard; by size, a tensor that would take the shard past the
      // limit does (a tensor larger than the limit gets a shard of its own).
      const bool cut = o.by == SplitOptions::By::Tensors ? i > 0 && i % o.max_tensors == 0
                                                         : !plan.back().empty() && bytes + t > o.max_bytes;
      if (cut) {
        plan.emplace_back();
        bytes = 0;
      }
      plan.back().push_back(i);
      bytes += t;
    }
  }
  if (o.no_tensor_first_split) plan.insert(plan.begin(), std::vector<size_t>{});
  if (plan.size() > kMaxShards) {
    throw Error(source.path() + ": the split would make " + std::to_string(plan.size()) + " files; at most " +
                std::to_string(kMaxShards) + " fit split.count");
  }
  return plan;
}

Writer shard_writer(const File& source, const std::vector<std::vector<size_t>>& plan, size_t index,
                    bool record_fingerprint) {
  Writer w(static_cast<uint32_t>(source.alignment()));
  if (index == 0) {
    for (const MetadataEntry& e : source.metadata()) {
      if (!is_split_key(e.key)) w.set_value(std::string(e.key), e.value);
    }
    if (record_fingerprint) w.set_string(std::string(kSplitFingerprintKey), fingerprint_hex(merged_fingerprint(source)));
  }
  size_t tensors = 0;
  for (const auto& s : plan) tensors += s.size();
  if (tensors > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error(source.path() + ": too many tensors for split.tensors.count");
  }
  w.set_u16(std::string(kSplitNoKey), static_cast<uint16_t>(index));
  w.set_i32(std::string(kSplitTensorsCountKey), static_cast<int32_t>(tensors));
  w.set_u16(std::string(kSplitCountKey), static_cast<uint16_t>(plan.size()));
  add_tensors(w, source, plan[index]);
  return w;
}

Writer merged_writer(const File& source) {
  Writer w(static_cast<uint32_t>(source.alignment()));
  for (const MetadataEntry& e : source.metadata()) {
    if (!is_split_key(e.key)) w.set_value(std::string(e.key), e.value);
  }
  std::vector<size_t> all(source.tensors().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  add_tensors(w, source, all);
  return w;
}

std::vector<std::string> write_split(const File& source, const std::vector<std::vector<size_t>>& plan,
                                     const std::string& prefix, bool record_fingerprint) {
  const auto count = static_cast<uint32_t>(plan.size());
  std::vector<std::string> paths;
  for (uint32_t k = 0; k < count; ++k) {
    paths.push_back(shard_path(prefix, k, count));
    if (exists(paths.back())) throw Error(paths.back() + ": exists; not overwritten");
  }
  for (uint32_t k = 0; k < count; ++k) shard_writer(source, plan, k, record_fingerprint).write(paths[k]);
  return paths;
}

void write_merged(const File& source, const std::string& path) {
  if (exists(path)) throw Error(path + ": exists; not overwritten");
  merged_writer(source).write(path);
}

}  // namespace ds4::gguf
