// The pre-tokenizer: cuts text into the pieces that BPE then works on
// independently. For tokenizer.ggml.pre "deepseek-v3" / "joyai-llm" these are
// DeepSeek V3's three split regexes (PROTOCOL.md §1.3) applied in sequence, each
// one isolating its matches (and the gaps between them) inside every piece the
// previous one produced — Hugging Face's Sequence[Split(Isolated)] and
// llama.cpp's unicode_regex_split. Matching uses PCRE2 (UTF + UCP, JIT).
//
// Input need not be valid UTF-8. It is first read as llama.cpp reads it: a byte
// that does not start a well-formed sequence becomes U+FFFD (one per byte),
// overlong forms decode to their code point and are re-encoded shortest,
// surrogates pass through. (Sequences beyond U+10FFFF, where llama.cpp throws,
// become U+FFFD per byte.) Pieces are slices of that repaired text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::text {

class PreTokenizer {
 public:
  // ds4::Error for a pre-tokenizer type this engine does not implement.
  static PreTokenizer for_type(std::string_view pre);

  const std::string& type() const;

  // Calls sink(ctx, piece) for every piece of `text`, in order; the pieces
  // concatenate to the repaired text. Thread-safe.
  using PieceSink = void (*)(void* ctx, std::string_view piece);
  void split(std::string_view text, PieceSink sink, void* ctx) const;
  // Convenience: the pieces as strings.
  std::vector<std::string> split(std::string_view text) const;

  struct Regexes;  // compiled patterns (pre_tokenizer.cpp)

 private:
  explicit PreTokenizer(std::shared_ptr<const Regexes> r) : regexes_(std::move(r)) {}
  std::shared_ptr<const Regexes> regexes_;
};

// llama.cpp's reading of possibly invalid UTF-8 (see above), re-encoded. Returns
// `text` unchanged when it is already valid UTF-8.
std::string repair_utf8(std::string_view text);
// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or
// code points above U+10FFFF).
bool is_valid_utf8(std::string_view text);

}  // namespace ds4::text
