#include "bench_prompt.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "engine/engine.h"
#include "runtime/tokens_file.h"
#include "text/chat_render.h"
#include "text/chat_tokens.h"
#include "text/tokenizer.h"

namespace ds4::bench {

namespace {

std::string read_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(flag + " " + path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(flag + " " + path + ": cannot read");
  return text.str();
}

const text::Tokenizer& model_tokenizer(const engine::Engine& engine, const std::string& flag) {
  if (!engine.has_tokenizer()) {
    try {
      (void)engine.tokenizer();
    } catch (const Error& e) {
      throw Error(flag + " needs the model's tokenizer: " + e.what() + "; use --tokens-file");
    }
  }
  return engine.tokenizer();
}

}  // namespace

PromptTokens load_prompt(const Options& o, const engine::Engine& engine) {
  const uint32_t n_vocab = engine.facts().n_vocab;
  PromptTokens p;
  if (!o.tokens_file.empty()) {
    p.source = "--tokens-file " + o.tokens_file;
    p.ids = runtime::parse_tokens_json(read_file(o.tokens_file, "--tokens-file"), p.source);
    runtime::check_token_range(p.ids, n_vocab, p.source);
    p.eos = engine.facts().eos;
  } else if (!o.prompt_file.empty()) {
    p.source = "--prompt-file " + o.prompt_file;
    const std::string text = read_file(o.prompt_file, "--prompt-file");
    const text::Tokenizer& tokenizer = model_tokenizer(engine, "--prompt-file");
    p.ids.push_back(tokenizer.bos());
    const std::vector<text::TokenId> body = tokenizer.encode(text, false);
    p.ids.insert(p.ids.end(), body.begin(), body.end());
    if (body.empty()) p.ids.clear();  // BOS alone is no prompt
    p.eos = tokenizer.eos();
  } else {
    p.source = "--chat-prompt-file " + o.chat_prompt_file;
    const std::string text = read_file(o.chat_prompt_file, "--chat-prompt-file");
    const text::Tokenizer& tokenizer = model_tokenizer(engine, "--chat-prompt-file");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (o.system) messages.push_back({{"role", "system"}, {"content", *o.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    text::RenderOptions render;
    render.mode = text::ThinkingMode::None;
    p.ids = text::tokenize_segments(text::render_chat(messages, nullptr, render), tokenizer);
    p.eos = tokenizer.eos();
  }
  if (p.ids.empty()) throw Error(p.source + ": the prompt gives no tokens");
  return p;
}

}  // namespace ds4::bench
