#include "logits_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace ds4::app {

AtomicFloatFile::AtomicFloatFile(std::string path) : path_(std::move(path)) {
  std::string templ = path_ + ".tmp-XXXXXX";
  fd_ = mkstemp(templ.data());
  if (fd_ < 0) throw Error("cannot create " + path_ + ": " + std::strerror(errno));
  tmp_ = templ;
  // mkstemp makes the file 0600; give the result the usual mode for new files.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd_, 0666 & ~mask) != 0) {
    const int err = errno;
    discard();
    throw Error("cannot create " + path_ + ": " + std::strerror(err));
  }
}

AtomicFloatFile::~AtomicFloatFile() {
  if (!committed_) discard();
}

void AtomicFloatFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

void AtomicFloatFile::write(std::span<const float> values) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(values.data());
  std::vector<uint32_t> swapped;
  if constexpr (std::endian::native != std::endian::little) {
    swapped.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) swapped[i] = __builtin_bswap32(std::bit_cast<uint32_t>(values[i]));
    p = reinterpret_cast<const uint8_t*>(swapped.data());
  }
  size_t left = values.size_bytes();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write " + path_ + ": " + std::strerror(errno));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFloatFile::commit() {
  if (::fsync(fd_) != 0) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw Error("cannot write " + path_ + ": " + std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw Error("cannot rename the temporary file onto " + path_ + ": " + std::strerror(errno));
  committed_ = true;
  tmp_.clear();
}

}  // namespace ds4::app
