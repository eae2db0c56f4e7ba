#include "runtime/tool_call_constraint.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "core/error.h"
#include "text/tokenizer.h"

namespace ds4::runtime {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kEndThink = "</think>";
constexpr std::string_view kBlockStart = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"";
constexpr std::string_view kBlockEnd = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
constexpr std::string_view kParamOpen = "<｜DSML｜parameter name=\"";
constexpr std::string_view kParamClose = "</｜DSML｜parameter>\n";
constexpr uint32_t kDefaultMinLength = 1;
constexpr uint32_t kDefaultMaxLength = 256;
constexpr uint32_t kLengthCeiling = 1u << 30;
constexpr int kIntegerDigits = 18;
constexpr int kFractionDigits = 17;

// DSML attributes are raw: these would end or break the tag.
void check_name(const std::string& name, const std::string& what) {
  if (name.empty()) throw Error("tool_choice: a " + what + " has an empty name");
  if (name.find_first_of("\"<>\n\r") != std::string::npos) {
    throw Error("tool_choice: " + what + " name \"" + name +
                "\" holds a character DSML cannot carry (\" < > or a line break)");
  }
}

uint32_t length_bound(const Json& schema, const char* key, uint32_t fallback) {
  const auto it = schema.find(key);
  if (it == schema.end() || !it->is_number()) return fallback;
  const double v = it->get<double>();
  if (!(v >= 0)) return fallback;
  return static_cast<uint32_t>(std::min<double>(v, kLengthCeiling));
}

// The schema's type: a type list gives its first entry other than "null".
std::string schema_type(const Json& schema) {
  const auto it = schema.find("type");
  if (it == schema.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string first;
    for (const Json& t : *it) {
      if (!t.is_string()) continue;
      if (t.get<std::string>() != "null") return t.get<std::string>();
      first = "null";
    }
    return first;
  }
  return "";
}

// Where a UTF-8 reader stands: continuation bytes owed and the next one's range.
struct Utf8 {
  uint8_t need = 0, lo = 0x80, hi = 0xBF;
};

// Advances over one byte; false for a byte valid UTF-8 cannot have here
// (overlong forms, surrogates and code points above U+10FFFF included).
bool utf8_step(Utf8& u, uint8_t b) {
  if (u.need > 0) {
    if (b < u.lo || b > u.hi) return false;
    u = Utf8{static_cast<uint8_t>(u.need - 1)};
    return true;
  }
  u = Utf8{};
  if (b < 0x80) return true;
  if (b >= 0xC2 && b <= 0xDF) {
    u.need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    u.need = 2;
    if (b == 0xE0) u.lo = 0xA0;  // no overlong forms
    if (b == 0xED) u.hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    u.need = 3;
    if (b == 0xF0) u.lo = 0x90;
    if (b == 0xF4) u.hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  return true;
}

// A byte of string value text: UTF-8 as above, no '<' (the closing tag cannot
// be forged) and no control characters but tab, CR and LF.
bool text_step(Utf8& u, uint8_t b) {
  if (u.need == 0 && b < 0x80) {
    const bool control = (b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F;
    if (control || b == '<') return false;
  }
  return utf8_step(u, b);
}

// Bytes the last character of `bytes` still owes (0 when it is complete).
uint32_t owed_bytes(std::string_view bytes) {
  for (size_t back = 1; back <= std::min<size_t>(4, bytes.size()); ++back) {
    const uint8_t b = static_cast<uint8_t>(bytes[bytes.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const uint32_t length = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return length > back ? static_cast<uint32_t>(length - back) : 0;
  }
  return 0;
}

}  // namespace

// --- the byte automaton ------------------------------------------------------

struct ToolCallConstraint::Grammar {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> edges;  // a literal position: byte -> next node
    bool free_string = false;                         // string value: text bytes (text_step) until '<'
    uint32_t min = 0, max = 0;                        // free string length bounds (bytes)
    int32_t exit = -1;                                // free string: the node after its closing '<'
    bool accept = false;                              // the block is complete
    int group = -1;                                   // which alternatives set made it (-1: anchor)
  };
  std::vector<Node> nodes;
  int32_t start = 0;
  int next_group = 0;

  int32_t add_node(int group = -1) {
    nodes.emplace_back();
    nodes.back().group = group;
    return static_cast<int32_t>(nodes.size() - 1);
  }

  void add_edge(int32_t from, uint8_t byte, int32_t to) {
    auto& edges = nodes[static_cast<size_t>(from)].edges;
    for (const auto& [b, t] : edges) {
      if (b != byte) continue;
      if (t == to) return;
      throw Error("tool_choice: the tool schemas give two meanings to the same DSML text");
    }
    edges.emplace_back(byte, to);
  }

  // Adds `text` from `from`, its last byte leading to `to`. Alternatives of one
  // group share their prefixes; walking into another group's node (one
  // alternative a prefix of another that leads elsewhere) is ambiguous.
  void insert(int32_t from, std::string_view text, int32_t to, int group) {
    int32_t at = from;
    for (size_t i = 0; i + 1 < text.size(); ++i) {
      const uint8_t byte = static_cast<uint8_t>(text[i]);
      int32_t next = -1;
      for (const auto& [b, t] : nodes[static_cast<size_t>(at)].edges) {
        if (b == byte) next = t;
      }
      if (next < 0) {
        next = add_node(group);
        add_edge(at, byte, next);
      } else if (nodes[static_cast<size_t>(next)].group != group) {
        throw Error("tool_choice: the tool schemas give two meanings to the same DSML text");
      }
      at = next;
    }
    add_edge(at, static_cast<uint8_t>(text.back()), to);
  }

  // -?(0|[1-9][0-9]{0,17}) and, for numbers, an optional .[0-9]{1,17}; then
  // '<' leads to `exit`.
  void add_number(int32_t from, int32_t exit, bool fraction) {
    const auto digit_edges = [&](int32_t a, int32_t b) {
      for (char c = '0'; c <= '9'; ++c) add_edge(a, static_cast<uint8_t>(c), b);
    };
    const int32_t minus = add_node();
    const int32_t zero = add_node();
    std::vector<int32_t> digits(kIntegerDigits);
    for (int32_t& d : digits) d = add_node();
    for (const int32_t s : {from, minus}) {
      add_edge(s, '0', zero);
      for (char c = '1'; c <= '9'; ++c) add_edge(s, static_cast<uint8_t>(c), digits[0]);
    }
    add_edge(from, '-', minus);
    for (int k = 0; k + 1 < kIntegerDigits; ++k) {
      digit_edges(digits[static_cast<size_t>(k)], digits[static_cast<size_t>(k) + 1]);
    }
    std::vector<int32_t> ends = digits;
    ends.push_back(zero);
    for (const int32_t e : ends) add_edge(e, '<', exit);
    if (!fraction) return;
    const int32_t dot = add_node();
    for (const int32_t e : ends) add_edge(e, '.', dot);
    std::vector<int32_t> frac(kFractionDigits);
    for (int32_t& d : frac) d = add_node();
    digit_edges(dot, frac[0]);
    for (int k = 0; k + 1 < kFractionDigits; ++k) {
      digit_edges(frac[static_cast<size_t>(k)], frac[static_cast<size_t>(k) + 1]);
    }
    for (const int32_t f : frac) add_edge(f, '<', exit);
  }

  // From `value` (after `string="`) to `next` (after the parameter's line).
  void add_value(const std::string& key, const Json& schema, int32_t value, int32_t next) {
    const int group = next_group++;
    const auto closed = [](std::string_view v) { return std::string(v) + std::string(kParamClose); };
    const auto alternative = [&](const Json& v) {
      if (v.is_string()) {
        const std::string s = v.get<std::string>();
        if (s.find('<') != std::string::npos) return false;
        insert(value, "true\">" + closed(s), next, group);
      } else {
        insert(value, "false\">" + closed(v.dump()), next, group);
      }
      return true;
    };
    const Json object = schema.is_object() ? schema : Json::object();
    if (const auto e = object.find("enum"); e != object.end() && e->is_array()) {
      std::set<std::string> seen;
      bool any = false;
      for (const Json& v : *e) {
        if (!seen.insert(v.dump()).second) continue;
        any = alternative(v) || any;
      }
      if (!any) throw Error("tool_choice: parameter \"" + key + "\" has no enum value DSML can carry");
      return;
    }
    if (const auto c = object.find("const"); c != object.end()) {
      if (!alternative(*c)) throw Error("tool_choice: parameter \"" + key + "\" has a const DSML cannot carry");
      return;
    }
    const std::string type = schema_type(object);
    if (type == "string") {
      const uint32_t max = length_bound(object, "maxLength", kDefaultMaxLength);
      const uint32_t min = length_bound(object, "minLength", std::min(kDefaultMinLength, max));
      if (min > max) throw Error("tool_choice: parameter \"" + key + "\" has minLength above maxLength");
      if (max == 0) {  // only the empty string
        insert(value, "true\">" + closed(""), next, group);
        return;
      }
      const int32_t body = add_node();
      const int32_t exit = add_node();
      Node& n = nodes[static_cast<size_t>(body)];
      n.free_string = true;
      n.min = min;
      n.max = max;
      n.exit = exit;
      insert(value, "true\">", body, group);
      insert(exit, kParamClose.substr(1), next, next_group++);
    } else if (type == "integer" || type == "number") {
      const int32_t digits = add_node();
      const int32_t exit = add_node();
      insert(value, "false\">", digits, group);
      add_number(digits, exit, type == "number");
      insert(exit, kParamClose.substr(1), next, next_group++);
    } else if (type == "boolean") {
      insert(value, "false\">" + closed("true"), next, group);
      insert(value, "false\">" + closed("false"), next, group);
    } else if (type == "object") {
      insert(value, "false\">" + closed("{}"), next, group);
    } else if (type == "array") {
      insert(value, "false\">" + closed("[]"), next, group);
    } else {  // null, no type, or a type we do not generate
      insert(value, "false\">" + closed("null"), next, group);
    }
  }

  // The invoke line of one tool onwards, from `name_start` (after `name="`).
  void add_tool(const std::string& name, const Json& parameters, int32_t name_start, int name_group,
                int32_t accept) {
    std::vector<std::pair<std::string, Json>> props;
    std::set<std::string> required;
    if (parameters.is_object()) {
      if (const auto p = parameters.find("properties"); p != parameters.end() && p->is_object()) {
        for (const auto& [k, v] : p->items()) {
          check_name(k, "parameter");
          props.emplace_back(k, v);
        }
      }
      if (const auto r = parameters.find("required"); r != parameters.end() && r->is_array()) {
        for (const Json& k : *r) {
          if (k.is_string()) required.insert(k.get<std::string>());
        }
      }
    }
    const size_t n = props.size();
    // positions[i]: before parameter i (or a later optional one, or the invoke close).
    std::vector<int32_t> positions(n + 1);
    for (int32_t& p : positions) p = add_node();
    std::vector<int32_t> values(n);
    for (size_t j = 0; j < n; ++j) {
      values[j] = add_node();
      add_value(props[j].first, props[j].second, values[j], positions[j + 1]);
    }
    for (size_t i = 0; i <= n; ++i) {
      const int group = next_group++;
      size_t j = i;
      for (; j < n; ++j) {
        insert(positions[i], std::string(kParamOpen) + props[j].first + "\" string=\"", values[j], group);
        if (required.count(props[j].first)) break;
      }
      if (j == n) insert(positions[i], kBlockEnd, accept, group);
    }
    insert(name_start, name + "\">\n", positions[0], name_group);
  }

  // Advances s by one byte; false if the byte cannot come next.
  bool step(State& s, uint8_t b) const {
    if (s.node < 0) {
      if (b == static_cast<uint8_t>(kEndThink[s.count])) {
        if (++s.count == kEndThink.size()) s = State{start};
      } else {
        s.count = b == '<' ? 1 : 0;
      }
      return true;
    }
    const Node& n = nodes[static_cast<size_t>(s.node)];
    if (n.free_string) return step_string(n, s, b);
    for (const auto& [eb, to] : n.edges) {
      if (eb == b) {
        s = State{to};
        return true;
      }
    }
    return false;
  }

  static bool step_string(const Node& n, State& s, uint8_t b) {
    if (b == '<' && s.utf8_need == 0) {
      if (s.count < n.min) return false;
      s = State{n.exit};
      return true;
    }
    Utf8 u{s.utf8_need, s.utf8_lo, s.utf8_hi};
    const bool boundary = u.need == 0;
    if (!text_step(u, b)) return false;
    if (boundary && s.count + 1 + u.need > n.max) return false;  // the whole character must fit
    ++s.count;
    s.utf8_need = u.need;
    s.utf8_lo = u.lo;
    s.utf8_hi = u.hi;
    return true;
  }

  // Whether the tokens below trie node `t` can be judged without walking
  // (state s at t): the reasoning matcher cannot meet '<' there, or the
  // string body only meets text bytes there, so the length cap alone decides.
  // Then `room` is how far from the root a token may reach.
  bool judges_subtree(const VocabTrie::Node& t, const State& s, uint32_t& room) const {
    room = std::numeric_limits<uint32_t>::max();
    if (s.node < 0) return s.count == 0 && (t.flags & VocabTrie::kNoLessThanBelow);
    const Node& n = nodes[static_cast<size_t>(s.node)];
    if (s.utf8_need != 0 || !(t.flags & VocabTrie::kTextBelow)) return false;
    room = t.depth + (n.max - s.count);
    return true;
  }

  bool wide(const State& s) const { return s.node < 0 || nodes[static_cast<size_t>(s.node)].free_string; }
  bool complete(const State& s) const { return s.node >= 0 && nodes[static_cast<size_t>(s.node)].accept; }
};

namespace {

std::shared_ptr<const ToolCallConstraint::Grammar> build_grammar(const Json& tools, const std::string& forced) {
  if (!tools.is_array() || tools.empty()) throw Error("tool_choice: a forced tool call needs tools");
  auto g = std::make_shared<ToolCallConstraint::Grammar>();
  g->start = g->add_node();
  const int32_t name_start = g->add_node();
  const int32_t accept = g->add_node();
  g->nodes[static_cast<size_t>(accept)].accept = true;
  g->insert(g->start, kBlockStart, name_start, g->next_group++);
  const int name_group = g->next_group++;
  std::set<std::string> names;
  for (const Json& tool : tools) {
    // OpenAI {type, function:{name, parameters}}; a bare {name, parameters|input_schema} also works.
    const Json& fn = tool.is_object() && tool.contains("function") ? tool["function"] : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) {
      throw Error("tool_choice: a tool has no function name");
    }
    const std::string name = fn["name"].get<std::string>();
    if (!forced.empty() && name != forced) continue;
    if (!names.insert(name).second) continue;  // a repeated tool: the first one counts
    check_name(name, "tool");
    Json parameters = Json::object();
    if (fn.contains("parameters")) {
      parameters = fn["parameters"];
    } else if (fn.contains("input_schema")) {
      parameters = fn["input_schema"];
    }
    g->add_tool(name, parameters, name_start, name_group, accept);
  }
  if (names.empty()) throw Error("tool_choice: no tool named \"" + forced + "\" among the request's tools");
  return g;
}

}  // namespace

// --- the vocabulary trie -----------------------------------------------------

VocabTrie::VocabTrie(const text::Tokenizer& tokenizer) {
  vocab_size_ = tokenizer.vocab_size();
  eos_ = tokenizer.eos();
  bytes_.resize(vocab_size_);
  for (uint32_t id = 0; id < vocab_size_; ++id) bytes_[id] = tokenizer.token_bytes(static_cast<int32_t>(id));
  tokens_.resize(vocab_size_);
  std::iota(tokens_.begin(), tokens_.end(), 0);
  std::sort(tokens_.begin(), tokens_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  // Sorted by bytes, every trie node's tokens form one range: the ones ending
  // at the node come first, then one subrange per next byte.
  struct Builder {
    VocabTrie& t;
    uint32_t build(size_t lo, size_t hi, size_t depth) {
      const uint32_t index = static_cast<uint32_t>(t.nodes_.size());
      t.nodes_.emplace_back();
      size_t mid = lo;
      while (mid < hi && t.bytes_[static_cast<size_t>(t.tokens_[mid])].size() == depth) ++mid;
      t.nodes_[index].first_token = static_cast<uint32_t>(lo);
      t.nodes_[index].token_count = static_cast<uint32_t>(mid - lo);
      t.nodes_[index].subtree_end = static_cast<uint32_t>(hi);
      std::vector<std::pair<size_t, size_t>> ranges;
      for (size_t a = mid; a < hi;) {
        const char c = t.bytes_[static_cast<size_t>(t.tokens_[a])][depth];
        size_t b = a + 1;
        while (b < hi && t.bytes_[static_cast<size_t>(t.tokens_[b])][depth] == c) ++b;
        ranges.emplace_back(a, b);
        a = b;
      }
      const size_t first = t.children_.size();
      t.nodes_[index].first_child = static_cast<uint32_t>(first);
      t.nodes_[index].child_count = static_cast<uint32_t>(ranges.size());
      for (const auto& [a, b] : ranges) {
        t.children_.push_back(Child{static_cast<uint8_t>(t.bytes_[static_cast<size_t>(t.tokens_[a])][depth]), 0});
      }
      for (size_t k = 0; k < ranges.size(); ++k) {
        const uint32_t child = build(ranges[k].first, ranges[k].second, depth + 1);
        t.children_[first + k].node = child;
      }
      // The children are complete: summarise what lies below this node.
      uint32_t height = 0;
      bool no_lt = true;
      bool text = true;
      for (const Child& c : t.children(t.nodes_[index])) {
        const Node& n = t.nodes_[c.node];
        height = std::max(height, n.height + 1);
        no_lt = no_lt && c.byte != '<' && (n.flags & kNoLessThanBelow);
        Utf8 u;
        text = text && text_step(u, c.byte) && valid_below(c.node, u);
      }
      Node& n = t.nodes_[index];
      n.height = height;
      n.depth = static_cast<uint32_t>(depth);
      n.flags = static_cast<uint8_t>((no_lt ? kNoLessThanBelow : 0) | (text ? kTextBelow : 0));
      return index;
    }
    // Every path below `node` continues valid UTF-8 from reader state u (no '<').
    bool valid_below(uint32_t node, Utf8 u) const {
      const Node& n = t.nodes_[node];
      if (u.need == 0) return n.flags & kTextBelow;
      for (const Child& c : t.children(n)) {
        Utf8 next = u;
        if (!text_step(next, c.byte) || !valid_below(c.node, next)) return false;
      }
      return true;
    }
  };
  Builder{*this}.build(0, tokens_.size(), 0);
  reach_.resize(tokens_.size());
  for (size_t p = 0; p < tokens_.size(); ++p) {
    const std::string& b = bytes_[static_cast<size_t>(tokens_[p])];
    reach_[p] = static_cast<uint32_t>(b.size()) + owed_bytes(b);
  }
  for (const Child& c : children(nodes_[kRoot])) root_index_[c.byte] = c.node;
}

uint32_t VocabTrie::child(uint32_t node, uint8_t byte) const {
  if (node == kRoot) return root_index_[byte];
  const std::span<const Child> kids = children(nodes_[node]);
  if (kids.size() <= 8) {
    for (const Child& c : kids) {
      if (c.byte == byte) return c.node;
    }
    return 0;
  }
  const auto it =
      std::lower_bound(kids.begin(), kids.end(), byte, [](const Child& c, uint8_t b) { return c.byte < b; });
  return it != kids.end() && it->byte == byte ? it->node : 0;
}

// --- the constraint ----------------------------------------------------------

ToolCallConstraint::ToolCallConstraint(const nlohmann::ordered_json& tools, std::string forced_name,
                                       const text::Tokenizer& tokenizer, bool thinking)
    : ToolCallConstraint(tools, std::move(forced_name), std::make_shared<const VocabTrie>(tokenizer), thinking) {}

ToolCallConstraint::ToolCallConstraint(const nlohmann::ordered_json& tools, std::string forced_name,
                                       std::shared_ptr<const VocabTrie> vocab, bool thinking)
    : grammar_(build_grammar(tools, forced_name)), vocab_(std::move(vocab)) {
  if (!vocab_) throw Error("tool_choice: no vocabulary");
  state_ = thinking ? State{-1} : State{grammar_->start};
}

bool ToolCallConstraint::complete() const { return grammar_->complete(state_); }

void ToolCallConstraint::collect(uint32_t trie_node, const State& s, std::vector<int32_t>& out) const {
  const VocabTrie& trie = *vocab_;
  const int32_t eos = trie.eos();
  const auto take = [&](uint32_t child, const State& next) {
    for (const int32_t id : trie.tokens(trie.node(child))) {
      if (id != eos) out.push_back(id);
    }
    if (trie.node(child).child_count > 0) collect(child, next, out);
  };
  if (grammar_->wide(s)) {
    const VocabTrie::Node& here = trie.node(trie_node);
    // Below the root (whose tokens are the empty ones), a whole subtree at once.
    uint32_t room = 0;
    if (trie_node != VocabTrie::kRoot && grammar_->judges_subtree(here, s, room)) {
      const std::span<const int32_t> ids = trie.tokens_below(here);
      const std::span<const uint32_t> reach = trie.reach_below(here);
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] != eos && reach[k] <= room) out.push_back(ids[k]);
      }
      return;
    }
    for (const VocabTrie::Child& c : trie.children(trie.node(trie_node))) {
      State next = s;
      if (grammar_->step(next, c.byte)) take(c.node, next);
    }
  } else {
    for (const auto& [byte, to] : grammar_->nodes[static_cast<size_t>(s.node)].edges) {
      const uint32_t child = trie.child(trie_node, byte);
      if (child != 0) take(child, State{to});
    }
  }
}

std::vector<int32_t> ToolCallConstraint::allowed_tokens() const {
  std::vector<int32_t> out;
  if (complete()) {
    out.push_back(vocab_->eos());
    return out;
  }
  collect(VocabTrie::kRoot, state_, out);
  std::sort(out.begin(), out.end());
  return out;
}

void ToolCallConstraint::mask(std::span<float> logits) const {
  if (logits.size() != vocab_->vocab_size()) {
    throw Error("tool_choice: " + std::to_string(logits.size()) + " logits for a vocabulary of " +
                std::to_string(vocab_->vocab_size()));
  }
  std::vector<int32_t> ids;
  if (complete()) {
    ids.push_back(vocab_->eos());
  } else {
    ids.reserve(grammar_->wide(state_) ? vocab_->vocab_size() : 64);
    collect(VocabTrie::kRoot, state_, ids);
  }
  if (ids.empty()) throw Error("tool_choice: no token of the vocabulary can continue the tool call");
  std::vector<float> kept(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) kept[k] = logits[static_cast<size_t>(ids[k])];
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  for (size_t k = 0; k < ids.size(); ++k) logits[static_cast<size_t>(ids[k])] = kept[k];
}

bool ToolCallConstraint::accepts_bytes(std::string_view bytes) const {
  State s = state_;
  for (const char c : bytes) {
    if (!grammar_->step(s, static_cast<uint8_t>(c))) return false;
  }
  return true;
}

void ToolCallConstraint::feed_bytes(std::string_view bytes) {
  if (!accepts_bytes(bytes)) throw Error("tool_choice: the text cannot continue the tool call");
  for (const char c : bytes) grammar_->step(state_, static_cast<uint8_t>(c));
  text_.append(bytes);
}

bool ToolCallConstraint::allows(int32_t token) const {
  if (token < 0 || static_cast<uint32_t>(token) >= vocab_->vocab_size()) return false;
  if (complete()) return token == vocab_->eos();
  if (token == vocab_->eos()) return false;
  const std::string& bytes = vocab_->token_bytes(token);
  return !bytes.empty() && accepts_bytes(bytes);
}

void ToolCallConstraint::accept(int32_t token) {
  if (!allows(token)) throw Error("tool_choice: token " + std::to_string(token) + " cannot continue the tool call");
  if (token == vocab_->eos()) return;
  feed_bytes(vocab_->token_bytes(token));
}

}  // namespace ds4::runtime
