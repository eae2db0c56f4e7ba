#include "text/tokenizer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/gguf.h"
#include "model/synthetic_tokenizer.h"
#include "text/byte_level.h"
#include "text/pre_tokenizer.h"

namespace ds4::text {
namespace {

using model::TokenType;

constexpr int32_t kNoRank = INT32_MAX;

// (left id, right id) -> (rank, merged id), open addressing: the BPE inner
// loop looks pairs up constantly and std::unordered_map is several times slower.
class MergeTable {
 public:
  void build(const std::vector<std::pair<uint64_t, std::pair<int32_t, TokenId>>>& entries) {
    size_t cap = 16;
    while (cap < entries.size() * 2) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, kNoRank, -1});
    mask_ = cap - 1;
    for (const auto& [key, value] : entries) {
      size_t i = index(key);
      while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
      if (slots_[i].key == key) continue;  // a repeated pair keeps its first (lowest) rank
      slots_[i] = Slot{key, value.first, value.second};
    }
  }
  // Rank and result of merging a with b; rank kNoRank when there is no such merge.
  std::pair<int32_t, TokenId> find(TokenId a, TokenId b) const {
    const uint64_t key = pair_key(a, b);
    size_t i = index(key);
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return {s.rank, s.result};
      if (s.key == kEmpty) return {kNoRank, -1};
      i = (i + 1) & mask_;
    }
  }
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key;
    int32_t rank;
    TokenId result;
  };
  size_t index(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Special tokens, found by a byte trie so that only bytes that can start one
// cost more than a table lookup.
class SpecialMatcher {
 public:
  struct Token {
    TokenId id;
    size_t length;
  };
  struct Match {
    size_t priority;  // index into tokens_: longer first, then lower id
    size_t start;
  };

  void build(std::vector<Token> tokens, const std::vector<std::string>& texts) {
    std::sort(tokens.begin(), tokens.end(), [](const Token& a, const Token& b) {
      return a.length != b.length ? a.length > b.length : a.id < b.id;
    });
    tokens_ = std::move(tokens);
    nodes_.assign(1, Node{});
    starts_.fill(false);
    for (size_t k = 0; k < tokens_.size(); ++k) {
      const std::string& t = texts[static_cast<size_t>(tokens_[k].id)];
      starts_[static_cast<unsigned char>(t[0])] = true;
      int32_t node = 0;
      for (unsigned char c : t) {
        int32_t next = child(node, c);
        if (next < 0) {
          next = static_cast<int32_t>(nodes_.size());
          nodes_[static_cast<size_t>(node)].edges.emplace_back(c, next);
          nodes_.push_back(Node{});
        }
        node = next;
      }
      if (nodes_[static_cast<size_t>(node)].token < 0) nodes_[static_cast<size_t>(node)].token = static_cast<int32_t>(k);
    }
  }
  bool empty() const { return tokens_.empty(); }
  const Token& token(size_t priority) const { return tokens_[priority]; }

  // Every occurrence of every special token in text (overlaps included).
  void find_all(std::string_view text, std::vector<Match>& out) const {
    out.clear();
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    for (size_t i = 0; i < n; ++i) {
      if (!starts_[s[i]]) continue;
      int32_t node = 0;
      for (size_t j = i; j < n; ++j) {
        node = child(node, s[j]);
        if (node < 0) break;
        const int32_t t = nodes_[static_cast<size_t>(node)].token;
        if (t >= 0) out.push_back(Match{static_cast<size_t>(t), i});
      }
    }
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> edges;
    int32_t token = -1;
  };
  int32_t child(int32_t node, unsigned char c) const {
    for (const auto& [b, next] : nodes_[static_cast<size_t>(node)].edges)
      if (b == c) return next;
    return -1;
  }
  std::vector<Token> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> starts_{};
};

// Recently seen pieces -> their ids, per thread. Most text repeats its words,
// so most pieces skip BPE. Fixed-size open addressing, cleared when full.
class PieceCache {
 public:
  static constexpr size_t kMaxPiece = 128;

  void reset_for(uint64_t owner) {
    if (owner == owner_) return;
    owner_ = owner;
    clear();
  }
  bool lookup(std::string_view piece, size_t hash, std::vector<TokenId>& out) const {
    if (slots_.empty()) return false;
    const size_t mask = slots_.size() - 1;
    size_t i = hash & mask;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return false;
      if (s.hash == hash && s.key_len == piece.size() && keys_.compare(s.key_off, s.key_len, piece) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
        return true;
      }
      i = (i + 1) & mask;
    }
  }
  void insert(std::string_view piece, size_t hash, const TokenId* ids, size_t n) {
    if (slots_.empty()) slots_.assign(kMinSlots, Slot{});
    if (used_ >= slots_.size() / 2) {
      if (slots_.size() < kMaxSlots) grow();
      else clear();
    }
    if (keys_.size() > (64u << 20)) clear();
    const size_t mask = slots_.size() - 1;
    size_t i = hash & mask;
    while (slots_[i].key_len != 0) i = (i + 1) & mask;
    slots_[i] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(piece.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + n);
    ++used_;
  }

 private:
  // Starts small and grows: a server tokenizes on many connection threads,
  // each with its own cache, most of them for a prompt or two.
  static constexpr size_t kMinSlots = size_t{1} << 10;
  static constexpr size_t kMaxSlots = size_t{1} << 16;
  struct Slot {
    size_t hash = 0;
    uint32_t key_off = 0, key_len = 0, ids_off = 0, ids_len = 0;
  };
  void grow() {
    std::vector<Slot> old(slots_.size() * 4, Slot{});
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key_len == 0) continue;
      size_t i = s.hash & mask;
      while (slots_[i].key_len != 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  void clear() {
    if (!slots_.empty()) std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<TokenId> ids_;
  size_t used_ = 0;
  uint64_t owner_ = 0;
};

std::atomic<uint64_t> next_tokenizer_uid{1};

// Literal texts of the ids the protocol needs (PROTOCOL.md §1.1).
constexpr std::string_view kUserText = "<｜User｜>";
constexpr std::string_view kAssistantText = "<｜Assistant｜>";
constexpr std::string_view kThinkText = "<think>";
constexpr std::string_view kEndThinkText = "</think>";
constexpr std::string_view kDsmlText = "｜DSML｜";

}  // namespace

struct Tokenizer::Impl {
  std::vector<std::string> texts;
  std::vector<std::string> bytes;
  std::vector<int32_t> types;
  std::unordered_map<std::string_view, TokenId> ids;  // views into texts
  std::array<TokenId, 256> byte_token{};
  MergeTable merges;
  SpecialMatcher specials;
  SpecialMatcher user_defined;  // the USER_DEFINED part of specials
  std::optional<PreTokenizer> pre;  // set by from_data
  TokenId bos = 0, eos = 0, user = 0, assistant = 0, think = 0, end_think = 0, dsml = 0;
  uint64_t uid = 0;

  void bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void bpe_long(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
  // The literals of `matcher`'s tokens as their ids, the rest plain.
  void encode_partitioned(std::string_view text, const SpecialMatcher& matcher, std::vector<TokenId>& out) const;
};

namespace {

// Per-thread scratch for the short-piece BPE loop.
struct BpeScratch {
  std::vector<TokenId> ids;
  std::vector<int32_t> ranks;
  std::vector<TokenId> merged;
};

}  // namespace

// Short pieces: arrays with the rank of every adjacent pair, merged in place
// (lowest rank, leftmost on ties), which is the order llama.cpp's queue pops.
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<TokenId>& out) const {
  const size_t n = piece.size();
  if (n > 64) {
    bpe_long(piece, out);
    return;
  }
  thread_local BpeScratch s;
  s.ids.resize(n);
  s.ranks.resize(n);
  s.merged.resize(n);
  TokenId* ids = s.ids.data();
  int32_t* ranks = s.ranks.data();
  TokenId* merged = s.merged.data();
  for (size_t i = 0; i < n; ++i) ids[i] = byte_token[static_cast<unsigned char>(piece[i])];
  size_t m = n;
  auto rank_at = [&](size_t i) {
    const auto [r, id] = merges.find(ids[i], ids[i + 1]);
    ranks[i] = r;
    merged[i] = id;
  };
  for (size_t i = 0; i + 1 < m; ++i) rank_at(i);
  while (m > 1) {
    size_t best = 0;
    int32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < m; ++i)
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    if (best_rank == kNoRank) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < m; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --m;
    if (best > 0) rank_at(best - 1);
    if (best + 1 < m) rank_at(best);
  }
  out.insert(out.end(), ids, ids + m);
}

// Long pieces (long words, whitespace runs): a linked list of symbols and a
// priority queue of candidate merges, as llama.cpp's BPE session does.
void Tokenizer::Impl::bpe_long(std::string_view piece, std::vector<TokenId>& out) const {
  const int n = static_cast<int>(piece.size());
  struct Symbol {
    TokenId id;
    int prev, next;
  };
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    sym[static_cast<size_t>(i)] = {byte_token[static_cast<unsigned char>(piece[static_cast<size_t>(i)])], i - 1,
                                   i + 1 < n ? i + 1 : -1};
  struct Candidate {
    int32_t rank;
    int left, right;
    TokenId left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const TokenId a = sym[static_cast<size_t>(left)].id, b = sym[static_cast<size_t>(right)].id;
    const auto [rank, id] = merges.find(a, b);
    if (rank != kNoRank) queue.push(Candidate{rank, left, right, a, b, id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[static_cast<size_t>(c.left)];
    Symbol& r = sym[static_cast<size_t>(c.right)];
    // Stale when either side was merged away or has grown since.
    if (l.id < 0 || r.id < 0 || l.next != c.right || l.id != c.left_id || r.id != c.right_id) continue;
    l.id = c.merged;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int i = 0; i >= 0 && i < n; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<TokenId>& out) const {
  thread_local PieceCache cache;
  cache.reset_for(uid);
  struct Ctx {
    const Impl* self;
    PieceCache* cache;
    std::vector<TokenId>* out;
  } ctx{this, &cache, &out};
  pre->split(
      text,
      [](void* p, std::string_view piece) {
        auto& c = *static_cast<Ctx*>(p);
        if (piece.size() > PieceCache::kMaxPiece) {
          c.self->bpe(piece, *c.out);
          return;
        }
        const size_t hash = std::hash<std::string_view>{}(piece);
        if (c.cache->lookup(piece, hash, *c.out)) return;
        const size_t before = c.out->size();
        c.self->bpe(piece, *c.out);
        c.cache->insert(piece, hash, c.out->data() + before, c.out->size() - before);
      },
      &ctx);
}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) { return from_data(model::TokenizerData::read(file)); }

Tokenizer Tokenizer::from_data(const model::TokenizerData& data) {
  auto fail = [](const std::string& what) { return Error("tokenizer: " + what); };
  if (data.model != "gpt2")
    throw fail("model '" + data.model + "' is not supported (this engine reads byte-level BPE, 'gpt2')");
  if (data.tokens.empty()) throw fail("the token table is empty");
  if (data.tokens.size() > static_cast<size_t>(INT32_MAX)) throw fail("the token table is too large");
  if (data.token_types.size() != data.tokens.size())
    throw fail(std::to_string(data.token_types.size()) + " token types for " + std::to_string(data.tokens.size()) +
               " tokens");
  auto impl = std::make_shared<Impl>();
  try {
    impl->pre.emplace(PreTokenizer::for_type(data.pre));
  } catch (const Error& e) {
    throw fail(e.what());
  }
  impl->texts = data.tokens;
  impl->types = data.token_types;
  const size_t n = impl->texts.size();
  impl->ids.reserve(n * 2);
  impl->bytes.resize(n);
  std::vector<SpecialMatcher::Token> specials, user_defined;
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = impl->texts[i];
    if (t.empty()) throw fail("token " + std::to_string(i) + " is empty");
    const auto id = static_cast<TokenId>(i);
    impl->ids[t] = id;  // a repeated text resolves to its last id, as in llama.cpp
    const int32_t type = impl->types[i];
    const bool special = type == static_cast<int32_t>(TokenType::Control) ||
                         type == static_cast<int32_t>(TokenType::UserDefined);
    impl->bytes[i] = special ? t : symbols_to_bytes(t);
    if (special) specials.push_back({id, t.size()});
    if (type == static_cast<int32_t>(TokenType::UserDefined)) user_defined.push_back({id, t.size()});
  }
  for (int b = 0; b < 256; ++b) {
    auto it = impl->ids.find(byte_symbol(static_cast<uint8_t>(b)));
    if (it == impl->ids.end())
      throw fail("byte token for byte " + std::to_string(b) + " ('" + std::string(byte_symbol(static_cast<uint8_t>(b))) +
                 "') missing");
    impl->byte_token[static_cast<size_t>(b)] = it->second;
  }
  std::vector<std::pair<uint64_t, std::pair<int32_t, TokenId>>> merges;
  merges.reserve(data.merges.size());
  for (size_t r = 0; r < data.merges.size(); ++r) {
    const std::string& m = data.merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      throw fail("merge " + std::to_string(r) + " '" + m + "' is not \"LEFT RIGHT\"");
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    auto l = impl->ids.find(left), rt = impl->ids.find(right);
    // Merges of symbols that are not tokens can never apply (every symbol BPE
    // builds is a token), so they are skipped; a merge into a non-token is an error.
    if (l == impl->ids.end() || rt == impl->ids.end()) continue;
    auto joined = impl->ids.find(std::string(left) + std::string(right));
    if (joined == impl->ids.end())
      throw fail("merge " + std::to_string(r) + " '" + m + "' makes a symbol missing from the token table");
    merges.push_back({MergeTable::pair_key(l->second, rt->second), {static_cast<int32_t>(r), joined->second}});
  }
  impl->merges.build(merges);
  impl->specials.build(std::move(specials), impl->texts);
  impl->user_defined.build(std::move(user_defined), impl->texts);
  auto need = [&](std::string_view text) {
    auto it = impl->ids.find(text);
    if (it == impl->ids.end()) throw fail("special token '" + std::string(text) + "' missing from the token table");
    return it->second;
  };
  impl->bos = need(model::kBosText);
  impl->eos = need(model::kEosText);
  impl->user = need(kUserText);
  impl->assistant = need(kAssistantText);
  impl->think = need(kThinkText);
  impl->end_think = need(kEndThinkText);
  impl->dsml = need(kDsmlText);
  impl->uid = next_tokenizer_uid.fetch_add(1);
  return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool parse_special) const {
  return encode(text, parse_special ? SpecialTokens::All : SpecialTokens::None);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, SpecialTokens specials) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 8);
  const Impl& d = *impl_;
  switch (specials) {
    case SpecialTokens::None: d.encode_plain(text, out); break;
    case SpecialTokens::UserDefined: d.encode_partitioned(text, d.user_defined, out); break;
    case SpecialTokens::All: d.encode_partitioned(text, d.specials, out); break;
  }
  return out;
}

void Tokenizer::Impl::encode_partitioned(std::string_view text, const SpecialMatcher& matcher,
                                         std::vector<TokenId>& out) const {
  std::vector<SpecialMatcher::Match> found;
  if (!matcher.empty()) matcher.find_all(text, found);
  if (found.empty()) {
    encode_plain(text, out);
    return;
  }
  // llama.cpp's tokenizer_st_partition: each special token, longest first,
  // claims its leftmost occurrences that lie wholly in text no other special
  // has claimed yet.
  std::sort(found.begin(), found.end(), [](const SpecialMatcher::Match& a, const SpecialMatcher::Match& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.start < b.start;
  });
  std::map<size_t, std::pair<size_t, TokenId>> claimed;  // start -> (end, id)
  for (const SpecialMatcher::Match& m : found) {
    const SpecialMatcher::Token& t = matcher.token(m.priority);
    const size_t end = m.start + t.length;
    auto after = claimed.lower_bound(end);  // first claim starting at or after our end
    if (after != claimed.begin() && std::prev(after)->second.first > m.start) continue;
    claimed.emplace(m.start, std::make_pair(end, t.id));
  }
  size_t at = 0;
  for (const auto& [start, claim] : claimed) {
    if (start > at) encode_plain(text.substr(at, start - at), out);
    out.push_back(claim.second);
    at = claim.first;
  }
  if (at < text.size()) encode_plain(text.substr(at), out);
}

std::string Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->bytes.size())
    throw Error("tokenizer: token id " + std::to_string(id) + " is outside the vocabulary of " +
                std::to_string(impl_->bytes.size()));
  return impl_->bytes[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  for (TokenId id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->bytes.size()) out += token_bytes(id);  // throws
    out += impl_->bytes[static_cast<size_t>(id)];
  }
  return out;
}

uint32_t Tokenizer::vocab_size() const { return static_cast<uint32_t>(impl_->texts.size()); }
TokenId Tokenizer::bos() const { return impl_->bos; }
TokenId Tokenizer::eos() const { return impl_->eos; }
TokenId Tokenizer::user() const { return impl_->user; }
TokenId Tokenizer::assistant() const { return impl_->assistant; }
TokenId Tokenizer::think() const { return impl_->think; }
TokenId Tokenizer::end_think() const { return impl_->end_think; }
TokenId Tokenizer::dsml() const { return impl_->dsml; }

std::optional<TokenId> Tokenizer::find(std::string_view token_text) const {
  auto it = impl_->ids.find(token_text);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->types.size()) return false;
  const int32_t t = impl_->types[static_cast<size_t>(id)];
  return t == static_cast<int32_t>(TokenType::Control) || t == static_cast<int32_t>(TokenType::UserDefined);
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

namespace {

// Length of the tail of s that is the start of a UTF-8 character still
// waiting for continuation bytes (0 when s ends on a boundary or on bytes
// that can never complete a character).
size_t incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    if (need <= back) return 0;  // ASCII, invalid lead, or already complete
    // The second byte narrows some leads (no overlong forms, surrogates or > U+10FFFF).
    if (back >= 2) {
      const auto c1 = static_cast<unsigned char>(s[n - back + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 > 0x8F))
        return 0;
    }
    return back;
  }
  return 0;
}

}  // namespace

std::string StreamingDetokenizer::push(TokenId id) {
  pending_ += tokenizer_.token_bytes(id);
  const size_t hold = incomplete_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace ds4::text
