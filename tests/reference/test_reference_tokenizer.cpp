// Parity of ds4::text::Tokenizer with llama.cpp's llama_tokenize (parse_special
// on) on DeepSeek V3's real tokenizer (tokenizer.json imported by ds4-mkmodel,
// plus the V4 special tokens): a generated 1 MB multi-language corpus, malformed
// UTF-8, every code point of planes 0-3 and 14, and PROTOCOL.md §1.5's test vectors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/gguf.h"
#include "core/sha256.h"
#include "model/synthetic_tokenizer.h"
#include "reference_client.h"
#include "support/subprocess.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "tokenizer_corpus.h"

namespace ds4 {
namespace {

namespace fs = std::filesystem;
using text::TokenId;
using text::Tokenizer;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string hex(std::string_view bytes) {
  std::string out;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x ", c);
    out += buf;
  }
  return out;
}

// A GGUF holding the DeepSeek V3 tokenizer (V4 specials added), written once
// by ds4-mkmodel and kept in the cache folder, keyed by the tokenizer's hash.
class ReferenceTokenizer : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string json_path = DS4_DEEPSEEK_TOKENIZER;
    if (!fs::exists(json_path)) {
      setup_error_ = "DeepSeek V3 tokenizer.json not found at " + json_path +
                     " (fetch it with scripts/fetch-deepseek-tokenizer.sh)";
      return;
    }
    const std::string json = read_all(json_path);
    const Sha256Digest digest =
        sha256(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
    std::string key;
    for (size_t i = 0; i < 8; ++i) key += hex(std::string_view(reinterpret_cast<const char*>(&digest[i]), 1)).substr(0, 2);
    const char* env = std::getenv("DS4_REFERENCE_CACHE");
    const fs::path dir = env && *env ? fs::path(env) : fs::temp_directory_path() / "ds4-reference-cache";
    fs::create_directories(dir);
    model_path_ = (dir / ("deepseek-v3-tokenizer-" + key + ".gguf")).string();
    if (!fs::exists(model_path_)) {
      const std::string tmp = model_path_ + ".tmp" + std::to_string(::getpid());
      const test::ProcessResult r = test::run_process({std::string(DS4_BIN_DIR) + "/ds4-mkmodel", "--tokenizer",
                                                       json_path, "--vocab", "129280", "--out", tmp});
      if (!r.ok()) {
        setup_error_ = "ds4-mkmodel --tokenizer failed (" + r.describe() + "): " + r.err_text();
        return;
      }
      fs::rename(tmp, model_path_);
    }
    file_ = new gguf::File(gguf::File::open(model_path_));
    tokenizer_ = new Tokenizer(Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete file_;
    tokenizer_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  }

  static std::string describe(TokenId id) {
    std::string t = tokenizer_->token_bytes(id);
    return std::to_string(id) + "[" + hex(t) + "]";
  }

  // Ids equal, or a report of the first difference: where in the text, the
  // bytes around it, and both id sequences around it.
  static testing::AssertionResult same_ids(std::string_view text, const std::vector<TokenId>& ours,
                                           const std::vector<int32_t>& theirs, bool text_is_valid) {
    size_t i = 0;
    while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
    if (i == ours.size() && i == theirs.size()) return testing::AssertionSuccess();
    size_t at = 0;
    for (size_t k = 0; k < i; ++k) at += tokenizer_->token_bytes(ours[k]).size();
    std::ostringstream m;
    m << "first difference at token " << i << " (ours " << ours.size() << " tokens, llama.cpp " << theirs.size()
      << ")";
    if (text_is_valid) {
      const size_t from = at >= 24 ? at - 24 : 0;
      m << ", text byte " << at << "\n  text before: " << hex(text.substr(from, at - from))
        << "\n  text at:     " << hex(text.substr(at, 48));
    } else {
      m << ", repaired-text byte " << at;
    }
    const size_t lo = i >= 6 ? i - 6 : 0;
    m << "\n  ours:     ";
    for (size_t k = lo; k < std::min(ours.size(), i + 8); ++k) m << (k == i ? ">> " : "") << describe(ours[k]) << ' ';
    m << "\n  llama.cpp:";
    for (size_t k = lo; k < std::min(theirs.size(), i + 8); ++k)
      m << (k == i ? " >>" : "") << ' ' << describe(theirs[k]);
    return testing::AssertionFailure() << m.str();
  }

  static std::vector<std::string> special_texts() {
    std::vector<std::string> s;
    for (const model::SpecialToken& t : model::v4_special_tokens()) s.emplace_back(t.text);
    for (int n : {0, 1, 17, 798}) s.push_back("<｜place▁holder▁no▁" + std::to_string(n) + "｜>");
    return s;
  }

  static inline std::string setup_error_;
  static inline std::string model_path_;
  static inline gguf::File* file_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(ReferenceTokenizer, ProtocolTestVectors) {
  // PROTOCOL.md §1.5 (from a V4-family tokenizer); they hold for V3's ordinary ids too.
  const std::string chat = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
  const std::vector<TokenId> chat_ids{128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
  const std::string hello = "Hello! 毕老师！1 + 1 = 2";
  const std::vector<TokenId> hello_ids{19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20};
  EXPECT_EQ(tokenizer_->encode(chat, true), chat_ids);
  EXPECT_EQ(tokenizer_->encode(hello, true), hello_ids);
  EXPECT_EQ(tokenizer_->encode(hello, false), hello_ids);
  EXPECT_TRUE(same_ids(chat, chat_ids, reference::tokenize(model_path_, chat), true));
  EXPECT_TRUE(same_ids(hello, hello_ids, reference::tokenize(model_path_, hello), true));
  EXPECT_EQ(tokenizer_->bos(), 0);
  EXPECT_EQ(tokenizer_->eos(), 1);
  EXPECT_EQ(tokenizer_->user(), 128803);
  EXPECT_EQ(tokenizer_->assistant(), 128804);
  EXPECT_EQ(tokenizer_->think(), 128821);
  EXPECT_EQ(tokenizer_->end_think(), 128822);
  EXPECT_EQ(tokenizer_->dsml(), 128825);
}

TEST_F(ReferenceTokenizer, MultiLanguageCorpusMatchesLlamaCpp) {
  test::TokenizerCorpusOptions o;
  o.min_bytes = 1 << 20;
  o.seed = 20260521;
  o.specials = special_texts();
  const std::string corpus = test::tokenizer_corpus(o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<TokenId> ours = tokenizer_->encode(corpus, true);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<int32_t> theirs = reference::tokenize(model_path_, corpus);
  std::printf("corpus: %zu bytes, %zu tokens (llama.cpp %zu), ours %.1f ms\n", corpus.size(), ours.size(),
              theirs.size(), ms);
  ASSERT_TRUE(same_ids(corpus, ours, theirs, true));
  // The corpus is valid UTF-8: specials and BPE both give back its bytes.
  EXPECT_TRUE(tokenizer_->decode(ours) == corpus) << "decode(encode(corpus, true)) differs from the corpus";
  EXPECT_TRUE(tokenizer_->decode(tokenizer_->encode(corpus, false)) == corpus)
      << "decode(encode(corpus, false)) differs from the corpus";
  EXPECT_TRUE(text::is_valid_utf8(corpus)) << "the generator wrote malformed UTF-8 into the valid corpus";
}

TEST_F(ReferenceTokenizer, MalformedUtf8MatchesLlamaCpp) {
  test::TokenizerCorpusOptions o;
  o.min_bytes = 96 << 10;
  o.seed = 7;
  o.specials = special_texts();
  o.invalid_utf8 = true;
  const std::string corpus = test::tokenizer_corpus(o);
  ASSERT_TRUE(same_ids(corpus, tokenizer_->encode(corpus, true), reference::tokenize(model_path_, corpus), false));
}

TEST_F(ReferenceTokenizer, EveryAssignedPlaneCodePoint) {
  // Each code point of planes 0-3 and 14 in contexts where its Unicode class
  // decides the split (this caught PCRE2's Unicode 14 vs llama.cpp's 15.1).
  std::string text;
  for (uint32_t cp = 0x80; cp < 0xE01F0; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x323B0 && cp < 0xE0000)) continue;
    std::string c;
    if (cp < 0x800) {
      c += static_cast<char>(0xC0 | (cp >> 6));
    } else if (cp < 0x10000) {
      c += static_cast<char>(0xE0 | (cp >> 12));
      c += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    } else {
      c += static_cast<char>(0xF0 | (cp >> 18));
      c += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      c += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    }
    c += static_cast<char>(0x80 | (cp & 0x3F));
    // After a space (joins a letter, mark, punctuation or symbol), after a
    // letter (joins a letter or mark), then a newline.
    text += ' ' + c + 'x' + c + '\n';
  }
  ASSERT_TRUE(same_ids(text, tokenizer_->encode(text, true), reference::tokenize(model_path_, text), true));
}

}  // namespace
}  // namespace ds4
