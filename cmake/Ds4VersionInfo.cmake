# Writes OUTPUT, the C++ file that holds the version and the git commit every
# binary prints for --version. Run at every build (cmake -P, from the
# ds4_version_info target in src/CMakeLists.txt); the file is rewritten only
# when its text changes, so an unchanged commit rebuilds nothing.
#   -DSOURCE_DIR=<checkout> -DOUTPUT=<file.cpp> -DVERSION=<x.y.z> [-DGIT_EXECUTABLE=<git>]
# The commit is 12 hex digits, with "-dirty" when tracked files had uncommitted
# changes; "unknown" when the sources are not a git checkout (a tarball).
cmake_minimum_required(VERSION 3.25)

set(commit unknown)
# Only the checkout's own .git (a folder, or a file in a worktree): a tarball
# unpacked inside some other repository must not report that one's commit.
if(GIT_EXECUTABLE AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  RESULT_VARIABLE rc OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(commit "${head}")
    # --no-optional-locks: a build never takes the index lock from the user's git.
    execute_process(COMMAND "${GIT_EXECUTABLE}" --no-optional-locks -C "${SOURCE_DIR}" status --porcelain
                            --untracked-files=no
                    RESULT_VARIABLE rc OUTPUT_VARIABLE changes ERROR_QUIET)
    if(rc EQUAL 0 AND NOT changes STREQUAL "")
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()

file(CONFIGURE OUTPUT "${OUTPUT}" @ONLY CONTENT [[
// Generated at build time by cmake/Ds4VersionInfo.cmake; not edited by hand.
#include "version/version.h"

namespace ds4 {

std::string_view version() { return "@VERSION@"; }
std::string_view git_commit() { return "@commit@"; }

}  // namespace ds4
]])
