// What the agent's tools may touch: the working directory and the folders
// --allow-path adds. Paths are resolved before they are checked (symlinks
// followed, "." and ".." folded), so neither a link nor "../" leads outside.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::agent {

class Workspace {
 public:
  // `root` and every allowed folder must exist; they are kept resolved.
  // ds4::Error naming the folder otherwise.
  explicit Workspace(const std::filesystem::path& root, const std::vector<std::filesystem::path>& allowed = {});

  const std::filesystem::path& root() const { return root_; }
  const std::vector<std::filesystem::path>& allowed() const { return allowed_; }

  // `path` (relative to the root, or absolute) resolved: the existing part
  // of it with its links followed, the rest folded lexically. ToolError
  // (agent/tool_error.h) naming the path when the result lies outside the
  // workspace, or when it ends in a link that points nowhere (writing
  // through it would create a file wherever it points).
  std::filesystem::path resolve(std::string_view path) const;

  // True when the resolved path is the root, an allowed folder, or below one.
  bool contains(const std::filesystem::path& resolved) const;

  // How the tools name a resolved path to the model: relative to the root
  // when inside it ("." for the root itself), else absolute.
  std::string display(const std::filesystem::path& resolved) const;

 private:
  std::filesystem::path root_;
  std::vector<std::filesystem::path> allowed_;
};

}  // namespace ds4::agent
