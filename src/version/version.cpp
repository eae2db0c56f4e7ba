#include "version/version.h"

#include <cstdio>

namespace ds4 {

std::string version_line(std::string_view program) {
  std::string line(program);
  line += ' ';
  line += version();
  line += " (commit ";
  line += git_commit();
  line += ')';
  return line;
}

bool answer_version_flag(int argc, char** argv, std::string_view program) {
  if (argc != 2 || std::string_view(argv[1]) != "--version") return false;
  std::printf("%s\n", version_line(program).c_str());
  return true;
}

}  // namespace ds4
