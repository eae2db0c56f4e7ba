// GGUF v3 reader: the file is mapped read-only, the header, metadata and
// tensor directory are validated once at open, and metadata values are views
// decoded on demand from the mapping (nothing big is copied).
//
// What a well-formed file must satisfy (anything else throws ONE ds4::Error
// "<file>: <section> [<key or tensor>]: <what is wrong>", where section is
// header / metadata / tensor info / data):
//  - magic "GGUF", version 3, little-endian.
//  - every count and length fits in the bytes that remain in the file.
//  - metadata keys are non-empty, valid UTF-8 and unique; value type ids are
//    0..12; bools are 0 or 1; arrays nest at most kMaxArrayDepth deep (ggml
//    itself reads no nested arrays; gguf-py writes them). String values are
//    NOT checked for UTF-8: the vocabulary of a byte-level tokenizer may hold
//    any bytes, and the consumer that needs text checks it.
//  - general.alignment, when present, is a u32 power of two (ggml's rule).
//  - tensor names are non-empty, valid UTF-8, shorter than 64 bytes (ggml's
//    GGML_MAX_NAME) and unique; 1..4 dimensions (ggml's GGML_MAX_DIMS; ggml
//    also reads 0, but no writer emits it); every dimension >= 1 (ggml allows
//    empty tensors, no model has one, and a 0 is almost always corruption);
//    the element count fits in int64 (ggml's limit); the type id is a known
//    ggml type; ne[0] is a whole number of blocks; the byte size fits in 64
//    bits.
//  - each offset is a multiple of the alignment; each tensor's bytes lie inside
//    the file and no two tensors overlap. (ggml additionally insists the
//    tensors are packed in directory order; we do not need that.)
// The data section starts at align_up(end of tensor infos, alignment); a
// tensor's file offset is data_offset() + offset.
//
// Shard sets (llama.cpp's gguf-split: PREFIX-00001-of-0000N.gguf ... ): the
// first file holds the metadata and split.count = N > 1, split.no = 0 and
// split.tensors.count; every shard holds split.no = its index and split.count
// = N, and the tensor directory is the union of the shards' directories, in
// shard order. File::open of a first shard opens the whole set (each file
// validated as above, each mapped on its own) and checks the shard numbers and
// counts, the tensor total, and that no tensor name repeats across shards; it
// refuses a later shard, naming the first. A TensorInfo says which shard holds
// it; metadata() is the first file's (the others carry only split.* keys).
//
// A File is immutable once opened, so any number of threads may read it. Its
// Values, TensorInfos and the views they hand out stay valid while the File
// lives, also across moves of the File. (As with any mapping, a file that
// another process truncates while mapped faults on access.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/ggml_type.h"

namespace ds4::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;            // ggml's GGML_MAX_DIMS
inline constexpr uint32_t kMaxArrayDepth = 8;      // arrays inside arrays, counting the outermost
inline constexpr size_t kMaxTensorNameBytes = 63;  // ggml's GGML_MAX_NAME minus the terminator
inline constexpr std::string_view kAlignmentKey = "general.alignment";
// llama.cpp's shard keys (LLM_KV_SPLIT_*): u16, u16, i32 as gguf-split writes them.
inline constexpr std::string_view kSplitNoKey = "split.no";
inline constexpr std::string_view kSplitCountKey = "split.count";
inline constexpr std::string_view kSplitTensorsCountKey = "split.tensors.count";
// A shard set holds at most this many files (split.count is a u16).
inline constexpr uint32_t kMaxShards = 65535;

// The name of shard `index` (0-based) of `count`, as llama.cpp's
// llama_split_path: "PREFIX-%05d-of-%05d.gguf" with index + 1.
std::string shard_path(std::string_view prefix, uint32_t index, uint32_t count);
// PREFIX when `path` is shard_path(PREFIX, index, count); nullopt otherwise.
std::optional<std::string> shard_prefix(std::string_view path, uint32_t index, uint32_t count);

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// "u8", "i32", "f64", "bool", "string", "array"; "type 99" for ids outside the enum.
std::string_view value_type_name(ValueType type);
// Encoded bytes of one scalar of `type`; 0 for STRING and ARRAY.
size_t value_type_size(ValueType type);
bool is_integer_type(ValueType type);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points
// past U+10FFFF).
bool is_valid_utf8(std::string_view s);
// A key or tensor name as messages show it: in single quotes, control bytes,
// quotes, backslashes (and every byte >= 0x80 when `s` is not UTF-8) escaped
// as \xNN, cut after 200 bytes; the result is always one printable line.
std::string quote_name(std::string_view s);

namespace detail {
struct ValueBuilder;
}

// A metadata value inside the mapping of a File; valid while the File lives.
// Accessors throw ds4::Error naming the file and key on a type mismatch.
class Value {
 public:
  ValueType type() const { return type_; }
  bool is_array() const { return type_ == ValueType::ARRAY; }
  // "u32", "string", "array of string", "array of array".
  std::string type_description() const;

  // Integer getters accept any integer type whose value fits the result
  // (a u32 key read as u64, an i32 array read as u32 when non-negative).
  uint8_t as_u8() const;
  int8_t as_i8() const;
  uint16_t as_u16() const;
  int16_t as_i16() const;
  uint32_t as_u32() const;
  int32_t as_i32() const;
  uint64_t as_u64() const;
  int64_t as_i64() const;
  // Float getters accept f32 and f64 (f64 is rounded to float by as_f32).
  float as_f32() const;
  double as_f64() const;
  bool as_bool() const;
  std::string_view as_string() const;  // bytes as stored, not checked for UTF-8

  // Arrays (each throws when the value is not an array).
  ValueType array_type() const;
  uint64_t size() const;
  // O(1) for fixed-size elements; O(i) for string and array elements, so
  // walk those with array_strings() or for_each_element().
  Value element(uint64_t i) const;
  // Calls f(const Value&) for every element in order, O(total bytes). When f
  // returns bool, returning false stops the walk.
  template <typename F>
  void for_each_element(F&& f) const {
    const uint64_t n = size();
    const uint8_t* p = data_;
    for (uint64_t i = 0; i < n; ++i) {
      const Value v = element_at(p);
      if constexpr (std::is_same_v<std::invoke_result_t<F&, const Value&>, bool>) {
        if (!f(v)) return;
      } else {
        f(v);
      }
      p += encoded_size(array_type_, p);
    }
  }
  // Typed copies of a whole array, with the same conversions as the scalar getters.
  std::vector<uint8_t> array_u8() const;
  std::vector<uint32_t> array_u32() const;
  std::vector<int32_t> array_i32() const;
  std::vector<uint64_t> array_u64() const;
  std::vector<int64_t> array_i64() const;
  std::vector<float> array_f32() const;
  std::vector<double> array_f64() const;
  std::vector<bool> array_bool() const;
  std::vector<std::string_view> array_strings() const;  // views into the mapping

  // The encoded payload: a scalar's little-endian bytes, a string's bytes, or
  // an array's elements (after the element type and count).
  std::span<const uint8_t> raw() const;

  std::string_view key() const { return key_; }

 private:
  friend struct detail::ValueBuilder;
  Value() = default;

  // Encoded size of one element/value of `type` starting at p; the bytes were
  // validated when the file was parsed.
  static uint64_t encoded_size(ValueType type, const uint8_t* p);
  Value element_at(const uint8_t* p) const;
  [[noreturn]] void type_error(std::string_view expected) const;
  template <typename T>
  T integer_as(std::string_view name) const;
  template <typename T>
  std::vector<T> integer_array_as(std::string_view name) const;
  void require_array() const;

  ValueType type_ = ValueType::U8;
  ValueType array_type_ = ValueType::U8;  // arrays only
  const uint8_t* data_ = nullptr;         // scalar bytes, string bytes, or first array element
  uint64_t size_ = 0;                     // string byte length or array element count
  const std::string* file_ = nullptr;     // for messages
  std::string_view key_;                  // for messages
  bool is_element_ = false;               // for messages
};

struct MetadataEntry {
  std::string_view key;  // inside the mapping
  Value value;
};

struct TensorInfo {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;  // 1..4 dims as stored; ne[0] is the contiguous row length
  uint64_t offset;           // relative to its shard's data section
  uint64_t file_offset;      // absolute within its shard's file: the shard's data_offset + offset
  uint64_t n_elements;
  uint64_t nbytes;
  const uint8_t* data;  // file_offset inside its shard's mapping
  uint32_t shard;       // index into File::shards(); 0 for a single file

  uint32_t n_dims() const { return static_cast<uint32_t>(ne.size()); }
  // ne[i], and 1 for every dimension past the stored ones (ggml's convention).
  uint64_t dim(size_t i) const { return i < ne.size() ? ne[i] : 1; }
  uint64_t row_bytes() const { return nbytes / (n_elements / ne[0]); }
  uint64_t n_rows() const { return n_elements / ne[0]; }
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
};

// One file of a File: the whole of it for a single file.
struct Shard {
  std::string path;                // the path or display name
  std::span<const uint8_t> bytes;  // the whole file
  uint64_t data_offset;            // absolute start of its data section
  uint64_t tensor_count;           // tensors in its directory
};

class File {
 public:
  // Maps and validates `path`, and the rest of its shard set when it is the
  // first shard of one; throws ds4::Error (a later shard is refused, naming
  // the first).
  static File open(const std::string& path);
  // The same, but a shard whose file does not exist is left out (a pipeline
  // stage's host keeps the first shard and its own): tensors() holds the
  // present shards' tensors, missing_shards() names the others, and the
  // tensor total is not checked. A shard that exists is validated as ever.
  static File open_partial(const std::string& path);
  // Maps and validates `path` alone, whatever its split.* keys say (a tool
  // looking at one shard).
  static File open_one(const std::string& path);
  // Validates bytes owned by the caller (kept alive by the caller, not copied);
  // display_name stands in for the path in messages.
  static File parse(std::span<const uint8_t> bytes, std::string display_name);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const;  // the (first) path or display name
  uint32_t version() const;
  uint64_t alignment() const;    // the first file's
  uint64_t data_offset() const;  // absolute start of the first file's data section
  uint64_t file_size() const;    // bytes of all its files together
  std::span<const uint8_t> bytes() const;  // the first file, whole (the only one unless split)
  // Its files in shard order; one entry unless it is a shard set.
  const std::vector<Shard>& shards() const;
  bool is_split() const { return shards().size() > 1 || !missing_shards().empty(); }
  // The paths of the set's shards open_partial found absent (none otherwise).
  const std::vector<std::string>& missing_shards() const;

  // Metadata, in file order.
  const std::vector<MetadataEntry>& metadata() const;
  const Value* find(std::string_view key) const;  // nullptr when absent
  const Value& get(std::string_view key) const;   // throws "<file>: metadata key 'k' missing"

  // Typed getters: throw when the key is missing or has an unsuitable type
  // (conversions as in Value: integers range-checked, floats f32 or f64).
  uint32_t get_u32(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  double get_f64(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  const Value& get_array(std::string_view key) const;
  // Same, but nullopt when the key is absent (a wrong type still throws).
  std::optional<uint32_t> find_u32(std::string_view key) const;
  std::optional<int32_t> find_i32(std::string_view key) const;
  std::optional<uint64_t> find_u64(std::string_view key) const;
  std::optional<int64_t> find_i64(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  std::optional<double> find_f64(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;
  const Value* find_array(std::string_view key) const;

  // Tensor directory, in file order.
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  const TensorInfo& tensor(std::string_view name) const;       // throws "<file>: tensor 'n' missing"
  uint64_t tensor_data_bytes() const;  // sum of nbytes, without padding
  uint64_t parameter_count() const;    // sum of n_elements

  struct Impl;  // opaque; defined in gguf.cpp

 private:
  explicit File(std::unique_ptr<Impl> impl);
  static File parse_into(std::unique_ptr<Impl> impl);
  static std::unique_ptr<Impl> map_and_parse(const std::string& path);
  void open_other_shards(bool allow_missing);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::gguf
