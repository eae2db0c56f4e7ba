// The --trace file (PROTOCOL.md §5.12): one block per request with its
// parameters, the cache decision, the raw request, the rendered prompt, the
// generated text, parser events and the parsed message. Blocks are written
// whole, so concurrent requests never interleave.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace ds4::server {

class TraceLog {
 public:
  // Opens `path` for appending; ds4::Error naming it when it cannot.
  explicit TraceLog(const std::string& path);
  ~TraceLog();
  TraceLog(const TraceLog&) = delete;
  TraceLog& operator=(const TraceLog&) = delete;

  void write_block(std::string_view block);

 private:
  std::mutex mutex_;
  std::FILE* file_;
};

}  // namespace ds4::server
