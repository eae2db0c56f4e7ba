// Writing the --dump-logits file: float32 little-endian rows, streamed to a
// temporary file next to the target and renamed into place on commit(), so
// the target never holds a partial file. Not committed = removed.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ds4::app {

class AtomicFloatFile {
 public:
  // Creates <path>.tmp-XXXXXX in the target's folder; ds4::Error when it cannot.
  explicit AtomicFloatFile(std::string path);
  ~AtomicFloatFile();
  AtomicFloatFile(const AtomicFloatFile&) = delete;
  AtomicFloatFile& operator=(const AtomicFloatFile&) = delete;

  // Appends values as f32 little-endian.
  void write(std::span<const float> values);
  // Flushes, closes and renames onto the target.
  void commit();

 private:
  void discard() noexcept;

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace ds4::app
