// The chat page ds4-server serves at GET / (web/, docs/server.md "Chat
// page"): one self-contained HTML document with its scripts and styles
// inlined, generated at build time (cmake/Ds4ChatPage.cmake).
#pragma once

#include <string_view>

namespace ds4::server {

std::string_view chat_page_html();
// SHA-256 of the page in hex: its ETag.
std::string_view chat_page_sha256();

}  // namespace ds4::server
