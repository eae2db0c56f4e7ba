#include "model/synthetic_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <map>
#include <tuple>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/utf8.h"

namespace ds4::model {
namespace {

// A few kilobytes of plain English and code, written for this project, from
// which the synthetic tokenizer learns its merges. Any fixed text works; this
// one is varied enough that frequent words and code idioms become tokens.
constexpr std::string_view kSyntheticCorpus = R"corpus(The small model you are reading about has random weights, so it does not know anything.
It exists so that two programs can be compared on the same input and shown to agree.
When the engine and the reference read the same file, they should produce the same
numbers for every position of every sequence, and when they do not, the first place
where they differ tells us which part of the computation is wrong.

A tokenizer turns text into a list of numbers. This one works on bytes: every byte of
the input is first mapped to a printable character, and then pairs of neighbouring
symbols are merged, one rule at a time, in the order in which the rules were learned.
The rules come from counting which pairs appear most often in a piece of text like
this one. The more often a pair of symbols appears, the earlier its rule is learned,
and the shorter the resulting token list becomes for ordinary words such as the, and,
of, to, in, is, that, it, for, on, with, as, was, be, by, this, are, or, from, at.

Here is a short story. Once upon a time there was a little program that wanted to
write files. It opened a file, wrote a header, wrote the names of its tensors, and then
wrote the tensors themselves, one after another, each one padded to a multiple of the
alignment. When it was done, it closed the file and checked the size. The size was
right. Another program opened the same file, read the header, checked every offset and
every shape, and printed a summary. Both programs were happy, and the test passed.

The weather today is cold in the morning and warm in the afternoon. People walk to the
market, buy bread and fruit, talk with their neighbours, and come back home before the
evening. Some of them read a book, some write letters, and some cook dinner for their
family and friends. The children play in the garden until the sun goes down.

Numbers appear in text too: 1, 2, 3, 10, 42, 100, 256, 512, 1024, 2048, 4096, 65536,
3.14159, 2.71828, 0.5, 1e-6, 160000, and dates such as 2024-05-21 or 12/31/1999.
Prices like $19.99 and percentages like 35% are common in ordinary documents.

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& arg : args) {
    if (arg == "--help") {
      std::cout << "usage: tool [options] FILE" << std::endl;
      return 0;
    }
  }
  return run(args);
}

static float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    sum += a[i] * b[i];
  }
  return sum;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t size() const { return shape.empty() ? 0 : shape[0]; }
};

def softmax(values):
    largest = max(values)
    exps = [math.exp(v - largest) for v in values]
    total = sum(exps)
    return [e / total for e in exps]

def load_config(path):
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)

for index, value in enumerate(items):
    if value is None:
        continue
    print(f"{index}: {value}")

{"model": "deepseek4", "layers": 6, "hidden_size": 256, "vocab_size": 512, "experts": 16}
{"role": "user", "content": "What is the capital of France?"}
{"role": "assistant", "content": "The capital of France is Paris."}

A good function does one thing, has a name that says what it does, and returns a value
that the caller can check. A good test compares the result with something it did not
compute itself: a value from a paper, a second implementation, or a property that must
hold for every input. A test that cannot fail is not a test at all.

The attention layer looks at the previous tokens and decides which of them matter for
the current one. The mixture of experts sends each token to a few experts out of many,
and adds their outputs with weights that the router computes. The output head turns
the final hidden state into a score for every token in the vocabulary, and the sampler
picks the next token from those scores.

Questions and answers:
Q: How many layers does the model have?
A: That depends on the file; the number is stored in the metadata.
Q: Why are the weights random?
A: Because the point is to check the arithmetic, not to write poetry.
Q: What happens when the input is empty?
A: The program reports an error and exits with a non-zero status.

if (value < 0) {
  throw std::runtime_error("value must not be negative");
} else if (value == 0) {
  return nullptr;
} else {
  return std::make_unique<Node>(value);
}

while (!queue.empty()) {
  auto item = queue.front();
  queue.pop();
  process(item);
}

The end of the text is near. Thank you for reading, and have a nice day.
)corpus";

constexpr std::array<SpecialToken, 22> kV4Specials{{
    {kBosText, 0, TokenType::Control},
    {kEosText, 1, TokenType::Control},
    {kPadText, 2, TokenType::Control},
    {"<｜fim▁hole｜>", 128800, TokenType::Control},
    {"<｜fim▁begin｜>", 128801, TokenType::Control},
    {"<｜fim▁end｜>", 128802, TokenType::Control},
    {"<｜User｜>", 128803, TokenType::Control},
    {"<｜Assistant｜>", 128804, TokenType::Control},
    {"<|EOT|>", 128805, TokenType::Control},
    {"<｜tool▁calls▁begin｜>", 128806, TokenType::Control},
    {"<｜tool▁calls▁end｜>", 128807, TokenType::Control},
    {"<｜tool▁call▁begin｜>", 128808, TokenType::Control},
    {"<｜tool▁call▁end｜>", 128809, TokenType::Control},
    {"<｜tool▁outputs▁begin｜>", 128810, TokenType::Control},
    {"<｜tool▁outputs▁end｜>", 128811, TokenType::Control},
    {"<｜tool▁output▁begin｜>", 128812, TokenType::Control},
    {"<｜tool▁output▁end｜>", 128813, TokenType::Control},
    {"<｜tool▁sep｜>", 128814, TokenType::Control},
    {"<think>", 128821, TokenType::UserDefined},
    {"</think>", 128822, TokenType::UserDefined},
    {"｜DSML｜", 128825, TokenType::UserDefined},
    {"<｜latest_reminder｜>", 128828, TokenType::Control},
}};
// BOS, EOS and pad open the table in every layout.
constexpr uint32_t kLeadingSpecials = 3;
// DeepSeek's reserved range 128000..128799.
constexpr uint32_t kPlaceholderBase = 128000;
constexpr uint32_t kPlaceholderCount = 800;

// The three split regexes of DeepSeek V3/V4's tokenizer.json, in order.
const std::array<std::string, 3>& deepseek_split_regexes() {
  static const std::array<std::string, 3> r{
      R"(\p{N}{1,3})",
      "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)" "\r\n" R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)"
      "\r\n" R"(]*|\s*[)" "\r\n" R"(]+|\s+(?!\S)|\s+)",
  };
  return r;
}

// GPT-2's bytes_to_unicode: printable bytes keep their code point, the other
// 68 map in ascending order to U+0100.. . Returned in GPT-2's table order
// (printable ranges first), which is also DeepSeek's byte-token order.
struct ByteSymbols {
  std::array<uint8_t, 256> order;       // byte at table position i
  std::array<std::string, 256> symbol;  // UTF-8 symbol of byte b
};

const ByteSymbols& byte_symbols() {
  static const ByteSymbols table = [] {
    ByteSymbols t{};
    std::array<bool, 256> printable{};
    int pos = 0;
    auto keep = [&](int lo, int hi) {
      for (int b = lo; b <= hi; ++b) {
        printable[b] = true;
        t.order[pos++] = static_cast<uint8_t>(b);
        append_utf8(t.symbol[b], static_cast<uint32_t>(b));
      }
    };
    keep(33, 126);
    keep(161, 172);
    keep(174, 255);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      if (printable[b]) continue;
      t.order[pos++] = static_cast<uint8_t>(b);
      append_utf8(t.symbol[b], next++);
    }
    return t;
  }();
  return table;
}

bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool is_punct(char c) { return std::ispunct(static_cast<unsigned char>(c)) != 0; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
bool is_newline(char c) { return c == '\r' || c == '\n'; }

// The third DeepSeek split on an ASCII segment without digits. An ASCII
// transcription is enough here: the merges only need to be plausible.
void split_words(std::string_view s, std::vector<std::string>& out) {
  size_t i = 0;
  const size_t n = s.size();
  auto letters_from = [&](size_t j) {
    while (j < n && is_letter(s[j])) ++j;
    return j;
  };
  while (i < n) {
    const char c = s[i];
    size_t end = i + 1;
    if (is_punct(c) && i + 1 < n && is_letter(s[i + 1])) {
      end = letters_from(i + 1);
    } else if (is_letter(c)) {
      end = letters_from(i);
    } else if (!is_newline(c) && !is_punct(c) && i + 1 < n && is_letter(s[i + 1])) {
      end = letters_from(i + 1);
    } else if (is_punct(c) || (c == ' ' && i + 1 < n && is_punct(s[i + 1]))) {
      end = c == ' ' ? i + 1 : i;
      while (end < n && is_punct(s[end])) ++end;
      while (end < n && is_newline(s[end])) ++end;
    } else if (is_space(c)) {
      size_t run = i;
      while (run < n && is_space(s[run])) ++run;
      size_t last_nl = std::string_view::npos;
      for (size_t j = i; j < run; ++j)
        if (is_newline(s[j])) last_nl = j;
      if (last_nl != std::string_view::npos) {
        end = last_nl + 1;
      } else if (run < n && run - i > 1) {
        end = run - 1;  // leave one space for the next word
      } else {
        end = run;
      }
    }
    out.emplace_back(s.substr(i, end - i));
    i = end;
  }
}

// Pieces of the corpus: runs of up to three digits isolated first, then words.
std::vector<std::string> pretokenize(std::string_view text) {
  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && !is_digit(text[j])) ++j;
    split_words(text.substr(i, j - i), pieces);
    size_t k = j;
    while (k < text.size() && is_digit(text[k])) ++k;
    for (size_t g = j; g < k; g += 3) pieces.emplace_back(text.substr(g, std::min<size_t>(3, k - g)));
    i = k;
  }
  return pieces;
}

struct LearnedMerge {
  std::string left, right;
};

// Byte-level BPE training: repeatedly merge the most frequent adjacent pair
// (ties -> lexicographically smallest pair of strings) until `max_merges`
// merges or no pair occurs twice. Symbols are interned as ints for speed; the
// tie-break on strings keeps the result independent of hash order.
std::vector<LearnedMerge> learn_merges(std::string_view text, size_t max_merges) {
  std::map<std::string, uint64_t> counts;
  for (const std::string& p : pretokenize(text)) ++counts[p];
  std::vector<std::string> symbols;
  std::unordered_map<std::string, uint32_t> symbol_ids;
  auto intern = [&](const std::string& s) {
    auto [it, inserted] = symbol_ids.emplace(s, static_cast<uint32_t>(symbols.size()));
    if (inserted) symbols.push_back(s);
    return it->second;
  };
  const ByteSymbols& bs = byte_symbols();
  struct Word {
    std::vector<uint32_t> symbols;
    uint64_t count;
  };
  std::vector<Word> words;
  for (const auto& [piece, count] : counts) {
    Word w{{}, count};
    for (unsigned char c : piece) w.symbols.push_back(intern(bs.symbol[c]));
    words.push_back(std::move(w));
  }
  auto key = [](uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; };
  std::vector<LearnedMerge> merges;
  std::unordered_map<uint64_t, uint64_t> pairs;
  while (merges.size() < max_merges) {
    pairs.clear();
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) pairs[key(w.symbols[i], w.symbols[i + 1])] += w.count;
    uint64_t best = 0, best_count = 1;
    for (const auto& [pair, count] : pairs) {
      if (count < best_count) continue;
      if (count == best_count) {
        if (best_count == 1) continue;  // a pair seen once is not worth a token
        const std::string& bl = symbols[best >> 32];
        const std::string& br = symbols[best & 0xFFFFFFFFu];
        const std::string& pl = symbols[pair >> 32];
        const std::string& pr = symbols[pair & 0xFFFFFFFFu];
        if (std::tie(pl, pr) >= std::tie(bl, br)) continue;
      }
      best = pair;
      best_count = count;
    }
    if (best_count < 2) break;
    const uint32_t left = static_cast<uint32_t>(best >> 32), right = static_cast<uint32_t>(best & 0xFFFFFFFFu);
    const LearnedMerge m{symbols[left], symbols[right]};
    const uint32_t joined = intern(m.left + m.right);
    for (Word& w : words) {
      size_t out = 0;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == left && w.symbols[i + 1] == right) {
          w.symbols[out++] = joined;
          ++i;
        } else {
          w.symbols[out++] = w.symbols[i];
        }
      }
      w.symbols.resize(out);
    }
    merges.push_back(m);
  }
  return merges;
}

std::string pad_token(uint32_t id) { return "[PAD" + std::to_string(id) + "]"; }

bool looks_special(std::string_view t) {
  auto wrapped = [t](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return wrapped("<|", "|>") || wrapped("<｜", "｜>");
}

// Builds the final table from sparse id -> (text, type) entries.
struct TableBuilder {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<bool> used;
  std::unordered_map<std::string, uint32_t> ids;

  explicit TableBuilder(uint32_t n) : tokens(n), types(n, static_cast<int32_t>(TokenType::Unused)), used(n) {}
  bool free(uint32_t id) const { return id < used.size() && !used[id]; }
  void put(uint32_t id, std::string text, TokenType type) {
    tokens[id] = text;
    types[id] = static_cast<int32_t>(type);
    used[id] = true;
    ids.emplace(std::move(text), id);
  }
  void fill_padding() {
    for (uint32_t id = 0; id < tokens.size(); ++id)
      if (!used[id]) put(id, pad_token(id), TokenType::Unused);
  }
};

void finish_specials(TokenizerData& t) {
  t.bos_id = *t.find(kBosText);
  t.eos_id = *t.find(kEosText);
  t.pad_id = t.find(kPadText);
}

}  // namespace

std::span<const SpecialToken> v4_special_tokens() { return kV4Specials; }

uint32_t min_synthetic_vocab() { return static_cast<uint32_t>(256 + kV4Specials.size()); }

std::string gpt2_byte_symbol(uint8_t b) { return byte_symbols().symbol[b]; }

std::optional<uint32_t> TokenizerData::find(std::string_view text) const {
  for (uint32_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == text) return i;
  return std::nullopt;
}

TokenizerData make_synthetic_tokenizer(uint32_t n_vocab) {
  if (n_vocab < min_synthetic_vocab())
    throw Error("synthetic tokenizer: vocab size " + std::to_string(n_vocab) + " is below " +
                std::to_string(min_synthetic_vocab()) + " (256 byte tokens + " + std::to_string(kV4Specials.size()) +
                " special tokens)");
  const bool v4_layout = n_vocab >= kV4VocabSize;
  TableBuilder b(n_vocab);
  for (uint32_t i = 0; i < kLeadingSpecials; ++i) b.put(i, std::string(kV4Specials[i].text), kV4Specials[i].type);
  const ByteSymbols& bs = byte_symbols();
  uint32_t next = kLeadingSpecials;
  for (uint8_t byte : bs.order) b.put(next++, bs.symbol[byte], TokenType::Normal);

  // Ids the learned tokens may take: up to the specials' tail, or up to
  // DeepSeek's reserved range in the V4 layout.
  const uint32_t tail = static_cast<uint32_t>(kV4Specials.size()) - kLeadingSpecials;
  const uint32_t merge_end = v4_layout ? kPlaceholderBase : n_vocab - tail;
  TokenizerData t;
  for (const LearnedMerge& m : learn_merges(kSyntheticCorpus, merge_end - next)) {
    t.merges.push_back(m.left + " " + m.right);
    std::string joined = m.left + m.right;
    if (!b.ids.count(joined)) b.put(next++, std::move(joined), TokenType::Normal);
  }
  if (v4_layout) {
    for (uint32_t i = 0; i < kPlaceholderCount; ++i)
      b.put(kPlaceholderBase + i, "<｜place▁holder▁no▁" + std::to_string(i) + "｜>", TokenType::Control);
    for (uint32_t i = kLeadingSpecials; i < kV4Specials.size(); ++i)
      b.put(kV4Specials[i].v4_id, std::string(kV4Specials[i].text), kV4Specials[i].type);
  } else {
    uint32_t id = n_vocab - tail;
    for (uint32_t i = kLeadingSpecials; i < kV4Specials.size(); ++i)
      b.put(id++, std::string(kV4Specials[i].text), kV4Specials[i].type);
  }
  b.fill_padding();
  t.tokens = std::move(b.tokens);
  t.token_types = std::move(b.types);
  finish_specials(t);
  return t;
}

TokenizerData import_hf_tokenizer(const std::string& path, uint32_t min_vocab, bool vocab_is_exact) {
  using nlohmann::json;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open tokenizer file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  auto fail = [&path](const std::string& what) -> Error { return Error(path + ": " + what); };
  try {
    const json& model = j.at("model");
    if (model.value("type", std::string("BPE")) != "BPE") throw fail("model.type is not BPE");
    if (model.contains("byte_fallback") && model["byte_fallback"].is_boolean() && model["byte_fallback"].get<bool>())
      throw fail("byte_fallback BPE is not a byte-level tokenizer");

    // The pre-tokenizer decides how text is split; the GGUF names it by
    // kDeepseekPreTokenizer, so only DeepSeek's own split is accepted.
    std::vector<std::string> regexes;
    bool byte_level = false;
    const json& pre = j.at("pre_tokenizer");
    const json* steps = &pre;
    json single = json::array();
    if (pre.is_object() && pre.value("type", "") == "Sequence") {
      steps = &pre.at("pretokenizers");
    } else {
      single.push_back(pre);
      steps = &single;
    }
    for (const json& s : *steps) {
      const std::string type = s.value("type", "");
      if (type == "Split") regexes.push_back(s.at("pattern").at("Regex").get<std::string>());
      if (type == "ByteLevel") byte_level = true;
    }
    const auto& want = deepseek_split_regexes();
    if (!byte_level || !std::equal(regexes.begin(), regexes.end(), want.begin(), want.end()))
      throw fail("pre_tokenizer is not DeepSeek V3/V4's (three Split regexes then ByteLevel); only that family "
                 "can be labelled '" + std::string(kDeepseekPreTokenizer) + "'");

    std::map<uint32_t, std::pair<std::string, TokenType>> entries;
    auto add = [&](uint32_t id, const std::string& text, TokenType type) {
      if (text.empty()) throw fail("token id " + std::to_string(id) + " is empty");
      auto [it, inserted] = entries.emplace(id, std::make_pair(text, type));
      if (!inserted) {
        if (it->second.first != text)
          throw fail("token id " + std::to_string(id) + " is both '" + it->second.first + "' and '" + text + "'");
        it->second.second = type;  // an added token re-declares a vocab entry
      }
    };
    for (const auto& [text, id] : model.at("vocab").items()) add(id.get<uint32_t>(), text, TokenType::Normal);
    if (j.contains("added_tokens")) {
      for (const json& a : j["added_tokens"]) {
        const std::string text = a.at("content").get<std::string>();
        const bool special = a.value("special", false) || looks_special(text);
        add(a.at("id").get<uint32_t>(), text, special ? TokenType::Control : TokenType::UserDefined);
      }
    }

    TokenizerData t;
    for (const json& m : model.at("merges")) {
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
          throw fail("merge '" + s + "' is not two symbols separated by one space");
        t.merges.push_back(s);
      } else if (m.is_array() && m.size() == 2) {
        t.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        throw fail("merge " + m.dump() + " is neither \"A B\" nor [\"A\", \"B\"]");
      }
    }

    // V4 specials the file lacks: a full-size DeepSeek table (one that reaches
    // the reserved range) gets them at their V4 ids when free; anything else,
    // or an occupied id, gets them appended after the last id.
    std::unordered_set<std::string> present;
    for (const auto& [id, e] : entries) present.insert(e.first);
    uint32_t end = entries.empty() ? 0 : entries.rbegin()->first + 1;
    const bool v4_ids = end > kPlaceholderBase || min_vocab >= kV4VocabSize;
    for (const SpecialToken& s : kV4Specials) {
      if (present.count(std::string(s.text))) continue;
      const uint32_t id = v4_ids && !entries.count(s.v4_id) ? s.v4_id : end;
      entries.emplace(id, std::make_pair(std::string(s.text), s.type));
      end = std::max(end, id + 1);
    }

    uint32_t n_vocab = std::max(min_vocab, end);
    if (vocab_is_exact) {
      if (min_vocab < end)
        throw fail("vocab size " + std::to_string(min_vocab) + " is smaller than the tokenizer's max id + 1 = " +
                   std::to_string(end));
      n_vocab = min_vocab;
    }
    TableBuilder b(n_vocab);
    for (const auto& [id, e] : entries) {
      if (b.ids.count(e.first))
        throw fail("token '" + e.first + "' appears at ids " + std::to_string(b.ids[e.first]) + " and " +
                   std::to_string(id));
      b.put(id, e.first, e.second);
    }
    b.fill_padding();
    t.tokens = std::move(b.tokens);
    t.token_types = std::move(b.types);
    finish_specials(t);
    t.validate();
    return t;
  } catch (const json::exception& e) {
    throw fail(std::string("unexpected tokenizer.json structure: ") + e.what());
  }
}

void TokenizerData::validate() const {
  auto fail = [](const std::string& what) { throw Error("tokenizer: " + what); };
  if (tokens.empty()) fail("no tokens");
  if (token_types.size() != tokens.size())
    fail(std::to_string(token_types.size()) + " token types for " + std::to_string(tokens.size()) + " tokens");
  std::unordered_map<std::string_view, uint32_t> ids;
  ids.reserve(tokens.size());
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) fail("token " + std::to_string(i) + " is empty");
    if (!ids.emplace(tokens[i], i).second)
      fail("token '" + tokens[i] + "' appears at ids " + std::to_string(ids[tokens[i]]) + " and " + std::to_string(i));
    if (token_types[i] < 1 || token_types[i] > 6)
      fail("token " + std::to_string(i) + " has type " + std::to_string(token_types[i]) + " (valid: 1..6)");
  }
  for (int b = 0; b < 256; ++b)
    if (!ids.count(gpt2_byte_symbol(static_cast<uint8_t>(b))))
      fail("byte token for byte " + std::to_string(b) + " missing");
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      fail("merge " + std::to_string(r) + " '" + m + "' is not \"A B\"");
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    if (!ids.count(left) || !ids.count(right) || !ids.count(left + right))
      fail("merge " + std::to_string(r) + " '" + m + "' uses or makes a symbol missing from the table");
  }
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  if (bos_id >= n || eos_id >= n || (pad_id && *pad_id >= n)) fail("bos/eos/pad id outside the table");
  for (const SpecialToken& s : kV4Specials) {
    auto it = ids.find(s.text);
    if (it == ids.end()) fail("special token '" + std::string(s.text) + "' missing");
    const int32_t type = token_types[it->second];
    if (type != static_cast<int32_t>(TokenType::Control) && type != static_cast<int32_t>(TokenType::UserDefined))
      fail("special token '" + std::string(s.text) + "' has type " + std::to_string(type) +
           ", expected control or user-defined");
  }
}

void TokenizerData::write(gguf::Writer& w) const {
  validate();
  w.set_string("tokenizer.ggml.model", model);
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", token_types);
  w.set_array_string("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.bos_token_id", bos_id);
  w.set_u32("tokenizer.ggml.eos_token_id", eos_id);
  if (pad_id) w.set_u32("tokenizer.ggml.padding_token_id", *pad_id);
  w.set_bool("tokenizer.ggml.add_bos_token", add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", add_eos);
}

TokenizerData TokenizerData::read(const gguf::File& f) {
  TokenizerData t;
  t.model = f.get_string("tokenizer.ggml.model");
  t.pre = f.find_string("tokenizer.ggml.pre").value_or("default");
  for (std::string_view s : f.get_array("tokenizer.ggml.tokens").array_strings()) t.tokens.emplace_back(s);
  if (const gguf::Value* types = f.find_array("tokenizer.ggml.token_type")) {
    t.token_types = types->array_i32();
  } else {
    t.token_types.assign(t.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  }
  for (std::string_view s : f.get_array("tokenizer.ggml.merges").array_strings()) t.merges.emplace_back(s);
  t.bos_id = f.get_u32("tokenizer.ggml.bos_token_id");
  t.eos_id = f.get_u32("tokenizer.ggml.eos_token_id");
  t.pad_id = f.find_u32("tokenizer.ggml.padding_token_id");
  t.add_bos = f.find_bool("tokenizer.ggml.add_bos_token").value_or(true);
  t.add_eos = f.find_bool("tokenizer.ggml.add_eos_token").value_or(false);
  return t;
}

}  // namespace ds4::model
