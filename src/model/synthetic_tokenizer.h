// Tokenizer metadata (tokenizer.ggml.*) for deepseek4 files: GPT-2 style
// byte-level BPE, as llama.cpp's "gpt2" vocabulary and ds4 read it.
//  - make_synthetic_tokenizer: 256 byte tokens + merges learned
//    deterministically from a small embedded English/code text + the DeepSeek
//    V4 special tokens, for random-weight test models.
//  - import_hf_tokenizer: a Hugging Face tokenizer.json (BPE vocab, merges,
//    added_tokens) of the DeepSeek V3/V4 family, completed with the V4 special
//    tokens it lacks.
// Token types follow llama.cpp's converter: added tokens that are special or
// look like `<｜…｜>` / `<|…|>` are CONTROL, other added tokens USER_DEFINED
// (so `<think>`, `</think>`, `｜DSML｜` decode as text), vocabulary and byte
// tokens NORMAL, padding UNUSED. Ids no token occupies are filled with
// "[PAD<id>]" (UNUSED) so the table length equals the vocab size, as the loader
// requires.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::gguf {
class File;
class Writer;
}  // namespace ds4::gguf

namespace ds4::model {

// llama.cpp's token types (tokenizer.ggml.token_type values).
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// llama.cpp maps both "joyai-llm" and "deepseek-v3" to DeepSeek V3's three
// split regexes; the published V4 files say "joyai-llm".
inline constexpr std::string_view kDeepseekPreTokenizer = "joyai-llm";

struct SpecialToken {
  std::string_view text;
  uint32_t v4_id;  // id in DeepSeek V4's 129280-entry vocabulary
  TokenType type;
};
// BOS, EOS, pad, FIM, User/Assistant, legacy EOT and tool tokens, <think>,
// </think>, ｜DSML｜, <｜latest_reminder｜> (PROTOCOL.md §1.2). The internal
// task tokens 128829.. are not included (their texts are not all known and no
// engine uses them).
std::span<const SpecialToken> v4_special_tokens();
inline constexpr std::string_view kBosText = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosText = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kPadText = "<｜▁pad▁｜>";
// Smallest table that holds the byte tokens and every special token compactly.
uint32_t min_synthetic_vocab();
// Vocab sizes at or above this place the specials at their real V4 ids.
inline constexpr uint32_t kV4VocabSize = 129280;

struct TokenizerData {
  std::string model = "gpt2";
  std::string pre = std::string(kDeepseekPreTokenizer);
  std::vector<std::string> tokens;   // index = id
  std::vector<int32_t> token_types;  // TokenType per id
  std::vector<std::string> merges;   // "LEFT RIGHT", rank = index
  uint32_t bos_id = 0;
  uint32_t eos_id = 1;
  std::optional<uint32_t> pad_id;
  bool add_bos = true;
  bool add_eos = false;

  uint32_t size() const { return static_cast<uint32_t>(tokens.size()); }
  std::optional<uint32_t> find(std::string_view text) const;  // linear scan

  // Writes every tokenizer.ggml.* key.
  void write(gguf::Writer& w) const;
  // Reads them back (throws ds4::Error naming the file and key).
  static TokenizerData read(const gguf::File& f);
  // Consistency rules: types per token, unique tokens, merges "A B" with both
  // parts and their concatenation in the table, bos/eos/pad in range, every
  // V4 special present. Throws ds4::Error naming the first violation.
  void validate() const;
};

// Synthetic vocabulary of exactly n_vocab entries (>= min_synthetic_vocab()):
// ids 0/1/2 = BOS/EOS/pad, then the 256 byte tokens in GPT-2 order, then
// learned merges; the other specials take the last ids, or their V4 ids when
// n_vocab >= kV4VocabSize. When the embedded text runs out of pairs seen twice
// the rest is "[PAD<id>]".
TokenizerData make_synthetic_tokenizer(uint32_t n_vocab);

// Imports tokenizer.json. The table length is max(min_vocab, max id + 1);
// an explicit n_vocab must cover max id + 1. Throws ds4::Error for a file that
// is not a byte-level BPE with DeepSeek's pre-tokenizer, duplicate tokens or
// ids, or merges that are not pairs.
TokenizerData import_hf_tokenizer(const std::string& path, uint32_t min_vocab, bool vocab_is_exact);

// GPT-2's byte-to-unicode symbol of byte b, UTF-8 encoded (space -> "Ġ").
std::string gpt2_byte_symbol(uint8_t b);

}  // namespace ds4::model
