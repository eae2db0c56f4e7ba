#include "version/version.h"

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

}  // namespace ds4
