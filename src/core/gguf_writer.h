// GGUF v3 writer, byte-compatible with ggml's gguf_write_to_file: header,
// metadata in insertion order, tensor infos, zero padding to the alignment,
// then each tensor's bytes followed by zero padding to the alignment. Tensor
// offsets are assigned in insertion order, each one the padded end of the
// previous. Shapes are written as given (trailing 1s kept, as gguf-py does).
//
// Tensor data is streamed: write() asks each tensor for its bytes only when it
// reaches it, so a multi-GB file never sits in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"
#include "core/gguf.h"

namespace ds4::gguf {

// One metadata value, held in its GGUF encoding. Build with the named
// constructors; arrays may nest (up to kMaxArrayDepth) via array().
class MetaValue {
 public:
  static MetaValue u8(uint8_t v);
  static MetaValue i8(int8_t v);
  static MetaValue u16(uint16_t v);
  static MetaValue i16(int16_t v);
  static MetaValue u32(uint32_t v);
  static MetaValue i32(int32_t v);
  static MetaValue u64(uint64_t v);
  static MetaValue i64(int64_t v);
  static MetaValue f32(float v);
  static MetaValue f64(double v);
  static MetaValue boolean(bool v);
  static MetaValue string(std::string_view v);

  static MetaValue array_u8(std::span<const uint8_t> v);
  static MetaValue array_i8(std::span<const int8_t> v);
  static MetaValue array_u16(std::span<const uint16_t> v);
  static MetaValue array_i16(std::span<const int16_t> v);
  static MetaValue array_u32(std::span<const uint32_t> v);
  static MetaValue array_i32(std::span<const int32_t> v);
  static MetaValue array_u64(std::span<const uint64_t> v);
  static MetaValue array_i64(std::span<const int64_t> v);
  static MetaValue array_f32(std::span<const float> v);
  static MetaValue array_f64(std::span<const double> v);
  static MetaValue array_bool(const std::vector<bool>& v);
  static MetaValue array_string(std::span<const std::string> v);
  // Generic array: every element must have type `element_type` (for nested
  // arrays, ValueType::ARRAY; the inner arrays may differ in element type).
  // Throws ds4::Error on a mismatch or nesting past kMaxArrayDepth.
  static MetaValue array(ValueType element_type, const std::vector<MetaValue>& elements);
  // A copy of a value read from a File (e.g. metadata carried over when requantizing).
  static MetaValue copy_of(const Value& v);

  ValueType type() const { return type_; }
  // The encoded value as it follows the type id in the file (for an array:
  // element type, count, elements).
  std::span<const uint8_t> encoded() const { return encoded_; }
  uint32_t array_depth() const { return depth_; }  // 0 for scalars

 private:
  MetaValue(ValueType type, uint32_t depth) : type_(type), depth_(depth) {}
  template <typename T>
  static MetaValue scalar(ValueType type, T v);
  template <typename T>
  static MetaValue fixed_array(ValueType element_type, std::span<const T> v);

  ValueType type_;
  uint32_t depth_;
  std::vector<uint8_t> encoded_;
};

class Writer {
 public:
  // Throws ds4::Error when alignment is 0 or not a power of two. A
  // non-default alignment is recorded as the first metadata key,
  // general.alignment (u32).
  explicit Writer(uint32_t alignment = kDefaultAlignment);

  // Metadata in insertion order; setting an existing key replaces its value in
  // place. Keys must be non-empty valid UTF-8. general.alignment may only be
  // set to the constructor's alignment, as a u32.
  void set_u8(std::string key, uint8_t v);
  void set_i8(std::string key, int8_t v);
  void set_u16(std::string key, uint16_t v);
  void set_i16(std::string key, int16_t v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_u64(std::string key, uint64_t v);
  void set_i64(std::string key, int64_t v);
  void set_f32(std::string key, float v);
  void set_f64(std::string key, double v);
  void set_bool(std::string key, bool v);
  void set_string(std::string key, std::string v);
  void set_array_u8(std::string key, std::vector<uint8_t> v);
  void set_array_i8(std::string key, std::vector<int8_t> v);
  void set_array_u32(std::string key, std::vector<uint32_t> v);
  void set_array_i32(std::string key, std::vector<int32_t> v);
  void set_array_u64(std::string key, std::vector<uint64_t> v);
  void set_array_i64(std::string key, std::vector<int64_t> v);
  void set_array_f32(std::string key, std::vector<float> v);
  void set_array_f64(std::string key, std::vector<double> v);
  void set_array_bool(std::string key, std::vector<bool> v);
  void set_array_string(std::string key, std::vector<std::string> v);
  void set_value(std::string key, MetaValue v);
  // Copies a value read from another file (e.g. when requantizing).
  void set_value(std::string key, const Value& v);

  // Tensors in insertion order. ne[0] is the contiguous row length. `fill` is
  // called once per write(), in insertion order, with a zero-initialised
  // buffer of exactly ggml_nbytes(type, prod(ne)) bytes. Throws ds4::Error
  // (naming the tensor) on a duplicate or invalid name (empty, not UTF-8,
  // over 63 bytes), 0 or more than 4 dims, a zero dim, an element count past
  // int64, ne[0] not a whole number of blocks, or a byte size overflow.
  using Fill = std::function<void(std::span<uint8_t> dst)>;
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, Fill fill);
  // Same with the bytes given up front; their size must match exactly.
  void add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne, std::vector<uint8_t> bytes);

  // Same with the bytes viewed, not copied (a tensor of a mapped file being
  // split or merged): write() writes them straight from `bytes`, which must
  // stay valid until then; their size must match exactly.
  void add_tensor_view(std::string name, GgmlType type, std::vector<uint64_t> ne, std::span<const uint8_t> bytes);

  size_t metadata_count() const { return kv_.size(); }
  size_t tensor_count() const { return tensors_.size(); }
  uint32_t alignment() const { return alignment_; }
  uint64_t tensor_data_bytes() const;  // total, with padding

  // Writes `path`.tmp, then renames it to `path`. Throws ds4::Error naming the
  // path on an I/O error (the temporary file is removed); an exception from a
  // fill function is passed on, also removing the temporary file.
  void write(const std::string& path) const;

  struct WriteOptions {
    std::string temp_suffix = ".tmp";  // written as path + temp_suffix, then renamed
    // Continue what an interrupted write of this same file left at path +
    // temp_suffix (kept on failure in this mode): when its directory bytes
    // equal this writer's, the tensors wholly in it are kept (not filled
    // again) and writing goes on after the last; otherwise it starts over.
    bool resume = false;
    // fdatasync after every tensor and before the rename, so that what a
    // resume keeps survived a crash too.
    bool durable = false;
    // After the kept part and after each tensor: (tensors done, data bytes done).
    std::function<void(size_t tensors, uint64_t bytes)> progress;
  };
  // As write(path), with options; returns how many tensors a resume kept.
  size_t write(const std::string& path, const WriteOptions& options) const;
  // The same file with every tensor's bytes left unwritten (zeros): the header,
  // metadata and tensor infos, then the file extended to its full size, a
  // hole on file systems with sparse files. No fill function is called. For
  // the layouts of multi-hundred-GB files (binding, memory accounting) without
  // their data.
  void write_without_data(const std::string& path) const;
  // The bytes write() puts before the data section: header, metadata and
  // tensor infos, padded to the alignment.
  std::vector<uint8_t> directory() const { return encode_directory(); }

 private:
  struct Entry {
    std::string key;
    MetaValue value;
  };
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    uint64_t nbytes;
    uint64_t offset;  // relative to the data section
    Fill fill;
    std::span<const uint8_t> view = {};  // add_tensor_view: written as it is
  };

  // The header, metadata and tensor infos, padded to the alignment.
  std::vector<uint8_t> encode_directory() const;

  uint32_t alignment_;
  std::vector<Entry> kv_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;  // padded end of the last tensor
};

}  // namespace ds4::gguf
