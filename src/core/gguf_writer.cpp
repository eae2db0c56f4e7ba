#include "core/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/error.h"

namespace ds4::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF writer copies host values as little-endian");

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Unlinks the temporary file unless the write completed.
class TempFile {
 public:
  // `keep`: an unfinished file stays for a later write to resume.
  TempFile(std::string tmp_path, std::string final_path, bool keep = false)
      : tmp_(std::move(tmp_path)), final_(std::move(final_path)), keep_(keep) {
    do {
      fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | (keep ? 0 : O_TRUNC) | O_CLOEXEC, 0644);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw Error(final_ + ": cannot create " + tmp_ + ": " + std::strerror(errno));
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !keep_) ::unlink(tmp_.c_str());
  }

  // The first n bytes now in the file (fewer when it is shorter).
  std::vector<uint8_t> head(size_t n) {
    std::vector<uint8_t> out(n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, out.data() + got, n - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    return out;
  }

  uint64_t size() {
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) throw Error(final_ + ": cannot size " + tmp_ + ": " + std::strerror(errno));
    return static_cast<uint64_t>(end);
  }

  // Cuts the file to `size` bytes and goes on writing there.
  void truncate_and_seek(uint64_t size) {
    extend_to(size);
    if (::lseek(fd_, static_cast<off_t>(size), SEEK_SET) < 0) {
      throw Error(final_ + ": cannot seek in " + tmp_ + ": " + std::strerror(errno));
    }
  }

  void sync() {
    if (::fdatasync(fd_) != 0) throw Error(final_ + ": cannot flush " + tmp_ + " to disk: " + std::strerror(errno));
  }

  void write(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw Error(final_ + ": write to " + tmp_ + " failed: " + std::strerror(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void zeros(size_t n) {
    static constexpr uint8_t kZeros[256] = {};
    while (n > 0) {
      const size_t k = std::min(n, sizeof(kZeros));
      write(kZeros, k);
      n -= k;
    }
  }

  // Grows the file to `size` bytes without writing: the new bytes read as
  // zero and, on file systems with sparse files, take no space.
  void extend_to(uint64_t size) {
    int r;
    do {
      r = ::ftruncate(fd_, static_cast<off_t>(size));
    } while (r != 0 && errno == EINTR);
    if (r != 0) throw Error(final_ + ": cannot extend " + tmp_ + ": " + std::strerror(errno));
  }

  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error(final_ + ": closing " + tmp_ + " failed: " + std::strerror(errno));
    if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
      throw Error(final_ + ": cannot rename " + tmp_ + " into place: " + std::strerror(errno));
    }
    committed_ = true;
  }

 private:
  std::string tmp_;
  std::string final_;
  bool keep_ = false;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

// ---------------------------------------------------------------------------
// MetaValue

template <typename T>
MetaValue MetaValue::scalar(ValueType type, T v) {
  MetaValue m(type, 0);
  put(m.encoded_, v);
  return m;
}

MetaValue MetaValue::u8(uint8_t v) { return scalar(ValueType::U8, v); }
MetaValue MetaValue::i8(int8_t v) { return scalar(ValueType::I8, v); }
MetaValue MetaValue::u16(uint16_t v) { return scalar(ValueType::U16, v); }
MetaValue MetaValue::i16(int16_t v) { return scalar(ValueType::I16, v); }
MetaValue MetaValue::u32(uint32_t v) { return scalar(ValueType::U32, v); }
MetaValue MetaValue::i32(int32_t v) { return scalar(ValueType::I32, v); }
MetaValue MetaValue::u64(uint64_t v) { return scalar(ValueType::U64, v); }
MetaValue MetaValue::i64(int64_t v) { return scalar(ValueType::I64, v); }
MetaValue MetaValue::f32(float v) { return scalar(ValueType::F32, v); }
MetaValue MetaValue::f64(double v) { return scalar(ValueType::F64, v); }
MetaValue MetaValue::boolean(bool v) { return scalar<uint8_t>(ValueType::BOOL, v ? 1 : 0); }

MetaValue MetaValue::string(std::string_view v) {
  MetaValue m(ValueType::STRING, 0);
  put_string(m.encoded_, v);
  return m;
}

template <typename T>
MetaValue MetaValue::fixed_array(ValueType element_type, std::span<const T> v) {
  MetaValue m(ValueType::ARRAY, 1);
  m.encoded_.reserve(12 + v.size_bytes());
  put<uint32_t>(m.encoded_, static_cast<uint32_t>(element_type));
  put<uint64_t>(m.encoded_, v.size());
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  m.encoded_.insert(m.encoded_.end(), p, p + v.size_bytes());
  return m;
}

MetaValue MetaValue::array_u8(std::span<const uint8_t> v) { return fixed_array(ValueType::U8, v); }
MetaValue MetaValue::array_i8(std::span<const int8_t> v) { return fixed_array(ValueType::I8, v); }
MetaValue MetaValue::array_u16(std::span<const uint16_t> v) { return fixed_array(ValueType::U16, v); }
MetaValue MetaValue::array_i16(std::span<const int16_t> v) { return fixed_array(ValueType::I16, v); }
MetaValue MetaValue::array_u32(std::span<const uint32_t> v) { return fixed_array(ValueType::U32, v); }
MetaValue MetaValue::array_i32(std::span<const int32_t> v) { return fixed_array(ValueType::I32, v); }
MetaValue MetaValue::array_u64(std::span<const uint64_t> v) { return fixed_array(ValueType::U64, v); }
MetaValue MetaValue::array_i64(std::span<const int64_t> v) { return fixed_array(ValueType::I64, v); }
MetaValue MetaValue::array_f32(std::span<const float> v) { return fixed_array(ValueType::F32, v); }
MetaValue MetaValue::array_f64(std::span<const double> v) { return fixed_array(ValueType::F64, v); }

MetaValue MetaValue::array_bool(const std::vector<bool>& v) {
  MetaValue m(ValueType::ARRAY, 1);
  put<uint32_t>(m.encoded_, static_cast<uint32_t>(ValueType::BOOL));
  put<uint64_t>(m.encoded_, v.size());
  for (bool b : v) m.encoded_.push_back(b ? 1 : 0);
  return m;
}

MetaValue MetaValue::array_string(std::span<const std::string> v) {
  MetaValue m(ValueType::ARRAY, 1);
  size_t total = 12;
  for (const std::string& s : v) total += 8 + s.size();
  m.encoded_.reserve(total);
  put<uint32_t>(m.encoded_, static_cast<uint32_t>(ValueType::STRING));
  put<uint64_t>(m.encoded_, v.size());
  for (const std::string& s : v) put_string(m.encoded_, s);
  return m;
}

MetaValue MetaValue::array(ValueType element_type, const std::vector<MetaValue>& elements) {
  if (static_cast<uint32_t>(element_type) > static_cast<uint32_t>(ValueType::F64)) {
    throw Error("gguf::MetaValue::array: unknown element type id " +
                std::to_string(static_cast<uint32_t>(element_type)));
  }
  uint32_t depth = 1;
  for (size_t i = 0; i < elements.size(); ++i) {
    if (elements[i].type_ != element_type) {
      throw Error("gguf::MetaValue::array: element " + std::to_string(i) + " has type " +
                  std::string(value_type_name(elements[i].type_)) + ", the array holds " +
                  std::string(value_type_name(element_type)));
    }
    depth = std::max(depth, elements[i].depth_ + 1);
  }
  if (depth > kMaxArrayDepth) {
    throw Error("gguf::MetaValue::array: arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
  }
  MetaValue m(ValueType::ARRAY, depth);
  put<uint32_t>(m.encoded_, static_cast<uint32_t>(element_type));
  put<uint64_t>(m.encoded_, elements.size());
  for (const MetaValue& e : elements) m.encoded_.insert(m.encoded_.end(), e.encoded_.begin(), e.encoded_.end());
  return m;
}

MetaValue MetaValue::copy_of(const Value& v) {
  switch (v.type()) {
    case ValueType::STRING: return string(v.as_string());
    case ValueType::ARRAY: {
      if (v.array_type() == ValueType::ARRAY) {
        // Rebuilt element by element so the nesting depth is tracked.
        std::vector<MetaValue> elems;
        elems.reserve(static_cast<size_t>(v.size()));
        v.for_each_element([&](const Value& e) { elems.push_back(copy_of(e)); });
        return array(ValueType::ARRAY, elems);
      }
      MetaValue m(ValueType::ARRAY, 1);
      const std::span<const uint8_t> raw = v.raw();
      m.encoded_.reserve(12 + raw.size());
      put<uint32_t>(m.encoded_, static_cast<uint32_t>(v.array_type()));
      put<uint64_t>(m.encoded_, v.size());
      m.encoded_.insert(m.encoded_.end(), raw.begin(), raw.end());
      return m;
    }
    default: {
      MetaValue m(v.type(), 0);
      const std::span<const uint8_t> raw = v.raw();
      m.encoded_.assign(raw.begin(), raw.end());
      return m;
    }
  }
}

// ---------------------------------------------------------------------------
// Writer

Writer::Writer(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error("gguf::Writer: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  if (alignment != kDefaultAlignment) set_u32(std::string(kAlignmentKey), alignment);
}

void Writer::set_value(std::string key, MetaValue v) {
  if (key.empty()) throw Error("gguf::Writer: metadata key is empty");
  if (!is_valid_utf8(key)) throw Error("gguf::Writer: metadata key " + quote_name(key) + " is not valid UTF-8");
  if (key == kAlignmentKey) {
    uint32_t a = 0;
    if (v.type() == ValueType::U32) std::memcpy(&a, v.encoded().data(), 4);
    if (v.type() != ValueType::U32 || a != alignment_) {
      throw Error("gguf::Writer: metadata key " + quote_name(key) + " must be the u32 " + std::to_string(alignment_) +
                  " given to the Writer constructor");
    }
  }
  for (Entry& e : kv_) {
    if (e.key == key) {
      e.value = std::move(v);
      return;
    }
  }
  kv_.push_back({std::move(key), std::move(v)});
}

void Writer::set_value(std::string key, const Value& v) { set_value(std::move(key), MetaValue::copy_of(v)); }

void Writer::set_u8(std::string key, uint8_t v) { set_value(std::move(key), MetaValue::u8(v)); }
void Writer::set_i8(std::string key, int8_t v) { set_value(std::move(key), MetaValue::i8(v)); }
void Writer::set_u16(std::string key, uint16_t v) { set_value(std::move(key), MetaValue::u16(v)); }
void Writer::set_i16(std::string key, int16_t v) { set_value(std::move(key), MetaValue::i16(v)); }
void Writer::set_u32(std::string key, uint32_t v) { set_value(std::move(key), MetaValue::u32(v)); }
void Writer::set_i32(std::string key, int32_t v) { set_value(std::move(key), MetaValue::i32(v)); }
void Writer::set_u64(std::string key, uint64_t v) { set_value(std::move(key), MetaValue::u64(v)); }
void Writer::set_i64(std::string key, int64_t v) { set_value(std::move(key), MetaValue::i64(v)); }
void Writer::set_f32(std::string key, float v) { set_value(std::move(key), MetaValue::f32(v)); }
void Writer::set_f64(std::string key, double v) { set_value(std::move(key), MetaValue::f64(v)); }
void Writer::set_bool(std::string key, bool v) { set_value(std::move(key), MetaValue::boolean(v)); }
void Writer::set_string(std::string key, std::string v) { set_value(std::move(key), MetaValue::string(v)); }
void Writer::set_array_u8(std::string key, std::vector<uint8_t> v) {
  set_value(std::move(key), MetaValue::array_u8(v));
}
void Writer::set_array_i8(std::string key, std::vector<int8_t> v) {
  set_value(std::move(key), MetaValue::array_i8(v));
}
void Writer::set_array_u32(std::string key, std::vector<uint32_t> v) {
  set_value(std::move(key), MetaValue::array_u32(v));
}
void Writer::set_array_i32(std::string key, std::vector<int32_t> v) {
  set_value(std::move(key), MetaValue::array_i32(v));
}
void Writer::set_array_u64(std::string key, std::vector<uint64_t> v) {
  set_value(std::move(key), MetaValue::array_u64(v));
}
void Writer::set_array_i64(std::string key, std::vector<int64_t> v) {
  set_value(std::move(key), MetaValue::array_i64(v));
}
void Writer::set_array_f32(std::string key, std::vector<float> v) {
  set_value(std::move(key), MetaValue::array_f32(v));
}
void Writer::set_array_f64(std::string key, std::vector<double> v) {
  set_value(std::move(key), MetaValue::array_f64(v));
}
void Writer::set_array_bool(std::string key, std::vector<bool> v) {
  set_value(std::move(key), MetaValue::array_bool(v));
}
void Writer::set_array_string(std::string key, std::vector<std::string> v) {
  set_value(std::move(key), MetaValue::array_string(v));
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, Fill fill) {
  const std::string where = "gguf::Writer: tensor " + quote_name(name) + ": ";
  if (name.empty()) throw Error("gguf::Writer: tensor name is empty");
  if (!is_valid_utf8(name)) throw Error(where + "name is not valid UTF-8");
  if (name.size() > kMaxTensorNameBytes) {
    throw Error(where + "name is " + std::to_string(name.size()) + " bytes, ggml allows at most " +
                std::to_string(kMaxTensorNameBytes));
  }
  for (const Tensor& t : tensors_) {
    if (t.name == name) throw Error(where + "duplicate tensor name");
  }
  if (ne.empty() || ne.size() > kMaxDims) {
    throw Error(where + std::to_string(ne.size()) + " dimensions; a tensor has 1 to " + std::to_string(kMaxDims));
  }
  uint64_t n = 1;
  bool overflow = false;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] == 0) throw Error(where + "dimension " + std::to_string(d) + " is 0");
    overflow = overflow || __builtin_mul_overflow(n, ne[d], &n);
  }
  if (overflow || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Error(where + "element count overflows int64");
  }
  const GgmlTypeTraits& traits = ggml_type_traits(type);
  if (ne[0] % traits.block_elems != 0) {
    throw Error(where + "row length ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
                std::string(traits.name) + " block size " + std::to_string(traits.block_elems));
  }
  const std::optional<uint64_t> nbytes = ggml_nbytes(type, n);
  const uint64_t padded = nbytes ? align_up(*nbytes, alignment_) : 0;
  if (!nbytes || padded < *nbytes || data_bytes_ + padded < data_bytes_) {
    throw Error(where + "byte size overflows 64 bits");
  }
  tensors_.push_back({std::move(name), type, std::move(ne), *nbytes, data_bytes_, std::move(fill)});
  data_bytes_ += padded;
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> bytes) {
  // Check the size here, where the caller can still be named, not during write().
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d == 0 || __builtin_mul_overflow(n, d, &n)) {
      n = 0;
      break;
    }
  }
  const std::optional<uint64_t> expected = n && !ne.empty() ? ggml_nbytes(type, n) : std::nullopt;
  if (expected && bytes.size() != *expected) {
    throw Error("gguf::Writer: tensor " + quote_name(name) + ": " + std::to_string(bytes.size()) +
                " bytes given, its shape and type need " + std::to_string(*expected));
  }
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(std::move(name), type, std::move(ne), [data](std::span<uint8_t> dst) {
    std::memcpy(dst.data(), data->data(), dst.size());
  });
}

void Writer::add_tensor_view(std::string name, GgmlType type, std::vector<uint64_t> ne,
                             std::span<const uint8_t> bytes) {
  const std::string shown = quote_name(name);
  add_tensor(std::move(name), type, std::move(ne), Fill{});
  if (bytes.size() != tensors_.back().nbytes) {
    data_bytes_ -= align_up(tensors_.back().nbytes, alignment_);
    const uint64_t need = tensors_.back().nbytes;
    tensors_.pop_back();
    throw Error("gguf::Writer: tensor " + shown + ": " + std::to_string(bytes.size()) +
                " bytes given, its shape and type need " + std::to_string(need));
  }
  tensors_.back().view = bytes;
}

uint64_t Writer::tensor_data_bytes() const { return data_bytes_; }

std::vector<uint8_t> Writer::encode_directory() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, kVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const Entry& e : kv_) {
    put_string(out, e.key);
    put<uint32_t>(out, static_cast<uint32_t>(e.value.type()));
    const std::span<const uint8_t> enc = e.value.encoded();
    out.insert(out.end(), enc.begin(), enc.end());
  }
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, t.offset);
  }
  out.resize(align_up(out.size(), alignment_), 0);
  return out;
}

void Writer::write(const std::string& path) const { write(path, WriteOptions{}); }

size_t Writer::write(const std::string& path, const WriteOptions& options) const {
  TempFile file(path + options.temp_suffix, path, options.resume);
  const std::vector<uint8_t> directory = encode_directory();
  // What an interrupted write left: kept when it was this same file, up to its
  // last whole tensor (sequential writes; synced after each tensor when durable).
  size_t kept = 0;
  uint64_t written = 0;  // bytes of the data section so far
  if (options.resume && file.size() > directory.size() && file.head(directory.size()) == directory) {
    const uint64_t have = file.size() - directory.size();
    while (kept < tensors_.size() && tensors_[kept].offset + tensors_[kept].nbytes <= have) ++kept;
  }
  if (kept > 0) {
    // Padding a kill may have cut short is written again.
    const uint64_t end = tensors_[kept - 1].offset + tensors_[kept - 1].nbytes;
    file.truncate_and_seek(directory.size() + end);
    file.zeros(static_cast<size_t>(align_up(end, alignment_) - end));
    written = align_up(end, alignment_);
  } else {
    file.truncate_and_seek(0);
    file.write(directory.data(), directory.size());
  }
  if (options.progress) options.progress(kept, written);

  // One buffer, reused: only the largest tensor is ever in memory.
  std::vector<uint8_t> buf;
  for (size_t i = kept; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (!t.view.empty()) {
      file.write(t.view.data(), t.view.size());
    } else {
      if (t.nbytes > std::numeric_limits<size_t>::max()) {
        throw Error(path + ": tensor " + quote_name(t.name) + " is too large for memory");
      }
      buf.assign(static_cast<size_t>(t.nbytes), 0);
      if (t.fill) t.fill(std::span<uint8_t>(buf.data(), buf.size()));
      file.write(buf.data(), buf.size());
    }
    written += t.nbytes;
    file.zeros(static_cast<size_t>(align_up(written, alignment_) - written));
    written = align_up(written, alignment_);
    if (options.durable) file.sync();
    if (options.progress) options.progress(i + 1, written);
  }
  if (options.durable) file.sync();
  file.commit();
  return kept;
}

void Writer::write_without_data(const std::string& path) const {
  TempFile file(path + ".tmp", path);
  const std::vector<uint8_t> directory = encode_directory();
  file.write(directory.data(), directory.size());
  file.extend_to(directory.size() + data_bytes_);
  file.commit();
}

}  // namespace ds4::gguf
