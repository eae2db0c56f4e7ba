// DeepSeek's byte-level BPE tokenizer (PROTOCOL.md §1), read from a GGUF's
// tokenizer.ggml.* keys. Encoding = special-token split (optional) ->
// pre-tokenizer pieces -> GPT-2 byte symbols -> BPE merges (lowest rank first,
// leftmost on ties), matching llama.cpp's llama_tokenize id for id.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::gguf {
class File;
}
namespace ds4::model {
struct TokenizerData;
}

namespace ds4::text {

using TokenId = int32_t;

class Tokenizer {
 public:
  // Reads tokenizer.ggml.*; ds4::Error naming the problem.
  static Tokenizer from_gguf(const gguf::File& file);
  static Tokenizer from_data(const model::TokenizerData& data);

  // parse_special = true: CONTROL and USER_DEFINED tokens written in the text
  // become their ids, as llama.cpp's parse_special does (longer tokens claim
  // their occurrences first); false: the whole text is BPE. Never adds BOS/EOS.
  // Invalid UTF-8 is read as llama.cpp reads it (see pre_tokenizer.h).
  std::vector<TokenId> encode(std::string_view text, bool parse_special) const;
  // Which special-token literals in the text become their ids: None (the
  // whole text is BPE; encode(text, false)), All (encode(text, true)), or
  // UserDefined: only USER_DEFINED ones, which is what llama.cpp's
  // llama_tokenize does with parse_special = false (its partition skips only
  // CONTROL and UNKNOWN tokens), so llama-imatrix's and llama-perplexity's
  // tokens of a text file.
  enum class SpecialTokens { None, UserDefined, All };
  std::vector<TokenId> encode(std::string_view text, SpecialTokens specials) const;

  // The bytes a token stands for (possibly part of a UTF-8 character); control
  // and user-defined tokens give their text. ds4::Error for an id out of range.
  std::string token_bytes(TokenId id) const;
  // Concatenated token_bytes.
  std::string decode(std::span<const TokenId> ids) const;

  uint32_t vocab_size() const;
  TokenId bos() const;
  TokenId eos() const;
  TokenId user() const;
  TokenId assistant() const;
  TokenId think() const;
  TokenId end_think() const;
  TokenId dsml() const;
  // Exact token string (the table's text, e.g. "Ġthe") -> id.
  std::optional<TokenId> find(std::string_view token_text) const;
  // CONTROL or USER_DEFINED.
  bool is_special(TokenId id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Turns a token stream into text without ever splitting a UTF-8 character.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer);
  // Bytes of complete UTF-8 characters; an incomplete tail that may still be
  // completed is held back. Bytes that can never form a character pass through.
  std::string push(TokenId id);
  // Whatever is held (incomplete/invalid bytes), then empty.
  std::string flush();

 private:
  Tokenizer tokenizer_;  // shares the table (cheap copy)
  std::string pending_;
};

}  // namespace ds4::text
