// A tool call the agent refuses or that fails (outside the workspace, old
// text not unique, a file that cannot be read): the message goes back to the
// model as the tool's result, and the conversation goes on.
#pragma once

#include <stdexcept>
#include <string>

namespace ds4::agent {

class ToolError : public std::runtime_error {
 public:
  explicit ToolError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ds4::agent
