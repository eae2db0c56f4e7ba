#include "agent/workspace.h"

#include <system_error>

#include "agent/tool_error.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace ds4::agent {

namespace {

fs::path resolved_folder(const fs::path& p, const char* what) {
  std::error_code ec;
  const fs::path r = fs::canonical(p, ec);
  if (ec) throw Error(std::string(what) + " " + p.string() + ": " + ec.message());
  if (!fs::is_directory(r, ec)) throw Error(std::string(what) + " " + p.string() + " is not a folder");
  return r;
}

// `inner` is `outer` or below it (both resolved).
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

Workspace::Workspace(const fs::path& root, const std::vector<fs::path>& allowed)
    : root_(resolved_folder(root, "working directory")) {
  for (const auto& a : allowed) allowed_.push_back(resolved_folder(a, "--allow-path"));
}

fs::path Workspace::resolve(std::string_view path) const {
  if (path.empty()) throw ToolError("empty path");
  if (path.find('\0') != std::string_view::npos) throw ToolError("a path with a NUL byte");
  fs::path p(path);
  if (p.is_relative()) p = root_ / p;
  std::error_code ec;
  fs::path r = fs::weakly_canonical(p, ec);
  if (ec) throw ToolError("cannot resolve " + std::string(path) + ": " + ec.message());
  if (!contains(r))
    throw ToolError(std::string(path) + " is outside the working directory " + root_.string() +
                    " (--allow-path widens it)");
  // weakly_canonical leaves a dangling link as it is: where it points was
  // never checked.
  if (fs::is_symlink(fs::symlink_status(r, ec)))
    throw ToolError(std::string(path) + " is a link to " + fs::read_symlink(r, ec).string() +
                    ", which does not exist");
  return r;
}

bool Workspace::contains(const fs::path& resolved) const {
  if (is_within(resolved, root_)) return true;
  for (const auto& a : allowed_) {
    if (is_within(resolved, a)) return true;
  }
  return false;
}

std::string Workspace::display(const fs::path& resolved) const {
  if (!is_within(resolved, root_)) return resolved.string();
  const fs::path rel = resolved.lexically_relative(root_);
  return rel.empty() ? "." : rel.string();
}

}  // namespace ds4::agent
