#include "text/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstring>

#include "core/error.h"
#include "text/byte_level.h"

namespace ds4::text {
namespace {

// Unicode White_Space, the set Hugging Face's regex engine and llama.cpp use for
// \s. PCRE2's own \s under UCP also takes U+180E, so the class is spelt out.
#define DS4_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// Code points assigned in Unicode 15.0 and 15.1, by class. PCRE2 10.42 knows
// Unicode 14 and sees them as unassigned; llama.cpp's tables (and current
// regex engines) know them, and the new emoji among them are common. Found by
// comparing PCRE2's \p{L,M,N,P,S} with llama.cpp's unicode-data for every code
// point (only additions differ); harmless with a newer PCRE2.
#define DS4_NEW_L "\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define DS4_NEW_M "\\x{CF3}\\x{ECE}\\x{10EFD}-\\x{10EFF}\\x{11241}\\x{11F00}-\\x{11F01}\\x{11F03}\\x{11F34}-\\x{11F3A}\\x{11F3E}-\\x{11F42}\\x{13440}\\x{13447}-\\x{13455}\\x{1E08F}\\x{1E4EC}-\\x{1E4EF}"
#define DS4_NEW_N "\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
#define DS4_NEW_P "\\x{11B00}-\\x{11B09}\\x{11F43}-\\x{11F4F}"
#define DS4_NEW_S "\\x{2FFC}-\\x{2FFF}\\x{31EF}\\x{1F6DC}\\x{1F774}-\\x{1F776}\\x{1F77B}-\\x{1F77F}\\x{1F7D9}\\x{1FA75}-\\x{1FA77}\\x{1FA87}-\\x{1FA88}\\x{1FAAD}-\\x{1FAAF}\\x{1FABB}-\\x{1FABD}\\x{1FABF}\\x{1FACE}-\\x{1FACF}\\x{1FADA}-\\x{1FADB}\\x{1FAE8}\\x{1FAF7}-\\x{1FAF8}"

// DeepSeek V3's tokenizer.json split patterns, with \s/\S written as the
// White_Space class and the Unicode 15 additions in every \p{..}.
constexpr const char* kDeepseekV3Patterns[] = {
    "[\\p{N}" DS4_NEW_N "]{1,3}",
    R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)"
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}" DS4_NEW_L DS4_NEW_P DS4_NEW_S "]?[\\p{L}\\p{M}" DS4_NEW_L DS4_NEW_M "]+"
    "| ?[\\p{P}\\p{S}" DS4_NEW_P DS4_NEW_S "]+[\\r\\n]*"
    "|[" DS4_WS "]*[\\r\\n]+"
    "|[" DS4_WS "]+(?![^" DS4_WS "])"
    "|[" DS4_WS "]+",
};

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};

// Per-thread match state: match data for one pair of offsets and a JIT stack
// large enough for long runs (the default 32 KiB can overflow on backtracking).
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (!data || !context || !stack) throw Error("pre-tokenizer: out of memory for PCRE2 match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

// One step of llama.cpp's UTF-8 reader: the code point at s[i] and its length,
// or length 0 when s[i] does not start a sequence it accepts. Continuation
// bytes are checked, value ranges (overlong, surrogates) are not.
struct Decoded {
  uint32_t cp;
  size_t len;
};
Decoded decode_lenient(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return {c, 1};
  if ((c & 0x40) == 0) return {0, 0};
  if ((c & 0x20) == 0) {
    if (!cont(1)) return {0, 0};
    return {((c & 0x1Fu) << 6) | (b(1) & 0x3Fu), 2};
  }
  if ((c & 0x10) == 0) {
    if (!cont(1) || !cont(2)) return {0, 0};
    return {((c & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu), 3};
  }
  if ((c & 0x08) == 0) {
    if (!cont(1) || !cont(2) || !cont(3)) return {0, 0};
    return {((c & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu), 4};
  }
  return {0, 0};
}

size_t utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

constexpr uint32_t kReplacement = 0xFFFD;
// Stands in for a surrogate when matching: same length, same classes (neither
// letter, mark, number, punctuation, symbol nor space), and valid for PCRE2.
constexpr uint32_t kSurrogateStandIn = 0xE000;

// The repaired text (what BPE sees) and the text the regexes run on; the two
// have the same length and differ only where surrogates stand.
void repair(std::string_view in, std::string& real, std::string& matched) {
  real.clear();
  matched.clear();
  real.reserve(in.size() + 16);
  matched.reserve(in.size() + 16);
  size_t i = 0;
  while (i < in.size()) {
    Decoded d = decode_lenient(in, i);
    if (d.len == 0 || d.cp > 0x10FFFF) d = {kReplacement, 1};
    append_utf8(real, d.cp);
    append_utf8(matched, d.cp >= 0xD800 && d.cp <= 0xDFFF ? kSurrogateStandIn : d.cp);
    i += d.len;
  }
}

}  // namespace

struct PreTokenizer::Regexes {
  std::string type;
  std::vector<std::unique_ptr<pcre2_code, CodeDeleter>> codes;
  std::vector<bool> jit;
};

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII runs, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode_lenient(s, i);
    if (d.len == 0 || d.cp > 0x10FFFF || utf8_length(d.cp) != d.len || (d.cp >= 0xD800 && d.cp <= 0xDFFF))
      return false;
    i += d.len;
  }
  return true;
}

std::string repair_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string real, matched;
  repair(text, real, matched);
  return real;
}

PreTokenizer PreTokenizer::for_type(std::string_view pre) {
  if (pre != "deepseek-v3" && pre != "joyai-llm")
    throw Error("pre-tokenizer '" + std::string(pre) +
                "' is not supported (this engine implements 'deepseek-v3' and 'joyai-llm')");
  auto r = std::make_shared<Regexes>();
  r->type = std::string(pre);
  for (const char* pattern : kDeepseekV3Patterns) {
    int err = 0;
    PCRE2_SIZE at = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &at, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error("pre-tokenizer: PCRE2 cannot compile pattern at offset " + std::to_string(at) + ": " +
                  reinterpret_cast<const char*>(msg));
    }
    r->codes.emplace_back(code);
    r->jit.push_back(pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0);
  }
  return PreTokenizer(std::move(r));
}

const std::string& PreTokenizer::type() const { return regexes_->type; }

namespace {

struct SplitRun {
  const PreTokenizer::Regexes& r;
  ThreadMatchState& state;
  const char* matched;  // text the regexes see
  const char* real;     // text the pieces are cut from
  PreTokenizer::PieceSink sink;
  void* ctx;

  void level(size_t depth, size_t begin, size_t end) {
    if (begin == end) return;
    if (depth == r.codes.size()) {
      sink(ctx, std::string_view(real + begin, end - begin));
      return;
    }
    pcre2_code* code = r.codes[depth].get();
    const auto subject = reinterpret_cast<PCRE2_SPTR>(matched + begin);
    const size_t length = end - begin;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    size_t at = 0;
    while (at < length) {
      const int rc = r.jit[depth] ? pcre2_jit_match(code, subject, length, at, 0, state.data, state.context)
                                  : pcre2_match(code, subject, length, at, PCRE2_NO_UTF_CHECK, state.data,
                                                state.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw Error(std::string("pre-tokenizer: PCRE2 match failed: ") + reinterpret_cast<const char*>(msg));
      }
      const size_t ms = ov[0], me = ov[1];
      if (me == ms) {  // the patterns never match empty; guard anyway
        at = ms + 1;
        while (at < length && (static_cast<unsigned char>(subject[at]) & 0xC0) == 0x80) ++at;
        continue;
      }
      // Recursion reuses the match data: read the offsets first.
      if (ms > at) level(depth + 1, begin + at, begin + ms);
      level(depth + 1, begin + ms, begin + me);
      at = me;
    }
    if (at < length) level(depth + 1, begin + at, end);
  }
};

}  // namespace

void PreTokenizer::split(std::string_view text, PieceSink sink, void* ctx) const {
  ThreadMatchState& state = thread_match_state();
  if (is_valid_utf8(text)) {
    SplitRun run{*regexes_, state, text.data(), text.data(), sink, ctx};
    run.level(0, 0, text.size());
    return;
  }
  std::string real, matched;
  repair(text, real, matched);
  SplitRun run{*regexes_, state, matched.data(), real.data(), sink, ctx};
  run.level(0, 0, real.size());
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> pieces;
  split(
      text, [](void* ctx, std::string_view piece) { static_cast<std::vector<std::string>*>(ctx)->emplace_back(piece); },
      &pieces);
  return pieces;
}

}  // namespace ds4::text
