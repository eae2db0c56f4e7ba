#include "bench_prompt.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "runtime/tokens_file.h"
#include "text/chat_render.h"
#include "text/chat_tokens.h"
#include "text/tokenizer.h"

namespace ds4::bench {

namespace {

constexpr const char* kEosKey = "tokenizer.ggml.eos_token_id";

std::string read_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(flag + " " + path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(flag + " " + path + ": cannot read");
  return text.str();
}

text::Tokenizer model_tokenizer(const gguf::File& file, uint32_t n_vocab, const std::string& flag) {
  if (!file.find("tokenizer.ggml.tokens"))
    throw Error(flag + " needs the model's tokenizer, and " + file.path() + " has none; use --tokens-file");
  text::Tokenizer tokenizer = text::Tokenizer::from_gguf(file);
  if (tokenizer.vocab_size() != n_vocab)
    throw Error(file.path() + ": the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                " tokens but the model " + std::to_string(n_vocab));
  return tokenizer;
}

}  // namespace

PromptTokens load_prompt(const Options& o, const gguf::File& file, uint32_t n_vocab) {
  PromptTokens p;
  if (!o.tokens_file.empty()) {
    p.source = "--tokens-file " + o.tokens_file;
    p.ids = runtime::parse_tokens_json(read_file(o.tokens_file, "--tokens-file"), p.source);
    runtime::check_token_range(p.ids, n_vocab, p.source);
    if (const auto eos = file.find_u32(kEosKey); eos && *eos < n_vocab) p.eos = static_cast<int32_t>(*eos);
  } else if (!o.prompt_file.empty()) {
    p.source = "--prompt-file " + o.prompt_file;
    const std::string text = read_file(o.prompt_file, "--prompt-file");
    const text::Tokenizer tokenizer = model_tokenizer(file, n_vocab, "--prompt-file");
    p.ids.push_back(tokenizer.bos());
    const std::vector<text::TokenId> body = tokenizer.encode(text, false);
    p.ids.insert(p.ids.end(), body.begin(), body.end());
    if (body.empty()) p.ids.clear();  // BOS alone is no prompt
    p.eos = tokenizer.eos();
  } else {
    p.source = "--chat-prompt-file " + o.chat_prompt_file;
    const std::string text = read_file(o.chat_prompt_file, "--chat-prompt-file");
    const text::Tokenizer tokenizer = model_tokenizer(file, n_vocab, "--chat-prompt-file");
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
