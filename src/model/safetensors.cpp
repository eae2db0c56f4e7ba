#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ds4::model {

namespace {

namespace fs = std::filesystem;

struct DtypeInfo {
  StDtype type;
  std::string_view name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::F32, "F32", 4},         {StDtype::F16, "F16", 2},         {StDtype::BF16, "BF16", 2},
    {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E8M0, "F8_E8M0", 1}, {StDtype::I8, "I8", 1},
    {StDtype::U8, "U8", 1},           {StDtype::I16, "I16", 2},         {StDtype::I32, "I32", 4},
    {StDtype::I64, "I64", 8},         {StDtype::F64, "F64", 8},         {StDtype::BOOL, "BOOL", 1},
};

const DtypeInfo* dtype_by_name(std::string_view n) {
  for (const DtypeInfo& d : kDtypes)
    if (d.name == n) return &d;
  return nullptr;
}

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

}  // namespace

std::string_view st_dtype_name(StDtype t) {
  for (const DtypeInfo& d : kDtypes)
    if (d.type == t) return d.name;
  return "?";
}

size_t st_dtype_size(StDtype t) {
  for (const DtypeInfo& d : kDtypes)
    if (d.type == t) return d.size;
  return 0;
}

uint64_t StTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(path) {
  const std::span<const uint8_t> all = map_.bytes();
  if (all.size() < 8) throw Error(path + ": " + std::to_string(all.size()) + " bytes: too short for a safetensors file");
  uint64_t header_len = 0;
  std::memcpy(&header_len, all.data(), 8);
  if (header_len > all.size() - 8) {
    throw Error(path + ": the header claims " + std::to_string(header_len) + " bytes, the file has " +
                std::to_string(all.size() - 8) + " after the length (truncated, or not safetensors)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + static_cast<ptrdiff_t>(header_len));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": the header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw Error(path + ": the header is not a JSON object");
  const std::span<const uint8_t> data = all.subspan(8 + header_len);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor " + in_quotes(name);
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      throw Error(where + ": needs dtype, shape and data_offsets");
    }
    if (!v["dtype"].is_string()) throw Error(where + ": dtype is not a string");
    const DtypeInfo* d = dtype_by_name(v["dtype"].get<std::string>());
    if (d == nullptr) throw Error(where + ": unknown dtype " + v["dtype"].dump());
    StTensor t{name, d->type, {}, {}, &path_};
    if (!v["shape"].is_array()) throw Error(where + ": shape is not an array");
    uint64_t n = 1;
    for (const auto& dim : v["shape"]) {
      if (!dim.is_number_unsigned()) throw Error(where + ": shape " + v["shape"].dump() + " is not a list of sizes");
      t.shape.push_back(dim.get<uint64_t>());
      if (__builtin_mul_overflow(n, t.shape.back(), &n)) throw Error(where + ": shape " + v["shape"].dump() + " overflows");
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw Error(where + ": data_offsets is not [begin, end]");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(n, d->size, &bytes) || end < begin || end - begin != bytes) {
      throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") do not hold " +
                  v["shape"].dump() + " of " + std::string(d->name));
    }
    if (end > data.size()) {
      throw Error(where + ": its bytes end at " + std::to_string(end) + ", past the " + std::to_string(data.size()) +
                  " bytes of data (truncated file?)");
    }
    t.data = data.subspan(begin, bytes);
    ranges.emplace_back(begin, end);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) throw Error(path + ": two tensors' data overlap");
  }
}

SafetensorsSet SafetensorsSet::open(const std::string& path) {
  SafetensorsSet s;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "model.safetensors.index.json")) {
      p /= "model.safetensors.index.json";
    } else if (fs::exists(p / "model.safetensors")) {
      p /= "model.safetensors";
    } else {
      throw Error(path + ": holds neither model.safetensors.index.json nor model.safetensors");
    }
  }
  s.where_ = p.string();
  s.folder_ = p.parent_path().string();
  if (p.extension() == ".json") {
    std::ifstream in(p);
    if (!in) throw Error(s.where_ + ": cannot open: " + std::strerror(errno));
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(s.where_ + ": not valid JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw Error(s.where_ + ": has no \"weight_map\" object");
    }
    std::map<std::string, size_t> shard_of_file;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) throw Error(s.where_ + ": weight_map[" + in_quotes(name) + "] is not a file name");
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." || f.empty()) {
        throw Error(s.where_ + ": weight_map[" + in_quotes(name) + "] names " + in_quotes(f) + ", not a file beside the index");
      }
      auto it = shard_of_file.find(f);
      if (it == shard_of_file.end()) {
        s.files_.push_back(std::make_unique<SafetensorsFile>((p.parent_path() / f).string()));
        it = shard_of_file.emplace(f, s.files_.size() - 1).first;
      }
      const SafetensorsFile& shard = *s.files_[it->second];
      const auto t = shard.tensors().find(name);
      if (t == shard.tensors().end()) {
        throw Error(shard.path() + ": tensor " + in_quotes(name) + " missing (the index " + s.where_ + " puts it there)");
      }
      s.index_.emplace(name, &t->second);
    }
    // A tensor a shard holds but the index does not list, or lists elsewhere.
    for (const auto& f : s.files_) {
      for (const auto& [name, t] : f->tensors()) {
        const auto it = s.index_.find(name);
        if (it == s.index_.end()) throw Error(f->path() + ": tensor " + in_quotes(name) + " is not in the index " + s.where_);
        if (it->second != &t) throw Error(f->path() + ": tensor " + in_quotes(name) + " is also in " + *it->second->shard);
      }
    }
  } else {
    s.files_.push_back(std::make_unique<SafetensorsFile>(s.where_));
    for (const auto& [name, t] : s.files_.back()->tensors()) s.index_.emplace(name, &t);
  }
  return s;
}

const StTensor* SafetensorsSet::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const StTensor& SafetensorsSet::get(std::string_view name) const {
  const StTensor* t = find(name);
  if (t == nullptr) throw Error(where_ + ": tensor " + in_quotes(name) + " missing");
  return *t;
}

}  // namespace ds4::model
