#include "agent/tools.h"

#include <fnmatch.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <vector>

#include "agent/tool_error.h"
#include "core/error.h"
#include "core/utf8.h"

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace ds4::agent {

namespace {

Json schema(const char* name, const char* description, Json properties, std::vector<std::string> required) {
  Json params = {{"type", "object"}, {"properties", std::move(properties)}, {"required", required}};
  return {{"type", "function"},
          {"function", {{"name", name}, {"description", description}, {"parameters", std::move(params)}}}};
}

Json tool_schemas() {
  Json tools = Json::array();
  tools.push_back(schema(
      "read", "Read a text file as numbered lines, a range at a time.",
      {{"path", {{"type", "string"}, {"description", "File path, relative to the working directory"}}},
       {"start_line", {{"type", "integer"}, {"description", "First line to show (1-based, default 1)"}}},
       {"max_lines", {{"type", "integer"}, {"description", "Lines to show (default 500, at most 2000)"}}}},
      {"path"}));
  tools.push_back(schema("write", "Create a file or replace its whole content.",
                         {{"path", {{"type", "string"}}}, {"content", {{"type", "string"}}}}, {"path", "content"}));
  tools.push_back(schema(
      "edit",
      "Replace one exact piece of a file: `old` must occur exactly once (give enough surrounding text to make it "
      "unique).",
      {{"path", {{"type", "string"}}}, {"old", {{"type", "string"}}}, {"new", {{"type", "string"}}}},
      {"path", "old", "new"}));
  tools.push_back(schema("list", "List a folder's entries (folders end with /).",
                         {{"path", {{"type", "string"}, {"description", "Folder (default: the working directory)"}}}},
                         {}));
  tools.push_back(schema(
      "glob", "Find files whose path matches a pattern (*, ?, [..] within a name; ** for any folders).",
      {{"pattern", {{"type", "string"}}}, {"path", {{"type", "string"}, {"description", "Folder to search (default .)"}}}},
      {"pattern"}));
  tools.push_back(schema(
      "grep", "Search text files for a regular expression (PCRE); prints path:line:text.",
      {{"pattern", {{"type", "string"}}},
       {"path", {{"type", "string"}, {"description", "File or folder (default .)"}}},
       {"glob", {{"type", "string"}, {"description", "Only files whose path matches this pattern"}}},
       {"case_sensitive", {{"type", "boolean"}}},
       {"max_results", {{"type", "integer"}}}},
      {"pattern"}));
  tools.push_back(schema(
      "shell", "Run a shell command (/bin/sh -c) in the working directory; the user may have to confirm it.",
      {{"command", {{"type", "string"}}},
       {"timeout_sec", {{"type", "integer"}, {"description", "Time limit in seconds (default 120)"}}}},
      {"command"}));
  return tools;
}

std::string string_arg(const Json& a, const char* key, bool required = true, const std::string& fallback = "") {
  const auto it = a.find(key);
  if (it == a.end() || it->is_null()) {
    if (required) throw ToolError(std::string("missing argument '") + key + "'");
    return fallback;
  }
  if (!it->is_string()) throw ToolError(std::string("argument '") + key + "' must be a string");
  return it->get<std::string>();
}

long long int_arg(const Json& a, const char* key, long long fallback) {
  const auto it = a.find(key);
  if (it == a.end() || it->is_null()) return fallback;
  if (it->is_number_integer()) return it->get<long long>();
  // Models write numbers as strings often enough.
  if (it->is_string()) {
    const std::string s = it->get<std::string>();
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') return v;
  }
  throw ToolError(std::string("argument '") + key + "' must be an integer");
}

bool bool_arg(const Json& a, const char* key, bool fallback) {
  const auto it = a.find(key);
  if (it == a.end() || it->is_null()) return fallback;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_string() && (*it == "true" || *it == "false")) return *it == "true";
  throw ToolError(std::string("argument '") + key + "' must be true or false");
}

std::string read_file(const fs::path& p, const std::string& shown, uint64_t max_bytes) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw ToolError(shown + " is a folder (use list)");
  const auto size = fs::file_size(p, ec);
  if (ec) throw ToolError("cannot read " + shown + ": " + ec.message());
  if (size > max_bytes)
    throw ToolError(shown + " has " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                    " this tool reads");
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) throw ToolError("cannot read " + shown);
  return ss.str();
}

bool looks_binary(std::string_view data) { return data.substr(0, 8192).find('\0') != std::string_view::npos; }

void write_file(const fs::path& p, const std::string& shown, std::string_view content) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) throw ToolError("cannot create the folder of " + shown + ": " + ec.message());
  // Written beside and renamed: a full disk never leaves half a file.
  const fs::path tmp = p.string() + ".ds4-agent-tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      throw ToolError("cannot write " + shown);
    }
  }
  // Keep an existing file's permissions (a script stays executable).
  if (fs::exists(p, ec)) fs::permissions(tmp, fs::status(p, ec).permissions(), ec);
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw ToolError("cannot write " + shown + ": " + ec.message());
  }
}

size_t count_occurrences(std::string_view text, std::string_view needle, size_t* first) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string_view::npos; pos = text.find(needle, pos + 1)) {
    if (n == 0) *first = pos;
    ++n;
  }
  return n;
}

size_t line_of(std::string_view text, size_t offset) {
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

bool glob_components(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& path, size_t qi) {
  if (pi == pat.size()) return qi == path.size();
  if (pat[pi] == "**") {
    for (size_t k = qi; k <= path.size(); ++k) {
      if (glob_components(pat, pi + 1, path, k)) return true;
    }
    return false;
  }
  if (qi == path.size()) return false;
  if (fnmatch(pat[pi].c_str(), path[qi].c_str(), FNM_PERIOD) != 0) return false;
  return glob_components(pat, pi + 1, path, qi + 1);
}

std::vector<std::string> split_slash(std::string_view s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find('/', start);
    const std::string_view part = s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!part.empty() && part != ".") parts.emplace_back(part);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

// Files below `dir` (resolved), skipping .git folders and links that lead
// out of the workspace, in a stable order.
std::vector<fs::path> files_below(const fs::path& dir, const Workspace& workspace) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return {dir};
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && it->path().filename() == ".git") {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    if (it->is_symlink(ec)) {
      const fs::path target = fs::canonical(it->path(), ec);
      if (ec || !workspace.contains(target)) continue;
    }
    files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct Pcre2Code {
  pcre2_code* code = nullptr;
  ~Pcre2Code() { pcre2_code_free(code); }
};
struct Pcre2Match {
  pcre2_match_data* data = nullptr;
  ~Pcre2Match() { pcre2_match_data_free(data); }
};

}  // namespace

bool glob_matches(std::string_view pattern, std::string_view rel_path) {
  return glob_components(split_slash(pattern), 0, split_slash(rel_path), 0);
}

ToolBox::ToolBox(Workspace workspace, ShellOptions shell, std::function<bool(const std::string&)> confirm,
                 ToolLimits limits)
    : workspace_(std::move(workspace)),
      shell_(std::move(shell)),
      confirm_(std::move(confirm)),
      limits_(limits),
      schemas_(tool_schemas()) {
  if (shell_.working_dir.empty()) shell_.working_dir = workspace_.root().string();
}

ToolResult ToolBox::run(std::string_view name, const Json& arguments, const std::function<bool()>& cancelled) {
  try {
    if (!arguments.is_object()) throw ToolError("the arguments are not a JSON object");
    if (name == "read") return {read(arguments)};
    if (name == "write") return {write(arguments)};
    if (name == "edit") return {edit(arguments)};
    if (name == "list") return {list(arguments)};
    if (name == "glob") return {glob(arguments)};
    if (name == "grep") return {grep(arguments)};
    if (name == "shell") return shell(arguments, cancelled);
    throw ToolError("there is no tool named '" + std::string(name) + "'");
  } catch (const ToolError& e) {
    return {std::string("error: ") + e.what(), true};
  } catch (const Error& e) {
    return {std::string("error: ") + e.what(), true};
  } catch (const std::exception& e) {
    return {std::string("error: ") + e.what(), true};
  }
}

std::string ToolBox::read(const Json& a) {
  const std::string path = string_arg(a, "path");
  const fs::path p = workspace_.resolve(path);
  const std::string shown = workspace_.display(p);
  const std::string data = read_file(p, shown, limits_.max_file_bytes);
  if (looks_binary(data)) throw ToolError(shown + " is a binary file (" + std::to_string(data.size()) + " bytes)");
  const long long start = int_arg(a, "start_line", 1);
  const long long want = int_arg(a, "max_lines", limits_.read_default_lines);
  if (start < 1) throw ToolError("start_line must be at least 1");
  if (want < 1) throw ToolError("max_lines must be at least 1");
  const long long count = std::min<long long>(want, limits_.read_max_lines);

  std::vector<std::string_view> lines;
  std::string_view rest(data);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  const long long total = static_cast<long long>(lines.size());
  if (total == 0) return shown + " is empty";
  if (start > total)
    throw ToolError(shown + " has " + std::to_string(total) + " lines; start_line " + std::to_string(start) +
                    " is past its end");
  const long long last = std::min(total, start + count - 1);
  std::string out;
  for (long long i = start; i <= last; ++i) {
    std::string_view line = lines[static_cast<size_t>(i - 1)];
    std::string text = sanitize_utf8(line.substr(0, limits_.read_max_line_bytes));
    if (line.size() > limits_.read_max_line_bytes)
      text += " [... line cut at " + std::to_string(limits_.read_max_line_bytes) + " of " +
              std::to_string(line.size()) + " bytes]";
    out += std::to_string(i) + "\t" + text + "\n";
  }
  out += "(" + shown + ": lines " + std::to_string(start) + "-" + std::to_string(last) + " of " + std::to_string(total);
  if (last < total) out += "; continue with start_line=" + std::to_string(last + 1);
  out += ")";
  return out;
}

std::string ToolBox::write(const Json& a) {
  const std::string path = string_arg(a, "path");
  const std::string content = string_arg(a, "content");
  const fs::path p = workspace_.resolve(path);
  const std::string shown = workspace_.display(p);
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw ToolError(shown + " is a folder");
  const bool existed = fs::exists(p, ec);
  write_file(p, shown, content);
  return std::string(existed ? "replaced " : "created ") + shown + " (" + std::to_string(content.size()) + " bytes)";
}

std::string ToolBox::edit(const Json& a) {
  const std::string path = string_arg(a, "path");
  const std::string old_text = string_arg(a, "old");
  const std::string new_text = string_arg(a, "new");
  if (old_text.empty()) throw ToolError("'old' is empty; give the exact text to replace");
  const fs::path p = workspace_.resolve(path);
  const std::string shown = workspace_.display(p);
  const std::string data = read_file(p, shown, limits_.max_file_bytes);
  size_t first = 0;
  const size_t n = count_occurrences(data, old_text, &first);
  if (n == 0) throw ToolError("the old text does not occur in " + shown + "; nothing was changed");
  if (n > 1)
    throw ToolError("the old text occurs " + std::to_string(n) + " times in " + shown +
                    "; give more surrounding text so that it occurs once. Nothing was changed");
  std::string updated = data.substr(0, first) + new_text + data.substr(first + old_text.size());
  write_file(p, shown, updated);
  return "edited " + shown + " at line " + std::to_string(line_of(data, first));
}

std::string ToolBox::list(const Json& a) {
  const std::string path = string_arg(a, "path", false, ".");
  const fs::path p = workspace_.resolve(path);
  const std::string shown = workspace_.display(p);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) throw ToolError(shown + " is not a folder");
  std::vector<std::string> entries;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code e2;
    if (it->is_directory(e2)) {
      name += "/";
    } else if (it->is_regular_file(e2)) {
      name += "  (" + std::to_string(it->file_size(e2)) + " bytes)";
    }
    entries.push_back(std::move(name));
  }
  if (ec) throw ToolError("cannot list " + shown + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  std::string out = shown + ": " + std::to_string(entries.size()) + " entries\n";
  for (size_t i = 0; i < entries.size() && i < limits_.listing_max_entries; ++i) out += entries[i] + "\n";
  if (entries.size() > limits_.listing_max_entries)
    out += "[... " + std::to_string(entries.size() - limits_.listing_max_entries) + " more]\n";
  return out;
}

std::string ToolBox::glob(const Json& a) {
  const std::string pattern = string_arg(a, "pattern");
  const fs::path dir = workspace_.resolve(string_arg(a, "path", false, "."));
  std::vector<std::string> hits;
  size_t total = 0;
  for (const fs::path& f : files_below(dir, workspace_)) {
    const std::string rel = f.lexically_relative(dir).string();
    if (!glob_matches(pattern, rel)) continue;
    ++total;
    if (hits.size() < limits_.listing_max_entries) hits.push_back(workspace_.display(f));
  }
  if (total == 0) return "no files match " + pattern;
  std::string out;
  for (const auto& h : hits) out += h + "\n";
  if (total > hits.size()) out += "[... " + std::to_string(total - hits.size()) + " more]\n";
  return out;
}

std::string ToolBox::grep(const Json& a) {
  const std::string pattern = string_arg(a, "pattern");
  const fs::path dir = workspace_.resolve(string_arg(a, "path", false, "."));
  const std::string file_glob = string_arg(a, "glob", false, "");
  const bool case_sensitive = bool_arg(a, "case_sensitive", true);
  const long long want = int_arg(a, "max_results", limits_.grep_default_results);
  if (want < 1) throw ToolError("max_results must be at least 1");
  const size_t max_results = static_cast<size_t>(std::min<long long>(want, limits_.grep_max_results));

  int err = 0;
  PCRE2_SIZE err_offset = 0;
  Pcre2Code re;
  re.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (case_sensitive ? 0u : PCRE2_CASELESS), &err,
                          &err_offset, nullptr);
  if (re.code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw ToolError("bad pattern at offset " + std::to_string(err_offset) + ": " +
                    reinterpret_cast<const char*>(msg));
  }
  Pcre2Match md;
  md.data = pcre2_match_data_create_from_pattern(re.code, nullptr);

  std::string out;
  size_t found = 0;
  bool more = false;
  std::error_code ec;
  for (const fs::path& f : files_below(dir, workspace_)) {
    if (!file_glob.empty() && !glob_matches(file_glob, f.lexically_relative(dir).string())) continue;
    const auto size = fs::file_size(f, ec);
    if (ec || size > limits_.max_file_bytes) continue;
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    if (looks_binary(data)) continue;
    const std::string shown = workspace_.display(f);
    size_t line_no = 0;
    std::string_view rest(data);
    while (!rest.empty()) {
      ++line_no;
      const size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      const int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0, md.data,
                                 nullptr);
      if (rc < 0) continue;
      if (found == max_results) {
        more = true;
        break;
      }
      ++found;
      out += shown + ":" + std::to_string(line_no) + ":" +
             sanitize_utf8(line.substr(0, limits_.read_max_line_bytes)) + "\n";
    }
    if (more) break;
  }
  if (found == 0) return "no matches for " + pattern;
  if (more) out += "[stopped at " + std::to_string(max_results) + " matches; narrow the search or raise max_results]\n";
  return out;
}

ToolResult ToolBox::shell(const Json& a, const std::function<bool()>& cancelled) {
  const std::string command = string_arg(a, "command");
  if (command.empty()) throw ToolError("empty command");
  const long long timeout = int_arg(a, "timeout_sec", shell_.default_timeout_sec);
  if (timeout < 1 || timeout > shell_.max_timeout_sec)
    throw ToolError("timeout_sec must be between 1 and " + std::to_string(shell_.max_timeout_sec));
  if (confirm_ && !confirm_(command)) return {"the user declined to run this command", true};
  const ShellOutcome o = run_shell(command, static_cast<int>(timeout), shell_, cancelled);
  std::string head;
  if (o.timed_out) {
    head = "killed after the " + std::to_string(timeout) + " s time limit";
  } else if (o.cancelled) {
    head = "stopped by the user";
  } else if (o.signal != 0) {
    head = "killed by signal " + std::to_string(o.signal);
  } else {
    head = "exit status " + std::to_string(o.exit_status);
  }
  std::string text = head + "\n" + sanitize_utf8(o.output);
  if (o.output_bytes > o.output.size() && o.output_bytes > shell_.max_output_bytes)
    text += "\n(output capped: " + std::to_string(o.output_bytes) + " bytes in all)";
  return {text, o.timed_out || o.cancelled || o.signal != 0 || o.exit_status != 0};
}

}  // namespace ds4::agent
