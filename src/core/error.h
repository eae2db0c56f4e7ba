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

}  // namespace ds4
