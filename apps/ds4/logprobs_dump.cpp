#include "logprobs_dump.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "core/error.h"
#include "runtime/chat_session.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace ds4::app {

namespace {

std::string hex(std::string_view bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write --dump-logprobs " + path);
    out << text;
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp);
      throw Error("cannot write --dump-logprobs " + path);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    throw Error("cannot write --dump-logprobs " + path + ": " + ec.message());
  }
}

}  // namespace

void dump_logprobs(engine::Engine& engine, int64_t n_ctx, const LogprobsRequest& req) {
  const text::Tokenizer& tokenizer = engine.tokenizer();
  backend::Backend& backend = engine.backend();
  // Fail on an unwritable place before the (long) evaluation.
  const std::filesystem::path parent = std::filesystem::path(req.out_path).parent_path();
  if (::access(parent.empty() ? "." : parent.c_str(), W_OK) != 0)
    throw Error("cannot write --dump-logprobs " + req.out_path);

  runtime::ChatSession chat(backend, tokenizer, n_ctx, req.system, req.mode);
  std::vector<int32_t> prompt = chat.start_tokens();
  const std::vector<int32_t> user = chat.user_turn_tokens(req.prompt);
  prompt.insert(prompt.end(), user.begin(), user.end());
  if (static_cast<int64_t>(prompt.size()) >= n_ctx)
    throw Error("the prompt is " + std::to_string(prompt.size()) + " tokens, the context holds " + std::to_string(n_ctx));

  const std::unique_ptr<backend::Session> session_ptr = engine.new_session(n_ctx);
  backend::Session& session = *session_ptr;
  backend.eval(session, prompt);

  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  std::string finish = "length";
  for (int i = 0; i < req.max_tokens; ++i) {
    const std::span<const float> logits = session.logits();
    const int32_t id = runtime::argmax(logits);
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const runtime::TokenLogprob& t : runtime::top_logprobs(logits, req.top_k))
      top.push_back({{"id", t.id}, {"text", tokenizer.token_bytes(t.id)}, {"logprob", t.logprob}});
    const std::string bytes = tokenizer.token_bytes(id);
    steps.push_back({{"id", id},
                     {"text", bytes},
                     {"bytes", hex(bytes)},
                     {"logprob", runtime::logprob_of(logits, id)},
                     {"top", std::move(top)}});
    if (id == tokenizer.eos()) {
      finish = "stop";
      break;
    }
    if (session.size() >= n_ctx) break;
    if (i + 1 < req.max_tokens) {
      const int32_t one[1] = {id};
      backend.eval(session, one);
    }
  }
  nlohmann::ordered_json out;
  out["prompt_tokens"] = prompt;
  out["top_k"] = req.top_k;
  out["finish_reason"] = finish;
  out["steps"] = std::move(steps);
  write_atomically(req.out_path, out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace ds4::app
