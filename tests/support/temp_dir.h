// Temporary folders for tests: a private folder (mkdtemp) removed with everything
// in it when the object goes away, and one such folder per test program.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.h"

namespace ds4::test {

class TempDir {
 public:
  // The folder is <system temp>/<prefix>XXXXXX.
  explicit TempDir(const std::string& prefix = "ds4-test-") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (mkdtemp(templ.data()) == nullptr)
      throw Error("cannot create a temporary folder " + templ + ": " + std::strerror(errno));
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // <folder>/<name>, as a string.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// One folder for the whole test program, created on first use and removed when
// the program exits.
inline const std::filesystem::path& program_temp_dir() {
  static const TempDir dir("ds4-test-");
  return dir.path();
}

}  // namespace ds4::test
