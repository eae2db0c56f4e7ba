// The message of the ds4::Error a piece of code throws, for tests that check
// error texts.
#pragma once

#include <string>
#include <utility>

#include "core/error.h"

namespace ds4::test {

// What fn throws as a ds4::Error; "" when it throws nothing.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace ds4::test
