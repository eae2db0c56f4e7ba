// A private temporary folder (mkdtemp), removed with everything in it when the
// object goes away.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.h"

namespace ds4::reference {

class TempDir {
 public:
  // The folder is <system temp>/<prefix>XXXXXX.
  explicit TempDir(const std::string& prefix) {
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

 private:
  std::filesystem::path path_;
};

}  // namespace ds4::reference
