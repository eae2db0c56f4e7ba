// Tokenizer metadata of synthetic models and the tokenizer.json import: table
// length, byte tokens in GPT-2 order, merges that parse and stay inside the
// table, the V4 special tokens with their types and ids, and the GGUF round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "model/synthetic_tokenizer.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

#ifndef DS4_TEST_DATA_DIR
#error "DS4_TEST_DATA_DIR must be defined"
#endif

namespace ds4::model {
namespace {

namespace fs = std::filesystem;

using test::error_of;
using test::TempDir;

constexpr int32_t kNormal = static_cast<int32_t>(TokenType::Normal);
constexpr int32_t kControl = static_cast<int32_t>(TokenType::Control);
constexpr int32_t kUserDefined = static_cast<int32_t>(TokenType::UserDefined);
constexpr int32_t kUnused = static_cast<int32_t>(TokenType::Unused);

const std::string kFixture = std::string(DS4_TEST_DATA_DIR) + "/mkmodel_tokenizer.json";

TEST(MkmodelTokenizer, ByteSymbolsAreGpt2s) {
  // GPT-2's bytes_to_unicode: printable bytes map to themselves, space to U+0120
  // "Ġ", newline to U+010A "Ċ", byte 0 to U+0100, byte 173 (soft hyphen) to U+0143.
  EXPECT_EQ(gpt2_byte_symbol('A'), "A");
  EXPECT_EQ(gpt2_byte_symbol('!'), "!");
  EXPECT_EQ(gpt2_byte_symbol(' '), "\xC4\xA0");
  EXPECT_EQ(gpt2_byte_symbol('\n'), "\xC4\x8A");
  EXPECT_EQ(gpt2_byte_symbol(0), "\xC4\x80");
  EXPECT_EQ(gpt2_byte_symbol(0xAD), "\xC5\x83");
  EXPECT_EQ(gpt2_byte_symbol(0xFF), "\xC3\xBF");
  std::set<std::string> all;
  for (int b = 0; b < 256; ++b) all.insert(gpt2_byte_symbol(static_cast<uint8_t>(b)));
  EXPECT_EQ(all.size(), 256u);
}

void expect_consistent(const TokenizerData& t, uint32_t n_vocab) {
  EXPECT_EQ(t.size(), n_vocab);
  EXPECT_EQ(t.token_types.size(), t.tokens.size());
  EXPECT_NO_THROW(t.validate());
  EXPECT_EQ(t.model, "gpt2");
  EXPECT_EQ(t.pre, "joyai-llm");
  EXPECT_EQ(t.tokens[t.bos_id], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(t.tokens[t.eos_id], "<｜end▁of▁sentence｜>");
  std::set<std::string> unique(t.tokens.begin(), t.tokens.end());
  EXPECT_EQ(unique.size(), t.tokens.size());
  for (const SpecialToken& s : v4_special_tokens()) {
    const auto id = t.find(s.text);
    ASSERT_TRUE(id.has_value()) << s.text;
    EXPECT_EQ(t.token_types[*id], static_cast<int32_t>(s.type)) << s.text;
  }
  // Merges: "A B" with exactly one space, A, B and AB in the table, no repeats.
  std::set<std::string> seen;
  for (const std::string& m : t.merges) {
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos) << m;
    ASSERT_EQ(m.find(' ', sp + 1), std::string::npos) << m;
    EXPECT_TRUE(unique.count(m.substr(0, sp))) << m;
    EXPECT_TRUE(unique.count(m.substr(sp + 1))) << m;
    EXPECT_TRUE(unique.count(m.substr(0, sp) + m.substr(sp + 1))) << m;
    EXPECT_TRUE(seen.insert(m).second) << "repeated merge " << m;
  }
}

TEST(MkmodelTokenizer, SyntheticCompactLayout) {
  const TokenizerData t = make_synthetic_tokenizer(512);
  expect_consistent(t, 512);
  // BOS, EOS, pad, then the bytes in GPT-2 order like DeepSeek's table ("!" = 3).
  EXPECT_EQ(t.bos_id, 0u);
  EXPECT_EQ(t.eos_id, 1u);
  ASSERT_TRUE(t.pad_id.has_value());
  EXPECT_EQ(*t.pad_id, 2u);
  EXPECT_EQ(t.tokens[3], "!");
  EXPECT_EQ(t.tokens[3 + 93], "~");
  for (uint32_t i = 3; i < 259; ++i) EXPECT_EQ(t.token_types[i], kNormal) << i;
  // The learned merges fill the middle, the other specials the end.
  EXPECT_GT(t.merges.size(), 200u);
  EXPECT_EQ(t.tokens.back(), "<｜latest_reminder｜>");
  EXPECT_EQ(*t.find("<think>"), 512u - 4);
  EXPECT_EQ(t.token_types[*t.find("<think>")], kUserDefined);
  EXPECT_EQ(t.token_types[*t.find("｜DSML｜")], kUserDefined);
  EXPECT_EQ(t.token_types[*t.find("<｜User｜>")], kControl);
  // Frequent English words of the embedded text are single tokens.
  EXPECT_TRUE(t.find("\xC4\xA0" "the").has_value());  // " the"
  EXPECT_TRUE(t.find("\xC4\xA0" "and").has_value());  // " and"
}

TEST(MkmodelTokenizer, SyntheticIsDeterministicAndNests) {
  const TokenizerData a = make_synthetic_tokenizer(400);
  const TokenizerData b = make_synthetic_tokenizer(400);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  // A bigger table learns the same first merges in the same order.
  const TokenizerData c = make_synthetic_tokenizer(600);
  ASSERT_LE(a.merges.size(), c.merges.size());
  for (size_t i = 0; i < a.merges.size(); ++i) EXPECT_EQ(a.merges[i], c.merges[i]) << i;
}

TEST(MkmodelTokenizer, SyntheticPadsWhenTheTextRunsOut) {
  const TokenizerData t = make_synthetic_tokenizer(4096);
  expect_consistent(t, 4096);
  uint32_t pads = 0;
  for (uint32_t i = 0; i < t.size(); ++i) {
    if (t.token_types[i] == kUnused) {
      EXPECT_EQ(t.tokens[i], "[PAD" + std::to_string(i) + "]");
      ++pads;
    }
  }
  EXPECT_GT(pads, 0u);
  EXPECT_EQ(pads + 256 + v4_special_tokens().size() + t.merges.size(), 4096u)
      << "every merge adds one token, every other slot is padding";
}

TEST(MkmodelTokenizer, SyntheticV4LayoutUsesTheRealIds) {
  const TokenizerData t = make_synthetic_tokenizer(kV4VocabSize);
  expect_consistent(t, kV4VocabSize);
  for (const SpecialToken& s : v4_special_tokens()) EXPECT_EQ(*t.find(s.text), s.v4_id) << s.text;
  // PROTOCOL.md §1.2 ids.
  EXPECT_EQ(*t.find("<｜User｜>"), 128803u);
  EXPECT_EQ(*t.find("<｜Assistant｜>"), 128804u);
  EXPECT_EQ(*t.find("<think>"), 128821u);
  EXPECT_EQ(*t.find("</think>"), 128822u);
  EXPECT_EQ(*t.find("｜DSML｜"), 128825u);
  EXPECT_EQ(t.tokens[128000], "<｜place▁holder▁no▁0｜>");
  EXPECT_EQ(t.token_types[128000], kControl);
}

TEST(MkmodelTokenizer, SyntheticRejectsATooSmallVocab) {
  const std::string msg = error_of([] { (void)make_synthetic_tokenizer(min_synthetic_vocab() - 1); });
  EXPECT_NE(msg.find("below " + std::to_string(min_synthetic_vocab())), std::string::npos) << msg;
  EXPECT_NO_THROW((void)make_synthetic_tokenizer(min_synthetic_vocab()));
}

TEST(MkmodelTokenizer, GgufRoundTrip) {
  TempDir dir;
  const TokenizerData t = make_synthetic_tokenizer(512);
  gguf::Writer w;
  t.write(w);
  const std::string path = dir.file("tok.gguf");
  w.write(path);
  const gguf::File f = gguf::File::open(path);
  const TokenizerData r = TokenizerData::read(f);
  EXPECT_EQ(r.tokens, t.tokens);
  EXPECT_EQ(r.token_types, t.token_types);
  EXPECT_EQ(r.merges, t.merges);
  EXPECT_EQ(r.bos_id, t.bos_id);
  EXPECT_EQ(r.eos_id, t.eos_id);
  EXPECT_EQ(r.pad_id, t.pad_id);
  EXPECT_EQ(r.model, "gpt2");
  EXPECT_EQ(r.pre, "joyai-llm");
  // llama.cpp reads the ids as u32 and the types as an i32 array.
  EXPECT_EQ(f.get("tokenizer.ggml.bos_token_id").type(), gguf::ValueType::U32);
  EXPECT_EQ(f.get("tokenizer.ggml.token_type").array_type(), gguf::ValueType::I32);
  EXPECT_EQ(f.get("tokenizer.ggml.merges").array_type(), gguf::ValueType::STRING);
}

TEST(MkmodelTokenizer, ValidateNamesProblems) {
  TokenizerData t = make_synthetic_tokenizer(512);
  TokenizerData dup = t;
  dup.tokens[300] = dup.tokens[301];
  EXPECT_NE(error_of([&] { dup.validate(); }).find("appears at ids 300 and 301"), std::string::npos);
  TokenizerData bad_merge = t;
  bad_merge.merges.push_back("zzz qqq");
  EXPECT_NE(error_of([&] { bad_merge.validate(); }).find("'zzz qqq'"), std::string::npos);
  TokenizerData no_think = t;
  no_think.tokens[*t.find("<think>")] = "<thonk>";
  EXPECT_NE(error_of([&] { no_think.validate(); }).find("special token '<think>' missing"), std::string::npos);
}

TEST(MkmodelTokenizer, ImportsAHandMadeTokenizerJson) {
  const TokenizerData t = import_hf_tokenizer(kFixture, 0, false);
  // The fixture: 3 specials, 256 bytes, 5 merge tokens (259..263), added
  // <｜User｜> 264 (special: false but looks special), <think> 265 (plain),
  // <custom> 266 (special). The 17 V4 specials it lacks are appended from 267.
  EXPECT_EQ(t.size(), 267u + 17u);
  expect_consistent(t, 267 + 17);
  EXPECT_EQ(t.merges, (std::vector<std::string>{"Ġ t", "h e", "Ġt he", "i n", "Ġ a"}));
  EXPECT_EQ(t.tokens[261], "Ġthe");
  EXPECT_EQ(t.token_types[261], kNormal);
  EXPECT_EQ(*t.find("<｜User｜>"), 264u);
  EXPECT_EQ(t.token_types[264], kControl);
  EXPECT_EQ(*t.find("<think>"), 265u);
  EXPECT_EQ(t.token_types[265], kUserDefined);
  EXPECT_EQ(t.token_types[266], kControl);
  EXPECT_EQ(t.tokens[267], "<｜fim▁hole｜>");
  EXPECT_EQ(t.bos_id, 0u);
  EXPECT_EQ(t.eos_id, 1u);

  // A larger table is padded; an exact one must cover max id + 1.
  const TokenizerData padded = import_hf_tokenizer(kFixture, 300, true);
  EXPECT_EQ(padded.size(), 300u);
  EXPECT_EQ(padded.tokens[299], "[PAD299]");
  EXPECT_EQ(padded.token_types[299], kUnused);
  const std::string msg = error_of([] { (void)import_hf_tokenizer(kFixture, 100, true); });
  EXPECT_NE(msg.find("vocab size 100 is smaller than the tokenizer's max id + 1 = 284"), std::string::npos) << msg;
}

TEST(MkmodelTokenizer, ImportRejectsOtherFamiliesAndBrokenFiles) {
  TempDir dir;
  nlohmann::json base;
  {
    std::ifstream in(kFixture);
    base = nlohmann::json::parse(in);
  }
  auto variant = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = base;
    edit(j);
    const std::string path = dir.file(name);
    std::ofstream(path) << j.dump();
    return path;
  };
  // Merges as pairs (newer tokenizers) import like strings.
  const std::string pairs = variant("pairs.json", [](nlohmann::json& j) {
    nlohmann::json m = nlohmann::json::array();
    for (const auto& s : j["model"]["merges"]) {
      const std::string str = s.get<std::string>();
      m.push_back({str.substr(0, str.find(' ')), str.substr(str.find(' ') + 1)});
    }
    j["model"]["merges"] = m;
  });
  EXPECT_EQ(import_hf_tokenizer(pairs, 0, false).merges, import_hf_tokenizer(kFixture, 0, false).merges);

  struct Bad {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const std::vector<Bad> bad = {
      {"gpt2pre", [](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "ByteLevel"}}; }, "pre_tokenizer is not"},
      {"wordpiece", [](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }, "model.type is not BPE"},
      {"dupid", [](nlohmann::json& j) { j["model"]["vocab"]["zzz"] = 5; }, "token id 5 is both"},
      {"badmerge", [](nlohmann::json& j) { j["model"]["merges"].push_back("abc"); }, "merge 'abc' is not two symbols"},
      {"nomodel", [](nlohmann::json& j) { j.erase("model"); }, "unexpected tokenizer.json structure"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    const std::string path = variant(std::string(b.name) + ".json", b.edit);
    const std::string msg = error_of([&] { (void)import_hf_tokenizer(path, 0, false); });
    EXPECT_NE(msg.find(b.message), std::string::npos) << "got: '" << msg << "'";
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  const std::string msg = error_of([&] { (void)import_hf_tokenizer(dir.file("absent.json"), 0, false); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

// The real DeepSeek V3 tokenizer.json, when scripts/fetch-deepseek-tokenizer.sh
// has been run (DS4_DEEPSEEK_TOKENIZER or <repo>/models/tokenizer.json).
TEST(MkmodelTokenizer, ImportsDeepseekV3) {
  // `make reference` (part of `make test`) fetches it to .reference/.
  std::string path = std::string(DS4_TEST_DATA_DIR) + "/../../.reference/deepseek-v3-tokenizer.json";
  if (!fs::exists(path)) path = std::string(DS4_TEST_DATA_DIR) + "/../../models/tokenizer.json";
  if (const char* env = std::getenv("DS4_DEEPSEEK_TOKENIZER")) path = env;
  if (!fs::exists(path)) GTEST_SKIP() << "no DeepSeek tokenizer.json at " << path;
  const TokenizerData t = import_hf_tokenizer(path, kV4VocabSize, false);
  expect_consistent(t, kV4VocabSize);
  EXPECT_EQ(t.merges.size(), 127741u);
  EXPECT_EQ(t.tokens[3], "!");
  EXPECT_EQ(*t.find("<｜User｜>"), 128803u);
  EXPECT_EQ(*t.find("<think>"), 128821u);
  EXPECT_EQ(*t.find("｜DSML｜"), 128825u);
  EXPECT_EQ(t.token_types[*t.find("<｜place▁holder▁no▁5｜>")], kControl);
  EXPECT_EQ(t.tokens[128815], "[PAD128815]");
}

}  // namespace
}  // namespace ds4::model
