# Writes OUTPUT, the C++ file holding ds4-server's chat page (GET /): web/src/index.html
# with its placeholders replaced by web/src/app.css and app.js and by the
# pinned libraries from web/node_modules (installed first by
# scripts/npm-ci.sh web), as one self-contained HTML document: the page needs
# nothing from the network at run time. Generated, never edited by hand.
#   cmake -DSOURCE_DIR=<checkout> -DOUTPUT=<file.cpp> -P cmake/Ds4ChatPage.cmake
cmake_minimum_required(VERSION 3.25)

execute_process(COMMAND "${SOURCE_DIR}/scripts/npm-ci.sh" web RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "scripts/npm-ci.sh web failed: the chat page's libraries are not installed")
endif()

set(web "${SOURCE_DIR}/web")
file(READ "${web}/src/index.html" page)
foreach(part
    "HLJS_CSS=node_modules/@highlightjs/cdn-assets/styles/github.min.css"
    "APP_CSS=src/app.css"
    "MARKED_JS=node_modules/marked/lib/marked.umd.js"
    "HLJS_JS=node_modules/@highlightjs/cdn-assets/highlight.min.js"
    "APP_JS=src/app.js")
  string(REPLACE "=" ";" kv "${part}")
  list(GET kv 0 key)
  list(GET kv 1 file)
  if(NOT EXISTS "${web}/${file}")
    message(FATAL_ERROR "the chat page needs web/${file}, which is missing")
  endif()
  file(READ "${web}/${file}" content)
  # Inlined into a <script> or <style> element: its closing tag must not occur inside.
  string(TOLOWER "${content}" lower)
  string(FIND "${lower}" "</script" a)
  string(FIND "${lower}" "</style" b)
  if(NOT a EQUAL -1 OR NOT b EQUAL -1)
    message(FATAL_ERROR "web/${file} holds a closing </script> or </style> tag and cannot be inlined")
  endif()
  string(FIND "${page}" "/*@${key}@*/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "web/src/index.html has no /*@${key}@*/ placeholder")
  endif()
  string(REPLACE "/*@${key}@*/" "${content}" page "${page}")
endforeach()

string(LENGTH "${page}" size)
string(SHA256 digest "${page}")
file(WRITE "${OUTPUT}.page" "${page}")
file(READ "${OUTPUT}.page" hex HEX)
file(REMOVE "${OUTPUT}.page")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){32})" "\\1\n" bytes "${bytes}")
file(CONFIGURE OUTPUT "${OUTPUT}.new" @ONLY CONTENT [[
// Generated at build time by cmake/Ds4ChatPage.cmake from web/; not edited by hand.
#include "server/chat_page.h"

namespace ds4::server {
namespace {
const unsigned char kPage[] = {
@bytes@
};
}  // namespace

std::string_view chat_page_html() { return {reinterpret_cast<const char*>(kPage), @size@}; }
std::string_view chat_page_sha256() { return "@digest@"; }

}  // namespace ds4::server
]])
# Rewritten only when the page changed: nothing recompiles otherwise.
file(COPY_FILE "${OUTPUT}.new" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.new")
