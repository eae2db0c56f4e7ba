// libFuzzer target for the ds4-server request parsers. Input: one byte whose
// value mod 4 picks the API (0 chat completions, 1 completions, 2 Responses,
// 3 Anthropic Messages; the seed files start with the digits '0'-'3') followed
// by the request body. Every input must either parse or throw RequestError;
// anything else escaping is a crash. A parsed request must hold messages and
// tools in the form text::render_chat reads, and rendering it may only fail
// with ds4::Error.
// Built with -DDS4_FUZZ_REPLAY it is a plain program that runs every file of
// the directories given on the command line through the same target.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/chat_request.h"
#include "text/chat_render.h"

namespace {

using ds4::server::Api;
using ds4::server::ChatRequest;
using Json = nlohmann::ordered_json;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool is_rendered_role(const Json& role) {
  if (!role.is_string()) return false;
  const std::string& r = role.get_ref<const std::string&>();
  return r == "system" || r == "developer" || r == "user" || r == "assistant" || r == "tool" || r == "latest_reminder";
}

void check_form(const ChatRequest& r) {
  check(r.messages.is_array());
  for (const Json& m : r.messages) {
    check(m.is_object() && is_rendered_role(m["role"]) && m["content"].is_string());
    if (m.contains("reasoning_content")) check(m["reasoning_content"].is_string());
    if (m.contains("tool_call_id")) check(m["tool_call_id"].is_string());
    if (m.contains("tool_calls")) {
      check(m["role"] == "assistant" && m["tool_calls"].is_array() && !m["tool_calls"].empty());
      for (const Json& call : m["tool_calls"]) {
        check(call["id"].is_string() && call["type"] == "function");
        check(call["function"]["name"].is_string() && call["function"]["arguments"].is_string());
      }
    }
  }
  check(r.tools.is_null() || (r.tools.is_array() && !r.tools.empty()));
  if (r.tools.is_array()) {
    for (const Json& tool : r.tools) check(tool.is_object() && tool["function"].is_object());
  }
  for (const std::string& s : r.stop) check(!s.empty());
  for (const auto& [id, bias] : r.logit_bias) check(id >= 0 && bias >= -100.0f && bias <= 100.0f);
  check(!r.max_tokens || *r.max_tokens >= 0);
  (void)r.messages.dump();  // every string came from valid JSON: dump cannot throw
  (void)r.tools.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Api api = static_cast<Api>(data[0] % 4);
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ChatRequest r;
  try {
    r = ds4::server::parse_request(api, body);
  } catch (const ds4::server::RequestError& e) {
    check(e.status == 400 && e.what()[0] != '\0');
    return 0;
  } catch (...) {
    check(false);
  }
  check(r.api == api);
  check_form(r);
  ds4::text::RenderOptions options;
  options.mode = ds4::server::requested_thinking_mode(r);
  try {
    (void)ds4::text::render_chat(r.messages, r.tools, options);
  } catch (const ds4::Error&) {
    // e.g. an empty developer message, which the official encoder refuses too
  } catch (...) {
    check(false);
  }
  return 0;
}

#include "replay_main.h"
