#include "model/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"

namespace ds4::model {

namespace {

constexpr std::string_view kSums = ".in_sum2";
constexpr std::string_view kCounts = ".counts";

std::vector<float> f32_values(const gguf::TensorInfo& t, const std::string& path) {
  if (t.type != GgmlType::F32) {
    throw Error(path + ": tensor " + gguf::quote_name(t.name) + " is " + std::string(ggml_type_name(t.type)) +
                "; an imatrix holds F32");
  }
  std::vector<float> v(t.n_elements);
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

Imatrix load_gguf(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  Imatrix m;
  m.path = path;
  if (const gguf::Value* d = f.find_array("imatrix.datasets")) {
    for (std::string_view s : d->array_strings()) m.datasets.emplace_back(s);
  }
  m.chunk_count = f.find_u32("imatrix.chunk_count").value_or(0);
  m.chunk_size = f.find_u32("imatrix.chunk_size").value_or(0);
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> found;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string_view n = t.name;
    if (n.ends_with(kSums)) found[std::string(n.substr(0, n.size() - kSums.size()))].first = &t;
    if (n.ends_with(kCounts)) found[std::string(n.substr(0, n.size() - kCounts.size()))].second = &t;
  }
  if (found.empty()) throw Error(path + ": no .in_sum2 / .counts tensors: not an imatrix file");
  for (const auto& [name, pair] : found) {
    const auto [sums, counts] = pair;
    if (sums == nullptr || counts == nullptr) {
      throw Error(path + ": " + gguf::quote_name(name) + " has " + (sums ? ".in_sum2 but no .counts" : ".counts but no .in_sum2"));
    }
    ImatrixEntry e{f32_values(*sums, path), f32_values(*counts, path)};
    if (e.counts.empty() || e.sums.size() % e.counts.size() != 0 || sums->dim(1) != e.counts.size()) {
      throw Error(path + ": " + gguf::quote_name(name) + ": " + std::to_string(e.sums.size()) + " sums for " +
                  std::to_string(e.counts.size()) + " matrices");
    }
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

// A little-endian reader over the bytes of a legacy file.
class LegacyReader {
 public:
  LegacyReader(const std::vector<char>& b, const std::string& path) : b_(b), path_(path) {}
  bool at_end() const { return pos_ == b_.size(); }
  int32_t i32(const std::string& what) {
    int32_t v;
    take(&v, sizeof v, what);
    return v;
  }
  void take(void* dst, size_t n, const std::string& what) {
    if (n > b_.size() - pos_) throw Error(path_ + ": legacy imatrix ends inside " + what);
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
  }

 private:
  const std::vector<char>& b_;
  const std::string& path_;
  size_t pos_ = 0;
};

Imatrix load_legacy(const std::string& path, const std::vector<char>& bytes) {
  Imatrix m;
  m.path = path;
  m.legacy = true;
  LegacyReader r(bytes, path);
  const int32_t n = r.i32("the entry count");
  if (n < 1) throw Error(path + ": not an imatrix file (neither GGUF nor a legacy .dat with entries)");
  for (int32_t i = 0; i < n; ++i) {
    const std::string where = "entry " + std::to_string(i + 1) + " of " + std::to_string(n);
    const int32_t len = r.i32(where + "'s name length");
    if (len < 1 || len > 4096) throw Error(path + ": " + where + ": name length " + std::to_string(len));
    std::string name(static_cast<size_t>(len), '\0');
    r.take(name.data(), name.size(), where + "'s name");
    const int32_t ncall = r.i32(where + "'s call count");
    const int32_t nval = r.i32(where + "'s value count");
    if (nval < 1) throw Error(path + ": " + where + " (" + gguf::quote_name(name) + "): " + std::to_string(nval) + " values");
    ImatrixEntry e;
    e.sums.resize(static_cast<size_t>(nval));
    r.take(e.sums.data(), e.sums.size() * sizeof(float), where + "'s values");
    e.counts = {static_cast<float>(ncall)};
    if (!m.entries.emplace(name, std::move(e)).second) throw Error(path + ": " + gguf::quote_name(name) + " appears twice");
  }
  if (!r.at_end()) {
    const int32_t chunks = r.i32("the chunk count");
    m.chunk_count = chunks > 0 ? static_cast<uint32_t>(chunks) : 0;
    if (!r.at_end()) {
      const int32_t len = r.i32("the dataset name length");
      if (len > 0) {
        std::string dataset(static_cast<size_t>(len), '\0');
        r.take(dataset.data(), dataset.size(), "the dataset name");
        m.datasets.push_back(dataset);
      }
    }
  }
  return m;
}

}  // namespace

Imatrix Imatrix::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  return magic == gguf::kMagic ? load_gguf(path) : load_legacy(path, bytes);
}

void Imatrix::save(const std::string& path) const {
  gguf::Writer w;
  w.set_string("general.type", "imatrix");
  w.set_array_string("imatrix.datasets", datasets);
  w.set_u32("imatrix.chunk_count", chunk_count);
  w.set_u32("imatrix.chunk_size", chunk_size);
  auto bytes_of = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  for (const auto& [name, e] : entries) {
    const uint64_t n_mat = e.counts.size();
    if (n_mat == 0 || e.sums.size() % n_mat != 0) throw Error(path + ": " + gguf::quote_name(name) + ": sums do not fit its counts");
    // ggml writes a tensor's trailing dimensions of 1 away: [n] when n_mat is 1.
    const uint64_t n_per_row = e.sums.size() / n_mat;
    if (n_mat == 1) {
      w.add_tensor(name + std::string(kSums), GgmlType::F32, {n_per_row}, bytes_of(e.sums));
      w.add_tensor(name + std::string(kCounts), GgmlType::F32, {1}, bytes_of(e.counts));
    } else {
      w.add_tensor(name + std::string(kSums), GgmlType::F32, {n_per_row, n_mat}, bytes_of(e.sums));
      w.add_tensor(name + std::string(kCounts), GgmlType::F32, {1, n_mat}, bytes_of(e.counts));
    }
  }
  w.write(path);
}

void Imatrix::save_legacy(const std::string& path) const {
  if (chunk_size == 0) throw Error(path + ": a legacy imatrix needs the chunk size its calls are counted in");
  std::string b;
  auto put = [&b](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  auto put_i32 = [&put](int64_t v) {
    const auto x = static_cast<int32_t>(v);
    put(&x, sizeof x);
  };
  std::vector<const std::pair<const std::string, ImatrixEntry>*> stored;
  for (const auto& entry : entries) {
    const std::vector<float>& c = entry.second.counts;
    if (!c.empty() && std::any_of(c.begin(), c.end(), [](float n) { return n != 0.0f; })) stored.push_back(&entry);
  }
  put_i32(static_cast<int64_t>(stored.size()));
  const auto cs = static_cast<int64_t>(chunk_size);
  for (const auto* entry : stored) {
    const auto& [name, e] = *entry;
    put_i32(static_cast<int64_t>(name.size()));
    put(name.data(), name.size());
    const auto most = static_cast<int64_t>(*std::max_element(e.counts.begin(), e.counts.end()));
    const int64_t ncall = (most + cs - 1) / cs;  // rounded up: no entry gets 0 calls
    put_i32(ncall);
    put_i32(static_cast<int64_t>(e.sums.size()));
    const size_t per_matrix = e.sums.size() / e.counts.size();
    for (size_t i = 0; i < e.sums.size(); ++i) {
      float count = e.counts[i / per_matrix], value = e.sums[i];
      if (count == 0.0f) value = count = 1.0f;
      const float v = value / count * static_cast<float>(ncall);
      put(&v, sizeof v);
    }
  }
  put_i32(chunk_count);
  const std::string dataset = datasets.empty() ? std::string() : datasets.back();
  put_i32(static_cast<int64_t>(dataset.size()));
  put(dataset.data(), dataset.size());
  const std::string part = path + ".part";
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
    out.close();
    if (!out) throw Error(part + ": cannot write: " + std::strerror(errno));
  }
  if (std::rename(part.c_str(), path.c_str()) != 0) throw Error(path + ": cannot rename into place: " + std::strerror(errno));
}

void Imatrix::add(const Imatrix& other, uint32_t size) {
  if (size == 0) throw Error("imatrix: combining needs a chunk size");
  const auto scale = static_cast<float>(size);
  for (const auto& [name, in] : other.entries) {
    ImatrixEntry& e = entries[name];
    const std::string who = gguf::quote_name(name) + " (" + (other.path.empty() ? "collected" : other.path) + ")";
    if (e.sums.empty()) e.sums.assign(in.sums.size(), 0.0f);
    if (e.sums.size() != in.sums.size()) {
      throw Error("imatrix: " + who + " has " + std::to_string(in.sums.size()) + " values where the others have " +
                  std::to_string(e.sums.size()));
    }
    if (other.legacy) {
      if (e.counts.empty()) e.counts.assign(1, 0.0f);
      for (size_t j = 0; j < e.sums.size(); ++j) e.sums[j] += in.sums[j] * scale;
      for (float& c : e.counts) c += in.counts.at(0) * scale;
      continue;
    }
    if (e.counts.empty()) e.counts.assign(in.counts.size(), 0.0f);
    if (e.counts.size() == 1 && in.counts.size() > 1) e.counts.assign(in.counts.size(), e.counts[0]);
    if (e.counts.size() != in.counts.size()) {
      throw Error("imatrix: " + who + " has " + std::to_string(in.counts.size()) + " matrices where the others have " +
                  std::to_string(e.counts.size()));
    }
    for (size_t j = 0; j < e.sums.size(); ++j) e.sums[j] += in.sums[j];
    for (size_t j = 0; j < e.counts.size(); ++j) e.counts[j] += in.counts[j];
  }
  datasets.insert(datasets.end(), other.datasets.begin(), other.datasets.end());
  chunk_size = size;
  float most = 0;
  for (const auto& [name, e] : entries)
    for (const float c : e.counts) most = std::max(most, c);
  chunk_count = static_cast<uint32_t>(static_cast<int64_t>(most) / size);
}

std::optional<std::vector<float>> Imatrix::importance(const std::string& tensor, uint64_t n_matrices,
                                                      uint64_t n_columns) const {
  const auto it = entries.find(tensor);
  if (it == entries.end()) return std::nullopt;
  const ImatrixEntry& e = it->second;
  // A grouped product (attn_output_a) has a whole multiple of the tensor's
  // matrices: llama.cpp multiplies it as several matrices of the same
  // columns, and llama-imatrix records each group's columns in turn.
  const uint64_t per_matrix = n_matrices * n_columns;
  if (per_matrix == 0 || e.sums.empty() || e.sums.size() % per_matrix != 0) {
    throw Error(path + ": the imatrix entry for " + gguf::quote_name(tensor) + " has " + std::to_string(e.sums.size()) +
                " values; the tensor has " + std::to_string(n_matrices) + " x " + std::to_string(n_columns));
  }
  const uint64_t blocks = e.sums.size() / n_columns;
  std::vector<float> v(e.sums.size());
  if (legacy) {
    const float ncall = e.counts.at(0);
    for (size_t i = 0; i < v.size(); ++i) v[i] = ncall > 0 ? e.sums[i] / ncall : e.sums[i];
    return v;
  }
  // One count per matrix (routed experts), per block, or one for a grouped
  // product's blocks together.
  const uint64_t n_counts = e.counts.size();
  if (n_counts != n_matrices && n_counts != blocks) {
    throw Error(path + ": the imatrix entry for " + gguf::quote_name(tensor) + " has " + std::to_string(n_counts) +
                " matrices; the tensor has " + std::to_string(n_matrices));
  }
  const uint64_t blocks_per_count = blocks / n_counts;
  for (uint64_t b = 0; b < blocks; ++b) {
    // llama-quantize rounds the stored counts to integers, then divides in float.
    const auto count = static_cast<float>(std::lround(e.counts[b / blocks_per_count]));
    for (uint64_t i = 0; i < n_columns; ++i) {
      v[b * n_columns + i] = count > 0.0f ? e.sums[b * n_columns + i] / count : 1.0f;
    }
  }
  return v;
}

}  // namespace ds4::model
