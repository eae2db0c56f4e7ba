// The agent's tools, as the model sees them (an OpenAI tools array rendered
// into the official tools block) and as they run:
//   read   {path, start_line?, max_lines?}   numbered lines, a range at a time
//   write  {path, content}                   creates or replaces a file
//   edit   {path, old, new}                  replaces the one occurrence of old;
//                                            refused when old is absent or not unique
//   list   {path?}                           a folder's entries
//   glob   {pattern, path?}                  files whose relative path matches (*, ?, **, [..])
//   grep   {pattern, path?, glob?, case_sensitive?, max_results?}   PCRE2 over text files
//   shell  {command, timeout_sec?}           /bin/sh -c in the working directory, after
//                                            confirmation (shell_runner.h)
// Every path goes through the Workspace. A refused or failed call is a
// result too (is_error), which the model reads and can act on.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agent/shell_runner.h"
#include "agent/workspace.h"

namespace ds4::agent {

struct ToolResult {
  std::string text;
  bool is_error = false;
};

struct ToolLimits {
  int read_default_lines = 500;
  int read_max_lines = 2000;
  size_t read_max_line_bytes = 2000;  // longer lines are cut, and say so
  size_t listing_max_entries = 1000;  // list, glob
  int grep_default_results = 200;
  int grep_max_results = 2000;
  uint64_t max_file_bytes = 64ull << 20;  // read, edit, grep skip larger files
};

class ToolBox {
 public:
  // `confirm` is asked before every shell command (true runs it); unset
  // means yes (--yes).
  ToolBox(Workspace workspace, ShellOptions shell, std::function<bool(const std::string& command)> confirm = {},
          ToolLimits limits = {});

  // The OpenAI tools array: [{type:function, function:{name, description, parameters}}].
  const nlohmann::ordered_json& schemas() const { return schemas_; }

  // Runs one call (`cancelled` returning true stops a running command);
  // never throws for anything the call itself got wrong
  // (unknown tool, missing or mistyped argument, refusal): those are error
  // results naming the problem.
  ToolResult run(std::string_view name, const nlohmann::ordered_json& arguments,
                 const std::function<bool()>& cancelled = {});

  const Workspace& workspace() const { return workspace_; }

 private:
  std::string read(const nlohmann::ordered_json& a);
  std::string write(const nlohmann::ordered_json& a);
  std::string edit(const nlohmann::ordered_json& a);
  std::string list(const nlohmann::ordered_json& a);
  std::string glob(const nlohmann::ordered_json& a);
  std::string grep(const nlohmann::ordered_json& a);
  ToolResult shell(const nlohmann::ordered_json& a, const std::function<bool()>& cancelled);

  Workspace workspace_;
  ShellOptions shell_;
  std::function<bool(const std::string&)> confirm_;
  ToolLimits limits_;
  nlohmann::ordered_json schemas_;
};

// Whether `rel_path` ('/'-separated) matches a glob pattern: `*` and `?`
// within one path component, `[...]` classes, `**` as a whole component for
// any number of components (fnmatch(3) rules per component).
bool glob_matches(std::string_view pattern, std::string_view rel_path);

}  // namespace ds4::agent
