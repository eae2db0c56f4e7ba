// The one exception type the library throws for bad input (files, arguments,
// requests). Messages name what is wrong and where; apps print what() and exit 1.
#pragma once

#include <stdexcept>
#include <string>

namespace ds4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown when a caller's progress callback asked to stop a long operation
// (Ctrl+C, a client that went away). Not a failure of the input.
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& what) : Error(what) {}
};

// Something the request needs is missing for now (a distributed stage that
// is not connected or stopped answering): the same request may succeed
// later. The server answers it with 503 and Retry-After.
class Unavailable : public Error {
 public:
  explicit Unavailable(const std::string& what) : Error(what) {}
};

}  // namespace ds4
