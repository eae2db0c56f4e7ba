// Forced tool calls as constrained decoding (OpenAI tool_choice "required" /
// a named function, Anthropic tool_choice "any" / "tool"): at every step the
// tokens that cannot continue one valid DSML tool block (PROTOCOL.md §3.1) for
// the request's tools are masked out, so the model's own logits choose among
// the valid continuations (tool name, enum value, string bytes, digits, when
// to close a string, whether to give an optional parameter).
//
// The accepted text, exactly:
//   "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"NAME\">\n"
//   + per parameter "<｜DSML｜parameter name=\"K\" string=\"true|false\">VALUE</｜DSML｜parameter>\n"
//   + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
// one invoke; NAME a tool name (or the forced one); parameters in the schema's
// `properties` order, required ones always, optional ones skippable. Values by
// property schema:
//  - `enum`: one of its values (strings raw with string="true", others as
//    minified JSON with string="false"); string values holding '<' are left out;
//  - string: UTF-8 text without '<' (so no tag can be forged), minLength..maxLength
//    bytes (defaults: at least 1 byte, at most 256);
//  - integer: -?(0|[1-9][0-9]{0,17}); number: the same plus an optional
//    fraction of 1..17 digits; boolean: true|false; null: null;
//  - object: {} and array: [] only; no type: null (a known limit: nested
//    structure is not generated). A type list takes its first non-"null" entry.
// Tool and parameter names holding '"', '<', '>' or a line break are refused
// (ds4::Error), since DSML attributes have no escape the parser reverses.
//
// Thinking mode: everything but EOS passes until the generated text holds
// `</think>`; the block is forced right after it. Non-thinking: from the first
// token. EOS is never allowed before the block is complete; afterwards only EOS.
//
// Masking walks a byte trie of the vocabulary (VocabTrie, built once per
// tokenizer and shareable between requests) together with the byte automaton,
// pruning every subtree the automaton rejects: a token is allowed iff all its
// bytes are accepted from the current state (special tokens count as their
// text). Empty tokens are never allowed.
//
// Copies are cheap (the automaton and the trie are shared, immutable) and
// independent: generate() advances its own copy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds4::text {
class Tokenizer;
}

namespace ds4::runtime {

// Every token's bytes in a byte trie: nodes in depth-first order, each with
// its children sorted by byte and the tokens that end exactly there.
class VocabTrie {
 public:
  explicit VocabTrie(const text::Tokenizer& tokenizer);

  struct Node {
    uint32_t first_child = 0;  // index into children_
    uint32_t child_count = 0;
    uint32_t first_token = 0;  // index into tokens_: first the tokens ending here, then the subtree's
    uint32_t token_count = 0;
    uint32_t subtree_end = 0;  // the subtree's tokens are tokens_[first_token, subtree_end)
    uint32_t height = 0;       // the most bytes any token of the subtree has beyond this node
    uint32_t depth = 0;        // bytes from the root
    uint8_t flags = 0;
  };
  // What every byte below a node is like, for taking whole subtrees at once.
  static constexpr uint8_t kNoLessThanBelow = 1;  // no '<'
  // Only bytes a string value may hold: valid UTF-8 read from a character
  // boundary at this node (the last character may stay open), no '<', no
  // control characters but tab, CR and LF.
  static constexpr uint8_t kTextBelow = 2;
  struct Child {
    uint8_t byte;
    uint32_t node;
  };

  const Node& node(uint32_t i) const { return nodes_[i]; }
  std::span<const Child> children(const Node& n) const { return {children_.data() + n.first_child, n.child_count}; }
  std::span<const int32_t> tokens(const Node& n) const { return {tokens_.data() + n.first_token, n.token_count}; }
  // The tokens strictly below a node, and for each how far it reaches from
  // the root: its length plus the bytes its last character still owes.
  std::span<const int32_t> tokens_below(const Node& n) const {
    return {tokens_.data() + n.first_token + n.token_count, n.subtree_end - n.first_token - n.token_count};
  }
  std::span<const uint32_t> reach_below(const Node& n) const {
    return {reach_.data() + n.first_token + n.token_count, n.subtree_end - n.first_token - n.token_count};
  }
  // The child reached by `byte`, or 0 (the root is nobody's child).
  uint32_t child(uint32_t node, uint8_t byte) const;
  static constexpr uint32_t kRoot = 0;

  uint32_t vocab_size() const { return vocab_size_; }
  int32_t eos() const { return eos_; }
  const std::string& token_bytes(int32_t id) const { return bytes_.at(static_cast<size_t>(id)); }
  size_t node_count() const { return nodes_.size(); }

 private:
  std::vector<Node> nodes_;
  std::vector<Child> children_;
  std::vector<int32_t> tokens_;
  std::vector<uint32_t> reach_;  // parallel to tokens_
  std::vector<std::string> bytes_;
  uint32_t root_index_[256] = {};  // children of the root by byte (the widest node)
  uint32_t vocab_size_ = 0;
  int32_t eos_ = -1;
};

class ToolCallConstraint {
 public:
  // tools: the OpenAI tools array ([{type:function, function:{name, description,
  // parameters}}]); forced_name "" = any of them. ds4::Error for no tools, an
  // unknown forced name, a name DSML cannot carry or an unusable schema.
  ToolCallConstraint(const nlohmann::ordered_json& tools, std::string forced_name, const text::Tokenizer& tokenizer,
                     bool thinking);
  // The same with a trie built earlier for the same tokenizer (no per-request build).
  ToolCallConstraint(const nlohmann::ordered_json& tools, std::string forced_name,
                     std::shared_ptr<const VocabTrie> vocab, bool thinking);

  // Sets every logit whose token cannot come next to -infinity. ds4::Error if
  // the vocabulary has no allowed token at all (a dead end) or the size differs.
  void mask(std::span<float> logits) const;
  // The allowed token ids, ascending.
  std::vector<int32_t> allowed_tokens() const;
  bool allows(int32_t token) const;
  // Advances by a token; ds4::Error if it was not allowed.
  void accept(int32_t token);
  // The closing </｜DSML｜tool_calls> was generated.
  bool complete() const;
  // Everything accepted so far.
  const std::string& text() const { return text_; }

  // Byte-level check (tests, diagnostics): would these bytes be accepted from
  // the current state? `feed` advances over them (ds4::Error if rejected).
  bool accepts_bytes(std::string_view bytes) const;
  void feed_bytes(std::string_view bytes);

  struct Grammar;  // the byte automaton (tool_call_constraint.cpp)
  // Where the automaton stands. node < 0: reasoning before </think>, with
  // `count` bytes of "</think>" matched.
  struct State {
    int32_t node = 0;
    uint32_t count = 0;      // free string: bytes so far; reasoning: "</think>" bytes matched
    uint8_t utf8_need = 0;   // free string: continuation bytes still owed
    uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // the next continuation byte's range
  };

 private:
  void collect(uint32_t trie_node, const State& s, std::vector<int32_t>& out) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> vocab_;
  State state_;
  std::string text_;
};

}  // namespace ds4::runtime
