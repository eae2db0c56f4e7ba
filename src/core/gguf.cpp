#include "core/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "core/file_map.h"

namespace ds4::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF reader decodes little-endian values in place");

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool valid_value_type(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::F64); }

// Smallest encoding of one value of `type`, used to reject counts that the
// remaining bytes cannot hold before walking them.
uint64_t min_encoded_size(ValueType type) {
  switch (type) {
    case ValueType::STRING: return 8;       // length
    case ValueType::ARRAY: return 4 + 8;    // element type + count
    default: return value_type_size(type);
  }
}

std::string shape_string(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown type";
}

size_t value_type_size(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64: return 8;
    case ValueType::STRING:
    case ValueType::ARRAY: return 0;
  }
  return 0;
}

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64: return true;
    default: return false;
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are invalid.
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return false;
    i += len;
  }
  return true;
}

std::string quote_name(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  const bool utf8 = is_valid_utf8(s);
  std::string out = "'";
  const size_t n = std::min(s.size(), kMaxShown);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'' || (c >= 0x80 && !utf8)) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  // Cutting at a byte count may split a UTF-8 sequence; the marker says so.
  if (s.size() > kMaxShown) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out + "'";
}

// ---------------------------------------------------------------------------
// Value

namespace detail {
// The only place Values are made: from bytes the parser has validated.
struct ValueBuilder {
  static Value decode(ValueType type, const uint8_t* p, const std::string* file, std::string_view key,
                      bool is_element) {
    Value v;
    v.type_ = type;
    v.file_ = file;
    v.key_ = key;
    v.is_element_ = is_element;
    switch (type) {
      case ValueType::STRING:
        v.size_ = load<uint64_t>(p);
        v.data_ = p + 8;
        break;
      case ValueType::ARRAY:
        v.array_type_ = static_cast<ValueType>(load<uint32_t>(p));
        v.size_ = load<uint64_t>(p + 4);
        v.data_ = p + 12;
        break;
      default:
        v.data_ = p;
        break;
    }
    return v;
  }
};
}  // namespace detail

uint64_t Value::encoded_size(ValueType type, const uint8_t* p) {
  switch (type) {
    case ValueType::STRING: return 8 + load<uint64_t>(p);
    case ValueType::ARRAY: {
      const auto elem = static_cast<ValueType>(load<uint32_t>(p));
      const uint64_t n = load<uint64_t>(p + 4);
      if (const size_t sz = value_type_size(elem); sz != 0) return 12 + n * sz;
      uint64_t off = 12;
      for (uint64_t i = 0; i < n; ++i) off += encoded_size(elem, p + off);
      return off;
    }
    default: return value_type_size(type);
  }
}

Value Value::element_at(const uint8_t* p) const {
  return detail::ValueBuilder::decode(array_type_, p, file_, key_, true);
}

std::string Value::type_description() const {
  if (!is_array()) return std::string(value_type_name(type_));
  return "array of " + std::string(value_type_name(array_type_));
}

void Value::type_error(std::string_view expected) const {
  throw Error(*file_ + ": metadata key " + quote_name(key_) + (is_element_ ? " element" : "") + " has type " +
              type_description() + ", expected " + std::string(expected));
}

void Value::require_array() const {
  if (!is_array()) type_error("an array");
}

namespace {

// An integer value of any GGUF integer type, widened without loss.
struct WideInt {
  bool negative;
  uint64_t u;  // valid when !negative
  int64_t s;   // valid when negative
};

WideInt read_wide(ValueType type, const uint8_t* p) {
  switch (type) {
    case ValueType::U8: return {false, load<uint8_t>(p), 0};
    case ValueType::U16: return {false, load<uint16_t>(p), 0};
    case ValueType::U32: return {false, load<uint32_t>(p), 0};
    case ValueType::U64: return {false, load<uint64_t>(p), 0};
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: {
      int64_t s = type == ValueType::I8    ? load<int8_t>(p)
                  : type == ValueType::I16 ? load<int16_t>(p)
                  : type == ValueType::I32 ? load<int32_t>(p)
                                           : load<int64_t>(p);
      if (s < 0) return {true, 0, s};
      return {false, static_cast<uint64_t>(s), 0};
    }
    default: return {false, 0, 0};
  }
}

template <typename T>
bool narrow(const WideInt& w, T& out) {
  if (w.negative) {
    if constexpr (std::is_unsigned_v<T>) {
      return false;
    } else {
      if (w.s < static_cast<int64_t>(std::numeric_limits<T>::min())) return false;
      out = static_cast<T>(w.s);
      return true;
    }
  }
  if (w.u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  out = static_cast<T>(w.u);
  return true;
}

std::string wide_string(const WideInt& w) { return w.negative ? std::to_string(w.s) : std::to_string(w.u); }

}  // namespace

template <typename T>
T Value::integer_as(std::string_view name) const {
  if (!is_integer_type(type_)) type_error(name);
  T out{};
  const WideInt w = read_wide(type_, data_);
  if (!narrow(w, out)) {
    throw Error(*file_ + ": metadata key " + quote_name(key_) + (is_element_ ? " element" : "") + " value " +
                wide_string(w) + " does not fit in " + std::string(name));
  }
  return out;
}

uint8_t Value::as_u8() const { return integer_as<uint8_t>("u8"); }
int8_t Value::as_i8() const { return integer_as<int8_t>("i8"); }
uint16_t Value::as_u16() const { return integer_as<uint16_t>("u16"); }
int16_t Value::as_i16() const { return integer_as<int16_t>("i16"); }
uint32_t Value::as_u32() const { return integer_as<uint32_t>("u32"); }
int32_t Value::as_i32() const { return integer_as<int32_t>("i32"); }
uint64_t Value::as_u64() const { return integer_as<uint64_t>("u64"); }
int64_t Value::as_i64() const { return integer_as<int64_t>("i64"); }

float Value::as_f32() const {
  if (type_ == ValueType::F32) return load<float>(data_);
  if (type_ == ValueType::F64) return static_cast<float>(load<double>(data_));
  type_error("f32");
}

double Value::as_f64() const {
  if (type_ == ValueType::F64) return load<double>(data_);
  if (type_ == ValueType::F32) return load<float>(data_);
  type_error("f64");
}

bool Value::as_bool() const {
  if (type_ != ValueType::BOOL) type_error("bool");
  return data_[0] != 0;
}

std::string_view Value::as_string() const {
  if (type_ != ValueType::STRING) type_error("string");
  return {reinterpret_cast<const char*>(data_), static_cast<size_t>(size_)};
}

ValueType Value::array_type() const {
  require_array();
  return array_type_;
}

uint64_t Value::size() const {
  require_array();
  return size_;
}

Value Value::element(uint64_t i) const {
  require_array();
  if (i >= size_) {
    throw Error(*file_ + ": metadata key " + quote_name(key_) + ": element " + std::to_string(i) +
                " requested, the array has " + std::to_string(size_));
  }
  const uint8_t* p = data_;
  if (const size_t sz = value_type_size(array_type_); sz != 0) {
    p += i * sz;
  } else {
    for (uint64_t k = 0; k < i; ++k) p += encoded_size(array_type_, p);
  }
  return element_at(p);
}

template <typename T>
std::vector<T> Value::integer_array_as(std::string_view name) const {
  require_array();
  if (!is_integer_type(array_type_)) type_error("array of " + std::string(name));
  std::vector<T> out(static_cast<size_t>(size_));
  const size_t sz = value_type_size(array_type_);
  if (sz == sizeof(T) && std::is_signed_v<T> == (array_type_ == ValueType::I8 || array_type_ == ValueType::I16 ||
                                                  array_type_ == ValueType::I32 || array_type_ == ValueType::I64)) {
    if (!out.empty()) std::memcpy(out.data(), data_, out.size() * sizeof(T));
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const WideInt w = read_wide(array_type_, data_ + i * sz);
    if (!narrow(w, out[i])) {
      throw Error(*file_ + ": metadata key " + quote_name(key_) + " element " + std::to_string(i) + " value " +
                  wide_string(w) + " does not fit in " + std::string(name));
    }
  }
  return out;
}

std::vector<uint8_t> Value::array_u8() const { return integer_array_as<uint8_t>("u8"); }
std::vector<uint32_t> Value::array_u32() const { return integer_array_as<uint32_t>("u32"); }
std::vector<int32_t> Value::array_i32() const { return integer_array_as<int32_t>("i32"); }
std::vector<uint64_t> Value::array_u64() const { return integer_array_as<uint64_t>("u64"); }
std::vector<int64_t> Value::array_i64() const { return integer_array_as<int64_t>("i64"); }

std::vector<float> Value::array_f32() const {
  require_array();
  std::vector<float> out(static_cast<size_t>(size_));
  if (array_type_ == ValueType::F32) {
    if (!out.empty()) std::memcpy(out.data(), data_, out.size() * sizeof(float));
  } else if (array_type_ == ValueType::F64) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(load<double>(data_ + 8 * i));
  } else {
    type_error("array of f32");
  }
  return out;
}

std::vector<double> Value::array_f64() const {
  require_array();
  std::vector<double> out(static_cast<size_t>(size_));
  if (array_type_ == ValueType::F64) {
    if (!out.empty()) std::memcpy(out.data(), data_, out.size() * sizeof(double));
  } else if (array_type_ == ValueType::F32) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = load<float>(data_ + 4 * i);
  } else {
    type_error("array of f64");
  }
  return out;
}

std::vector<bool> Value::array_bool() const {
  require_array();
  if (array_type_ != ValueType::BOOL) type_error("array of bool");
  std::vector<bool> out(static_cast<size_t>(size_));
  for (size_t i = 0; i < out.size(); ++i) out[i] = data_[i] != 0;
  return out;
}

std::vector<std::string_view> Value::array_strings() const {
  require_array();
  if (array_type_ != ValueType::STRING) type_error("array of string");
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(size_));
  const uint8_t* p = data_;
  for (uint64_t i = 0; i < size_; ++i) {
    const uint64_t len = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(len));
    p += 8 + len;
  }
  return out;
}

std::span<const uint8_t> Value::raw() const {
  uint64_t n;
  switch (type_) {
    case ValueType::STRING: n = size_; break;
    case ValueType::ARRAY: n = encoded_size(ValueType::ARRAY, data_ - 12) - 12; break;
    default: n = value_type_size(type_); break;
  }
  return {data_, static_cast<size_t>(n)};
}

// ---------------------------------------------------------------------------
// File

struct File::Impl {
  std::optional<FileMap> map;
  std::string name;
  std::span<const uint8_t> bytes;
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<MetadataEntry> metadata;
  std::unordered_map<std::string_view, size_t> key_index;  // keys view the mapping
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> tensor_index;  // names view the mapping
  uint64_t tensor_bytes = 0;
  uint64_t parameters = 0;
  std::vector<Shard> shards;                   // this file first, then the rest of its set
  std::vector<std::unique_ptr<Impl>> others;  // the other shards' mappings (their views stay valid)
  std::vector<std::string> missing;           // shards open_partial found absent
};

namespace {

// Validates the whole header/metadata/tensor directory, filling the Impl.
// Every read goes through need(), so no byte outside `bytes` is touched.
class Parser {
 public:
  Parser(File::Impl& f) : f_(f), size_(f.bytes.size()) {}

  void run() {
    parse_header();
    parse_metadata();
    parse_alignment();
    parse_tensor_infos();
    check_data();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::string where = where_;
    if (!element_path_.empty()) {
      where += ": array element ";
      for (uint64_t i : element_path_) where += "[" + std::to_string(i) + "]";
    }
    throw Error(f_.name + ": " + where + ": " + what);
  }

  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail("truncated: " + std::string(what) + " (" + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
           ") runs past the end of the file (" + std::to_string(size_) + " bytes)");
    }
  }

  const uint8_t* at() const { return f_.bytes.data() + pos_; }

  uint32_t read_u32(std::string_view what) {
    need(4, what);
    const uint32_t v = load<uint32_t>(at());
    pos_ += 4;
    return v;
  }

  uint64_t read_u64(std::string_view what) {
    need(8, what);
    const uint64_t v = load<uint64_t>(at());
    pos_ += 8;
    return v;
  }

  std::string_view read_string(std::string_view what) {
    const uint64_t len = read_u64(std::string(what) + " length");
    if (len > remaining()) {
      fail(std::string(what) + " length " + std::to_string(len) + " at offset " + std::to_string(pos_ - 8) +
           " runs past the end of the file (" + std::to_string(remaining()) + " bytes left)");
    }
    std::string_view s(reinterpret_cast<const char*>(at()), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  void parse_header() {
    where_ = "header";
    if (size_ >= 4 && load<uint32_t>(f_.bytes.data()) != kMagic) {
      std::string shown;
      for (int i = 0; i < 4; ++i) {
        const char c = static_cast<char>(f_.bytes[i]);
        shown += (c >= 0x20 && c < 0x7f) ? c : '?';
      }
      fail("bad magic '" + shown + "', expected 'GGUF': not a GGUF file");
    }
    if (size_ < 24) {
      fail("truncated: the file is " + std::to_string(size_) + " bytes, a GGUF header needs 24");
    }
    pos_ = 4;
    f_.version = read_u32("version");
    if (f_.version != kVersion) {
      if (f_.version == 0x03000000u) {  // 3 stored big-endian
        fail("version field reads 0x03000000: a big-endian GGUF file; only little-endian GGUF v3 is supported");
      }
      fail("GGUF version " + std::to_string(f_.version) + " is not supported; only version 3 is" +
           (f_.version < kVersion ? " (re-convert the model with a current converter)" : ""));
    }
    n_tensors_ = read_u64("tensor count");
    n_kv_ = read_u64("metadata count");
    // Reject counts the file cannot hold before reserving anything for them.
    constexpr uint64_t kMinKv = 8 + 4 + 1;             // key length, value type, 1-byte value
    constexpr uint64_t kMinTensor = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, one dim, type, offset
    if (n_kv_ > remaining() / kMinKv) {
      fail("metadata count " + std::to_string(n_kv_) + " needs at least " + std::to_string(kMinKv) +
           " bytes per entry, but only " + std::to_string(remaining()) +
           " bytes follow the header (truncated or corrupt file)");
    }
    if (n_tensors_ > remaining() / kMinTensor) {
      fail("tensor count " + std::to_string(n_tensors_) + " needs at least " + std::to_string(kMinTensor) +
           " bytes per tensor info, but only " + std::to_string(remaining()) +
           " bytes follow the header (truncated or corrupt file)");
    }
  }

  void parse_metadata() {
    f_.metadata.reserve(static_cast<size_t>(n_kv_));
    f_.key_index.reserve(static_cast<size_t>(n_kv_));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      where_ = "metadata entry " + std::to_string(i) + " of " + std::to_string(n_kv_);
      const std::string_view key = read_string("key");
      if (key.empty()) fail("key is empty");
      if (!is_valid_utf8(key)) fail("key " + quote_name(key) + " is not valid UTF-8");
      where_ = "metadata key " + quote_name(key);
      if (auto it = f_.key_index.find(key); it != f_.key_index.end()) {
        fail("duplicate key (first defined by metadata entry " + std::to_string(it->second) + ")");
      }
      const uint32_t type_id = read_u32("value type");
      if (!valid_value_type(type_id)) fail("unknown value type id " + std::to_string(type_id));
      const auto type = static_cast<ValueType>(type_id);
      const uint8_t* start = at();
      check_value(type, 0);
      f_.key_index.emplace(key, f_.metadata.size());
      f_.metadata.push_back({key, detail::ValueBuilder::decode(type, start, &f_.name, key, false)});
    }
  }

  // Walks one encoded value, checking every length against the bytes left.
  // `depth` is the number of arrays around this value.
  void check_value(ValueType type, uint32_t depth) {
    switch (type) {
      case ValueType::STRING: {
        const uint64_t len = read_u64("string length");
        if (len > remaining()) {
          fail("string length " + std::to_string(len) + " at offset " + std::to_string(pos_ - 8) +
               " runs past the end of the file (" + std::to_string(remaining()) + " bytes left)");
        }
        pos_ += len;
        return;
      }
      case ValueType::ARRAY: {
        if (depth + 1 > kMaxArrayDepth) {
          fail("arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
        }
        const uint32_t elem_id = read_u32("array element type");
        if (!valid_value_type(elem_id)) fail("unknown array element type id " + std::to_string(elem_id));
        const auto elem = static_cast<ValueType>(elem_id);
        const uint64_t count = read_u64("array count");
        const uint64_t min = min_encoded_size(elem);
        if (count > remaining() / min) {
          fail("array of " + std::to_string(count) + " " + std::string(value_type_name(elem)) +
               " elements needs at least " + std::to_string(min) + " bytes each, only " +
               std::to_string(remaining()) + " bytes left");
        }
        if (elem == ValueType::STRING || elem == ValueType::ARRAY || elem == ValueType::BOOL) {
          element_path_.push_back(0);
          for (uint64_t i = 0; i < count; ++i) {
            element_path_.back() = i;
            check_value(elem, depth + 1);
          }
          element_path_.pop_back();
        } else {
          pos_ += count * min;
        }
        return;
      }
      case ValueType::BOOL: {
        need(1, "bool value");
        const uint8_t b = *at();
        if (b > 1) fail("bool value is " + std::to_string(b) + ", must be 0 or 1");
        pos_ += 1;
        return;
      }
      default:
        need(value_type_size(type), std::string(value_type_name(type)) + " value");
        pos_ += value_type_size(type);
        return;
    }
  }

  void parse_alignment() {
    auto it = f_.key_index.find(kAlignmentKey);
    if (it == f_.key_index.end()) return;
    where_ = "metadata key " + quote_name(kAlignmentKey);
    const Value& v = f_.metadata[it->second].value;
    if (v.type() != ValueType::U32) fail("has type " + v.type_description() + ", must be u32");
    const uint32_t a = v.as_u32();
    if (a == 0 || (a & (a - 1)) != 0) fail("alignment " + std::to_string(a) + " is not a power of two");
    f_.alignment = a;
  }

  void parse_tensor_infos() {
    f_.tensors.reserve(static_cast<size_t>(n_tensors_));
    f_.tensor_index.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      where_ = "tensor info " + std::to_string(i) + " of " + std::to_string(n_tensors_);
      const std::string_view name = read_string("name");
      if (name.empty()) fail("name is empty");
      if (!is_valid_utf8(name)) fail("name " + quote_name(name) + " is not valid UTF-8");
      where_ = "tensor info " + quote_name(name);
      if (name.size() > kMaxTensorNameBytes) {
        fail("name is " + std::to_string(name.size()) + " bytes, ggml allows at most " +
             std::to_string(kMaxTensorNameBytes));
      }
      if (auto it = f_.tensor_index.find(name); it != f_.tensor_index.end()) {
        fail("duplicate tensor name (first used by tensor info " + std::to_string(it->second) + ")");
      }

      TensorInfo t{};
      t.name = std::string(name);
      const uint32_t n_dims = read_u32("n_dims");
      if (n_dims == 0) fail("n_dims is 0; a tensor has 1 to " + std::to_string(kMaxDims) + " dimensions");
      if (n_dims > kMaxDims) {
        fail("n_dims is " + std::to_string(n_dims) + "; ggml supports at most " + std::to_string(kMaxDims) +
             " (GGML_MAX_DIMS)");
      }
      need(8ull * n_dims, "dimensions");
      t.ne.resize(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) t.ne[d] = read_u64("dimension");
      uint64_t n = 1;
      bool overflow = false;
      for (uint32_t d = 0; d < n_dims; ++d) {
        if (t.ne[d] == 0) fail("dimension " + std::to_string(d) + " is 0");
        overflow = overflow || __builtin_mul_overflow(n, t.ne[d], &n);
      }
      if (overflow || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("element count of shape " + shape_string(t.ne) + " overflows int64");
      }
      t.n_elements = n;

      const uint32_t type_id = read_u32("type");
      const GgmlTypeTraits* traits = ggml_type_traits(type_id);
      if (traits == nullptr) fail("unknown ggml type id " + std::to_string(type_id));
      t.type = traits->type;
      if (t.ne[0] % traits->block_elems != 0) {
        fail("row length ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
             std::string(traits->name) + " block size " + std::to_string(traits->block_elems));
      }
      const std::optional<uint64_t> nbytes = ggml_nbytes(t.type, n);
      if (!nbytes) {
        fail("byte size of shape " + shape_string(t.ne) + " as " + std::string(traits->name) + " overflows 64 bits");
      }
      t.nbytes = *nbytes;

      t.offset = read_u64("offset");
      if (t.offset % f_.alignment != 0) {
        fail("offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(f_.alignment));
      }
      f_.tensor_index.emplace(name, f_.tensors.size());
      f_.tensors.push_back(std::move(t));
    }
  }

  void check_data() {
    // pos_ <= size_ < 2^63 and alignment <= 2^31, so this cannot overflow.
    f_.data_offset = (pos_ + f_.alignment - 1) / f_.alignment * f_.alignment;
    if (f_.tensors.empty()) return;
    where_ = "data";
    if (f_.data_offset > size_) {
      fail("the data section starts at offset " + std::to_string(f_.data_offset) + ", past the end of the file (" +
           std::to_string(size_) + " bytes)");
    }
    const uint64_t data_size = size_ - f_.data_offset;
    for (TensorInfo& t : f_.tensors) {
      if (t.offset > data_size || t.nbytes > data_size - t.offset) {
        where_ = "data: tensor " + quote_name(t.name);
        fail("bytes [" + std::to_string(t.offset) + ", " + std::to_string(t.offset) + " + " + std::to_string(t.nbytes) +
             ") of the data section run past the end of the file (the data section has " + std::to_string(data_size) +
             " bytes)");
      }
      t.file_offset = f_.data_offset + t.offset;
      t.data = f_.bytes.data() + t.file_offset;
      f_.tensor_bytes += t.nbytes;
      f_.parameters += t.n_elements;
    }
    std::vector<size_t> order(f_.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f_.tensors[a].offset < f_.tensors[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& a = f_.tensors[order[i - 1]];
      const TensorInfo& b = f_.tensors[order[i]];
      if (a.offset + a.nbytes > b.offset) {
        fail("tensors " + quote_name(a.name) + " [" + std::to_string(a.offset) + ", " +
             std::to_string(a.offset + a.nbytes) + ") and " + quote_name(b.name) + " [" + std::to_string(b.offset) +
             ", " + std::to_string(b.offset + b.nbytes) + ") overlap");
      }
    }
  }

  File::Impl& f_;
  const uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::string where_;
  std::vector<uint64_t> element_path_;
};

}  // namespace

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::parse_into(std::unique_ptr<Impl> impl) {
  Parser(*impl).run();
  impl->shards.push_back(Shard{impl->name, impl->bytes, impl->data_offset, impl->tensors.size()});
  return File(std::move(impl));
}

std::unique_ptr<File::Impl> File::map_and_parse(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->map.emplace(path);
  impl->name = path;
  impl->bytes = impl->map->bytes();
  return std::move(parse_into(std::move(impl)).impl_);
}

File File::open_one(const std::string& path) { return File(map_and_parse(path)); }

File File::open(const std::string& path) {
  File f(map_and_parse(path));
  f.open_other_shards(false);
  return f;
}

File File::open_partial(const std::string& path) {
  File f(map_and_parse(path));
  f.open_other_shards(true);
  return f;
}

const std::vector<std::string>& File::missing_shards() const { return impl_->missing; }

namespace {

const Value* find_key(const File::Impl& f, std::string_view key);

std::string shard_words(uint32_t index, uint32_t count) {
  return "shard " + std::to_string(index + 1) + " of " + std::to_string(count);
}

}  // namespace

void File::open_other_shards(bool allow_missing) {
  Impl& f = *impl_;
  const Value* count_value = find(kSplitCountKey);
  if (count_value == nullptr) return;
  const uint32_t count = count_value->as_u16();
  if (count <= 1) return;  // gguf-split's merge leaves split.count = 0 behind
  const uint32_t no = get(kSplitNoKey).as_u16();
  if (no != 0) {
    const std::optional<std::string> prefix = shard_prefix(f.name, no, count);
    throw Error(f.name + ": " + shard_words(no, count) + " of a split model; open its first shard" +
                (prefix ? ", " + shard_path(*prefix, 0, count) : std::string()));
  }
  const std::optional<std::string> prefix = shard_prefix(f.name, 0, count);
  if (!prefix) {
    throw Error(f.name + ": the model is split in " + std::to_string(count) +
                " files, and its first file must be named PREFIX" + shard_path("", 0, count) +
                " (the others are found by that name)");
  }
  const uint64_t expected_tensors = get(kSplitTensorsCountKey).as_u64();
  for (uint32_t i = 1; i < count; ++i) {
    const std::string path = shard_path(*prefix, i, count);
    if (allow_missing && !std::filesystem::exists(path)) {
      f.missing.push_back(path);
      continue;
    }
    std::unique_ptr<Impl> part;
    try {
      part = map_and_parse(path);
    } catch (const Error& e) {
      throw Error(f.name + ": " + shard_words(i, count) + ": " + e.what());
    }
    for (std::string_view key : {kSplitNoKey, kSplitCountKey}) {
      const Value* v = find_key(*part, key);
      const uint32_t want = key == kSplitNoKey ? i : count;
      if (v == nullptr) throw Error(path + ": metadata key " + quote_name(key) + " missing (" + shard_words(i, count) + ")");
      if (v->as_u16() != want) {
        throw Error(path + ": metadata key " + quote_name(key) + " is " + std::to_string(v->as_u16()) + ", expected " +
                    std::to_string(want) + " (" + shard_words(i, count) + " of " + f.name + ")");
      }
    }
    const size_t base = f.tensors.size();
    for (const auto& [name, index] : part->tensor_index) {
      if (auto it = f.tensor_index.find(name); it != f.tensor_index.end()) {
        throw Error(path + ": tensor " + quote_name(name) + " is also in " +
                    shard_words(f.tensors[it->second].shard, count) + ", " + f.shards[f.tensors[it->second].shard].path);
      }
      f.tensor_index.emplace(name, base + index);
    }
    for (TensorInfo& t : part->tensors) {
      t.shard = static_cast<uint32_t>(f.shards.size());  // its index in shards()
      f.tensors.push_back(std::move(t));
    }
    f.tensor_bytes += part->tensor_bytes;
    f.parameters += part->parameters;
    f.shards.push_back(part->shards.front());
    f.others.push_back(std::move(part));
  }
  if (f.missing.empty() && f.tensors.size() != expected_tensors) {
    throw Error(f.name + ": the " + std::to_string(count) + " shards hold " + std::to_string(f.tensors.size()) +
                " tensors, but " + std::string(kSplitTensorsCountKey) + " says " + std::to_string(expected_tensors));
  }
}

std::string shard_path(std::string_view prefix, uint32_t index, uint32_t count) {
  char tail[40];
  std::snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", index + 1, count);
  return std::string(prefix) + tail;
}

std::optional<std::string> shard_prefix(std::string_view path, uint32_t index, uint32_t count) {
  const std::string tail = shard_path("", index, count);
  if (path.size() <= tail.size() || !path.ends_with(tail)) return std::nullopt;
  return std::string(path.substr(0, path.size() - tail.size()));
}

File File::parse(std::span<const uint8_t> bytes, std::string display_name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(display_name);
  impl->bytes = bytes;
  return parse_into(std::move(impl));
}

const std::string& File::path() const { return impl_->name; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const {
  uint64_t total = 0;
  for (const Shard& s : impl_->shards) total += s.bytes.size();
  return total;
}
std::span<const uint8_t> File::bytes() const { return impl_->bytes; }
const std::vector<Shard>& File::shards() const { return impl_->shards; }
const std::vector<MetadataEntry>& File::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }
uint64_t File::tensor_data_bytes() const { return impl_->tensor_bytes; }
uint64_t File::parameter_count() const { return impl_->parameters; }

namespace {

const Value* find_key(const File::Impl& f, std::string_view key) {
  auto it = f.key_index.find(key);
  return it == f.key_index.end() ? nullptr : &f.metadata[it->second].value;
}

}  // namespace

const Value* File::find(std::string_view key) const {
  auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const Value& File::get(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) throw Error(impl_->name + ": metadata key " + quote_name(key) + " missing");
  return *v;
}

uint32_t File::get_u32(std::string_view key) const { return get(key).as_u32(); }
int32_t File::get_i32(std::string_view key) const { return get(key).as_i32(); }
uint64_t File::get_u64(std::string_view key) const { return get(key).as_u64(); }
int64_t File::get_i64(std::string_view key) const { return get(key).as_i64(); }
float File::get_f32(std::string_view key) const { return get(key).as_f32(); }
double File::get_f64(std::string_view key) const { return get(key).as_f64(); }
bool File::get_bool(std::string_view key) const { return get(key).as_bool(); }
std::string File::get_string(std::string_view key) const { return std::string(get(key).as_string()); }

const Value& File::get_array(std::string_view key) const {
  const Value& v = get(key);
  v.array_type();  // throws when not an array
  return v;
}

std::optional<uint32_t> File::find_u32(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_u32()) : std::nullopt;
}
std::optional<int32_t> File::find_i32(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_i32()) : std::nullopt;
}
std::optional<uint64_t> File::find_u64(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_u64()) : std::nullopt;
}
std::optional<int64_t> File::find_i64(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_i64()) : std::nullopt;
}
std::optional<float> File::find_f32(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_f32()) : std::nullopt;
}
std::optional<double> File::find_f64(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_f64()) : std::nullopt;
}
std::optional<bool> File::find_bool(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(v->as_bool()) : std::nullopt;
}
std::optional<std::string> File::find_string(std::string_view key) const {
  const Value* v = find(key);
  return v ? std::optional(std::string(v->as_string())) : std::nullopt;
}
const Value* File::find_array(std::string_view key) const {
  const Value* v = find(key);
  if (v) v->array_type();
  return v;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) throw Error(impl_->name + ": tensor " + quote_name(name) + " missing");
  return *t;
}

}  // namespace ds4::gguf
