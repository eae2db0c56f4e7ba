# `make uninstall`: removes every file listed in LIST (installed-files.txt,
# written into the prefix by the last `make install` there), then the folders
# under LIST's own folder (share/doc/dwarfstar) that this leaves empty. Shared
# folders such as bin/ stay. With $DESTDIR set, LIST and the listed paths are
# under it, as `make install DESTDIR=...` put them.
#   cmake -DLIST=[DESTDIR]PREFIX/share/doc/dwarfstar/installed-files.txt -P packaging/uninstall.cmake
cmake_minimum_required(VERSION 3.25)

if(NOT EXISTS "${LIST}")
  message(FATAL_ERROR "${LIST} does not exist: `make install` did not install into this prefix (PREFIX=...?)")
endif()
get_filename_component(docdir "${LIST}" DIRECTORY)
file(STRINGS "${LIST}" files)
set(removed 0)
set(dirs "${docdir}")
foreach(f IN LISTS files)
  set(f "$ENV{DESTDIR}${f}")
  if(EXISTS "${f}" OR IS_SYMLINK "${f}")
    message(STATUS "Removing: ${f}")
    file(REMOVE "${f}")
    math(EXPR removed "${removed} + 1")
  else()
    message(STATUS "Already gone: ${f}")
  endif()
  get_filename_component(dir "${f}" DIRECTORY)
  string(FIND "${dir}/" "${docdir}/" at)
  if(at EQUAL 0)
    list(APPEND dirs "${dir}")
  endif()
endforeach()

# Deepest first, so a parent is empty by the time it is looked at.
list(REMOVE_DUPLICATES dirs)
list(SORT dirs ORDER DESCENDING)
foreach(dir IN LISTS dirs)
  file(GLOB left "${dir}/*")
  if(IS_DIRECTORY "${dir}" AND NOT left)
    file(REMOVE_RECURSE "${dir}")
  endif()
endforeach()
message(STATUS "Uninstalled: ${removed} files")
