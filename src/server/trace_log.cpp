#include "server/trace_log.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ds4::server {

TraceLog::TraceLog(const std::string& path) : file_(std::fopen(path.c_str(), "ab")) {
  if (file_ == nullptr) throw Error("--trace " + path + ": cannot open for writing: " + std::strerror(errno));
}

TraceLog::~TraceLog() { std::fclose(file_); }

void TraceLog::write_block(std::string_view block) {
  std::lock_guard lock(mutex_);
  std::fwrite(block.data(), 1, block.size(), file_);
  std::fflush(file_);
}

}  // namespace ds4::server
