// A whole file mapped read-only into memory. The mapping lives as long as the
// FileMap; views into it (spans, pointers) must not outlive it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ds4 {

class FileMap {
 public:
  // Maps `path` read-only. Throws ds4::Error naming the path when it cannot
  // be opened, is not a regular file, or cannot be mapped. An empty file
  // gives an empty mapping (data() == nullptr, size() == 0).
  explicit FileMap(const std::string& path);
  FileMap(FileMap&& other) noexcept;
  FileMap& operator=(FileMap&& other) noexcept;
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;
  ~FileMap();

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  void unmap() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ds4
