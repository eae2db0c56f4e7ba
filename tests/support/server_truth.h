// The independent truth server tests compare replies with: the chat
// renderer, the tokenizer and the forward pass's argmax, with no server code
// in between; and the requests that make a random model's replies
// comparable (logit_bias).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/utf8.h"
#include "runtime/sampler.h"
#include "support/server_harness.h"
#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace ds4::server {

// Greedy decoding with the forward pass alone: `n` tokens after `ids`
// (stopping at EOS), with `bias` added to the logits as logit_bias is.
inline std::vector<int32_t> greedy_ids(const std::vector<int32_t>& ids, int n,
                                       const std::map<int32_t, float>& bias = {}) {
  cpu::Forward f(tiny().model(), cpu::Numerics::Default, nullptr);
  cpu::Session s = f.make_session(2048);
  f.eval(s, ids);
  std::vector<int32_t> out;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    logits.assign(s.logits().begin(), s.logits().end());
    for (const auto& [id, b] : bias) logits[static_cast<size_t>(id)] += b;
    const int32_t t = runtime::argmax(logits);
    if (t == tokenizer().eos()) break;
    out.push_back(t);
    if (i + 1 < n) {
      const int32_t one[1] = {t};
      f.eval(s, one);
    }
  }
  return out;
}

// logit_bias -100 on every token holding a byte >= 0x80 (EOS aside): the
// reply is then ASCII whatever the logits. A random model's reply is often
// invalid UTF-8, which the client sends back with U+FFFD, so whether a
// second turn's prompt continues the live KV token for token (and how the
// server re-encodes it) would depend on where its greedy path went, and
// that differs between ISA levels.
inline const std::map<int32_t, float>& ascii_only_bias() {
  static const std::map<int32_t, float> bias = [] {
    std::map<int32_t, float> b;
    for (uint32_t id = 0; id < tokenizer().vocab_size(); ++id) {
      const auto t = static_cast<int32_t>(id);
      if (t == tokenizer().eos()) continue;
      for (const char c : tokenizer().token_bytes(t)) {
        if (static_cast<unsigned char>(c) >= 0x80) {
          b[t] = -100.0f;
          break;
        }
      }
    }
    return b;
  }();
  return bias;
}

inline Json with_bias(Json req, const std::map<int32_t, float>& bias) {
  Json b = Json::object();
  for (const auto& [id, v] : bias) b[std::to_string(id)] = v;
  req["logit_bias"] = b;
  return req;
}

inline std::string rendered(const Json& messages, text::ThinkingMode mode) {
  text::RenderOptions ro;
  ro.mode = mode;
  return text::render_chat(messages, nullptr, ro).text();
}

// The independent truth: render, tokenize, then greedy decode with the
// forward pass until EOS or n tokens. Clients see invalid UTF-8 (common in a
// random model's output) as U+FFFD.
inline std::string greedy_reply(const Json& messages, text::ThinkingMode mode, int n, int64_t* prompt_tokens = nullptr) {
  const auto ids = tokenizer().encode(rendered(messages, mode), true);
  if (prompt_tokens) *prompt_tokens = static_cast<int64_t>(ids.size());
  return sanitize_utf8(tokenizer().decode(greedy_ids(ids, n)));
}

inline Json chat_request(const std::string& user, int max_tokens) {
  return Json{{"model", "deepseek-v4-flash"},
              {"messages", Json::array({Json{{"role", "user"}, {"content", user}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"thinking", Json{{"type", "disabled"}}}};
}

}  // namespace ds4::server
