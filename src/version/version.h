// What this build is: the project version (CMake's project(VERSION)) and the
// git commit it was built from. Every binary prints them for --version;
// distributed peers compare them in their handshake.
#pragma once

#include <string>
#include <string_view>

namespace ds4 {

// "0.1.0".
std::string_view version();
// 12 hex digits, "<hex>-dirty" when tracked files had uncommitted changes, or
// "unknown" when the sources were not a git checkout.
std::string_view git_commit();
// "PROGRAM VERSION (commit COMMIT)": the --version line.
std::string version_line(std::string_view program);
// For mains whose flag parser has no version flag (Google Benchmark's): when
// the only argument is --version, prints version_line(program) and returns
// true (the caller exits 0).
bool answer_version_flag(int argc, char** argv, std::string_view program);

}  // namespace ds4
