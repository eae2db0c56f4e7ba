// The disk KV cache (PROTOCOL.md 6.3, 6.5, 6.6, 3.7): the file bytes against
// the spec's header table and KTM layout written out by hand here, SHA-1 file
// names against sha1sum, store -> load round trips on real sessions of a tiny
// synthetic model, the longest-prefix choice, hit bookkeeping, consumption,
// tool-block replay, budget eviction against hand-computed scores, every kind
// of unusable file skipped with a warning, and the save-policy numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/forward.h"
#include "backend/cpu/session.h"
#include "backend/cpu/session_payload.h"
#include "core/error.h"
#include "model/deepseek4_fingerprint.h"
#include "model/deepseek4_hparams.h"
#include "model/quant_mix.h"
#include "runtime/kv_cache_file.h"
#include "runtime/kv_disk_cache.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4::runtime {
namespace {

namespace fs = std::filesystem;
using test::error_of;

constexpr int64_t kCtx = 64;
constexpr int kChunk = cpu::kDefaultPrefillChunk;
constexpr uint64_t kNow = 1700000000;

void append_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void append_str(std::vector<uint8_t>& out, std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }

uint64_t read_le(const std::vector<uint8_t>& b, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b.at(off + static_cast<size_t>(i))) << (8 * i);
  return v;
}

// Overwrites `bytes` little-endian bytes of the file at `off`.
void patch(const std::string& path, size_t off, uint64_t v, int bytes) {
  auto b = test::read_bytes(path);
  for (int i = 0; i < bytes; ++i) b.at(off + static_cast<size_t>(i)) = static_cast<uint8_t>(v >> (8 * i));
  test::write_bytes(path, b);
}
void cut_to(const std::string& path, size_t size) {
  auto b = test::read_bytes(path);
  b.resize(size);
  test::write_bytes(path, b);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class KvDiskCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/11);
    other_ = new test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/12);
  }
  static void TearDownTestSuite() {
    made_sessions().clear();
    delete model_;
    delete other_;
  }
  static const model::Deepseek4Model& model() { return model_->model(); }
  static std::map<std::tuple<const void*, int, int, int64_t>, cpu::Session>& made_sessions() {
    static std::map<std::tuple<const void*, int, int, int64_t>, cpu::Session> made;
    return made;
  }

  KvCacheConfig config(uint64_t space = 1ull << 30) const {
    KvCacheConfig c;
    c.dir = dir_.path().string();
    c.space_bytes = space;
    c.min_tokens = 4;
    c.cold_max_tokens = 0;
    return c;
  }
  std::unique_ptr<KvDiskCache> cache(KvCacheConfig c, int64_t n_ctx = kCtx, int chunk = kChunk,
                                     const model::Deepseek4Model* m = nullptr) {
    // The cache reads the model and the prefill chunk from its backend,
    // which must outlive it.
    backends_.push_back(std::make_unique<cpu::Forward>(m ? *m : model(), cpu::Numerics::Default, nullptr));
    backends_.back()->set_prefill_chunk(chunk);
    auto kc = std::make_unique<KvDiskCache>(std::move(c), *backends_.back(), n_ctx,
                                            [this](const std::string& w) { warnings_.push_back(w); });
    kc->set_clock([this] { return now_; });
    return kc;
  }

  // A session of `n` tokens really evaluated by the forward pass (memoised: a copy is a full snapshot).
  static cpu::Session session(int n, int seed, int64_t n_ctx = kCtx, const model::Deepseek4Model* m = nullptr) {
    const model::Deepseek4Model& mdl = m ? *m : model();
    auto& made = made_sessions();
    const auto key = std::make_tuple(static_cast<const void*>(&mdl), n, seed, n_ctx);
    if (auto it = made.find(key); it != made.end()) return it->second;
    cpu::Forward fw(mdl, cpu::Numerics::Default, nullptr);
    cpu::Session s = fw.make_session(n_ctx);
    std::vector<int32_t> toks;
    for (int i = 0; i < n; ++i) toks.push_back(3 + (seed * 37 + i * 13) % 400);
    fw.eval(s, toks);
    return made.emplace(key, std::move(s)).first->second;
  }
  static cpu::Session empty_session(int64_t n_ctx = kCtx) {
    return cpu::Session(model(), cpu::Numerics::Default, n_ctx);
  }

  std::string path_of(std::string_view key) const { return dir_.file(sha1_hex(key) + ".kv"); }
  bool has_warning(const std::string& a, const std::string& b) const {
    for (const auto& w : warnings_)
      if (w.find(a) != std::string::npos && w.find(b) != std::string::npos) return true;
    return false;
  }
  std::vector<std::string> dir_names() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_.path())) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }

  static test::SyntheticModel* model_;
  static test::SyntheticModel* other_;
  test::TempDir dir_{"ds4-kvc-"};
  std::vector<std::string> warnings_;
  std::vector<std::unique_ptr<cpu::Forward>> backends_;
  uint64_t now_ = kNow;
};
test::SyntheticModel* KvDiskCacheTest::model_ = nullptr;
test::SyntheticModel* KvDiskCacheTest::other_ = nullptr;

// `printf %s TEXT | sha1sum`
TEST(KvCacheFile, Sha1NamesAgreeWithSha1sum) {
  EXPECT_EQ(sha1_hex("hello"), "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d");
  EXPECT_EQ(sha1_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_TRUE(is_kv_file_name("aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d.kv"));
  EXPECT_FALSE(is_kv_file_name("AAF4C61DDCC5E8A2DABEDE0F3B482CD9AEA9434D.kv"));
  EXPECT_FALSE(is_kv_file_name("aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d.kv.tmp.12"));
  EXPECT_FALSE(is_kv_file_name("aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434.kv"));
}

TEST(KvCacheFile, ToolBlocksOnlyWhenInKeyText) {
  const std::vector<ToolBlock> blocks = {
      {"call_a", "\n\nB1"}, {"call_b", "\n\nB1"}, {"call_c", "\n\nB2"}, {"call_a", "\n\nB3"}, {"", "\n\nB1"},
      {std::string(257, 'x'), "\n\nB1"}, {"call_e", ""}};
  // call_c's block is not in the key; the second call_a entry repeats an id; bad ids and empty blocks go.
  EXPECT_EQ(tool_blocks_in_key("say\n\nB1 and \n\nB3", blocks),
            (std::vector<ToolBlock>{{"call_a", "\n\nB1"}, {"call_b", "\n\nB1"}}));
  // The first entry of an id whose block is in the key wins.
  EXPECT_EQ(tool_blocks_in_key("only\n\nB3", blocks), (std::vector<ToolBlock>{{"call_a", "\n\nB3"}}));
  EXPECT_TRUE(tool_blocks_in_key("none", blocks).empty());
}

// The header written out from the §6.3 table, the text, the payload the
// session serialises to and our MFP trailer, byte for byte.
TEST_F(KvDiskCacheTest, FileBytesFollowTheSpecTable) {
  auto kc = cache(config());
  const cpu::Session s = session(6, 1);
  const std::string path = kc->store("hello", s, KvSaveReason::Cold, kKvExtResponsesVisibleKey, {});
  ASSERT_EQ(path, dir_.file("aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d.kv"));
  EXPECT_EQ(kc->quant_bits(), 4);

  const auto payload = cpu::serialize_payload(s, kChunk);
  std::vector<uint8_t> want = {'K', 'V', 'C', 1, /*quant bits*/ 4, /*cold*/ 1, /*bit1 + bit4*/ 0x12, 0};
  append_le(want, 6, 4);   // tokens
  append_le(want, 0, 4);   // hits
  append_le(want, 64, 4);  // ctx
  append_le(want, 0, 4);   // reserved
  append_le(want, kNow, 8);
  append_le(want, kNow, 8);
  append_le(want, payload.size(), 8);
  ASSERT_EQ(want.size(), 48u);
  append_le(want, 5, 4);
  append_str(want, "hello");
  want.insert(want.end(), payload.begin(), payload.end());
  append_str(want, "MFP");
  want.push_back(1);
  const auto fp = model::fingerprint(model());
  want.insert(want.end(), fp.begin(), fp.end());

  const auto got = test::read_bytes(path);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < 48; ++i) EXPECT_EQ(got[i], want[i]) << "header byte " << i;
  EXPECT_TRUE(got == want);
  EXPECT_EQ(dir_names(), std::vector<std::string>{"aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d.kv"});
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(KvDiskCacheTest, KtmTrailerHoldsOnlyBlocksOfTheKeyText) {
  auto kc = cache(config());
  const std::string b1 = "\n\n<|DSML|tool_calls>one</|DSML|tool_calls>";
  const std::string b2 = "\n\n<|DSML|tool_calls>two</|DSML|tool_calls>";
  const std::string key = "user asks" + b1 + "<eos>";
  const std::string path = kc->store(key, session(5, 2), KvSaveReason::Continued, 0,
                                     {{"call_a", b1}, {"call_b", b1}, {"call_c", b2}});
  ASSERT_FALSE(path.empty());
  const auto got = test::read_bytes(path);
  EXPECT_EQ(got[6], 0x11);  // KTM + MFP
  EXPECT_EQ(got[5], 2);     // continued

  std::vector<uint8_t> ktm;
  append_str(ktm, "KTM");
  ktm.push_back(1);
  append_le(ktm, 2, 4);
  for (std::string id : {"call_a", "call_b"}) {
    append_le(ktm, id.size(), 4);
    append_le(ktm, b1.size(), 4);
    append_str(ktm, id);
    append_str(ktm, b1);
  }
  const size_t trailer_at = 52 + key.size() + read_le(got, 40, 8);
  ASSERT_EQ(got.size(), trailer_at + ktm.size() + 36);
  EXPECT_TRUE(std::equal(ktm.begin(), ktm.end(), got.begin() + static_cast<std::ptrdiff_t>(trailer_at)));

  // Replay across a restart: a new cache object reads the trailer back.
  auto again = cache(config());
  EXPECT_EQ(again->find_tool_blocks({"call_b", "call_c", "nope"}), (std::vector<ToolBlock>{{"call_b", b1}}));
  cpu::Session s = empty_session();
  const auto hit = again->load_longest_prefix(key + "<｜User｜>next", s);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->tool_blocks, (std::vector<ToolBlock>{{"call_a", b1}, {"call_b", b1}}));
  EXPECT_EQ(hit->reason, KvSaveReason::Continued);
}

TEST_F(KvDiskCacheTest, RoundTripRestoresStateAndGenerationContinues) {
  auto kc = cache(config());
  cpu::Session live = session(12, 3);
  ASSERT_FALSE(kc->store("prompt-A", live, KvSaveReason::Evict, kKvExtThinkingVisibleKey, {}).empty());

  cpu::Session restored = empty_session();
  const auto hit = kc->load_longest_prefix("prompt-A and more", restored);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->path, path_of("prompt-A"));
  EXPECT_EQ(hit->text_len, 8u);
  EXPECT_EQ(hit->tokens, 12);
  EXPECT_EQ(hit->reason, KvSaveReason::Evict);
  EXPECT_EQ(hit->key_flags, kKvExtThinkingVisibleKey);
  EXPECT_FALSE(hit->consumed);
  EXPECT_TRUE(std::equal(live.tokens().begin(), live.tokens().end(), restored.tokens().begin(),
                         restored.tokens().end()));
  EXPECT_TRUE(same_bits(live.logits(), restored.logits()));

  cpu::Forward fw(model(), cpu::Numerics::Default, nullptr);
  const auto a = fw.generate_greedy(live, 5);
  const auto b = fw.generate_greedy(restored, 5);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(same_bits(live.logits(), restored.logits()));
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(KvDiskCacheTest, PicksTheLongestMatchingPrefix) {
  auto kc = cache(config());
  ASSERT_FALSE(kc->store("abc", session(5, 4), KvSaveReason::Cold, 0, {}).empty());
  ASSERT_FALSE(kc->store("abcdef", session(7, 5), KvSaveReason::Cold, 0, {}).empty());
  ASSERT_FALSE(kc->store("abcxyz", session(9, 6), KvSaveReason::Cold, 0, {}).empty());
  ASSERT_FALSE(kc->store("abcdefgh-longer", session(10, 7), KvSaveReason::Cold, 0, {}).empty());

  struct Case {
    std::string prompt;
    std::string key;  // "" = miss
    int64_t tokens;
  };
  for (const Case& c : {Case{"abcdefgh", "abcdef", 7}, Case{"abcxyz!", "abcxyz", 9}, Case{"abcq", "abc", 5},
                        Case{"abcdefgh-longer", "abcdefgh-longer", 10}, Case{"ab", "", 0}, Case{"zzz", "", 0}}) {
    cpu::Session s = empty_session();
    const auto hit = kc->load_longest_prefix(c.prompt, s);
    if (c.key.empty()) {
      EXPECT_FALSE(hit) << c.prompt;
      EXPECT_EQ(s.size(), 0);
      continue;
    }
    ASSERT_TRUE(hit) << c.prompt;
    EXPECT_EQ(hit->path, path_of(c.key)) << c.prompt;
    EXPECT_EQ(hit->text_len, c.key.size());
    EXPECT_EQ(s.size(), c.tokens);
  }

  // Files with fewer than min_tokens are no candidates.
  auto strict = cache([&] {
    auto c = config();
    c.min_tokens = 6;
    return c;
  }());
  cpu::Session s = empty_session();
  EXPECT_FALSE(strict->load_longest_prefix("abcq", s));
  EXPECT_EQ(s.size(), 0);
}

TEST_F(KvDiskCacheTest, HitRewritesHitsAndLastUsedInPlace) {
  auto kc = cache(config());
  now_ = 1000;
  const std::string path = kc->store("key", session(5, 8), KvSaveReason::Cold, 0, {});
  const auto before = test::read_bytes(path);
  for (uint32_t n = 1; n <= 2; ++n) {
    now_ = 1000 + 4000 * n;
    cpu::Session s = empty_session();
    ASSERT_TRUE(kc->load_longest_prefix("key!", s));
    const auto after = test::read_bytes(path);
    ASSERT_EQ(after.size(), before.size());
    EXPECT_EQ(read_le(after, 12, 4), n);
    EXPECT_EQ(read_le(after, 24, 8), 1000u);
    EXPECT_EQ(read_le(after, 32, 8), now_);
    // Nothing else changed.
    auto masked = after;
    std::copy(before.begin() + 12, before.begin() + 16, masked.begin() + 12);
    std::copy(before.begin() + 32, before.begin() + 40, masked.begin() + 32);
    EXPECT_TRUE(masked == before);
  }
}

TEST_F(KvDiskCacheTest, CheckpointsAboveColdMaxAreConsumed) {
  auto c = config();
  c.cold_max_tokens = 8;
  auto kc = cache(c);
  const std::string big = kc->store("big", session(10, 9), KvSaveReason::Continued, 0, {});
  const std::string small = kc->store("small", session(6, 10), KvSaveReason::Cold, 0, {});
  cpu::Session s = empty_session();
  auto hit = kc->load_longest_prefix("big prompt", s);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(hit->consumed);
  EXPECT_EQ(s.size(), 10);
  EXPECT_FALSE(fs::exists(big));
  cpu::Session t = empty_session();
  hit = kc->load_longest_prefix("small prompt", t);
  ASSERT_TRUE(hit);
  EXPECT_FALSE(hit->consumed);
  EXPECT_TRUE(fs::exists(small));
}

TEST_F(KvDiskCacheTest, SameKeyOnlyRewritesTheToolMap) {
  auto kc = cache(config());
  const std::string b1 = "\n\nBLOCK-1", b3 = "\n\nBLOCK-3";
  const std::string key = "chat" + b1 + b3;
  now_ = 1000;
  const std::string path = kc->store(key, session(5, 11), KvSaveReason::Cold, 0, {{"call_a", b1}});
  now_ = 2000;
  cpu::Session s = empty_session();
  ASSERT_TRUE(kc->load_longest_prefix(key, s));
  const auto before = test::read_bytes(path);
  const uint64_t payload_bytes = read_le(before, 40, 8);

  now_ = 3000;
  EXPECT_EQ(kc->store(key, session(8, 12), KvSaveReason::Evict, 0, {{"call_d", b3}, {"call_a", b1}}), path);
  const auto after = test::read_bytes(path);
  EXPECT_EQ(after[5], 1);  // reason kept
  EXPECT_EQ(read_le(after, 8, 4), 5u);  // payload kept
  EXPECT_EQ(read_le(after, 12, 4), 1u);
  EXPECT_EQ(read_le(after, 24, 8), 1000u);
  EXPECT_EQ(read_le(after, 32, 8), 2000u);
  // Everything from the header's text length to the payload's end is untouched.
  const size_t payload_end = 52 + key.size() + payload_bytes;
  ASSERT_GT(after.size(), payload_end);
  EXPECT_TRUE(std::equal(before.begin() + 48, before.begin() + static_cast<std::ptrdiff_t>(payload_end),
                         after.begin() + 48));
  EXPECT_EQ(after[6], 0x11);
  // New entries first, then the old ones not named again.
  EXPECT_EQ(kc->find_tool_blocks({"call_a", "call_d"}), (std::vector<ToolBlock>{{"call_d", b3}, {"call_a", b1}}));

  // Storing the same key without blocks keeps the entries already there: the file is unchanged.
  EXPECT_EQ(kc->store(key, session(5, 11), KvSaveReason::Cold, 0, {}), path);
  EXPECT_EQ(test::read_bytes(path), after);
}

TEST_F(KvDiskCacheTest, IncompatibleSameKeyFileIsReplaced) {
  // Saved by a server with a larger context: this one cannot load it, so it replaces it.
  auto wide = cache(config(), 128);
  const std::string path = wide->store("shared", session(5, 13, 128), KvSaveReason::Cold, 0, {});
  EXPECT_EQ(read_le(test::read_bytes(path), 16, 4), 128u);
  patch(path, 12, 7, 4);  // hits

  auto kc = cache(config());
  EXPECT_EQ(kc->store("shared", session(6, 14), KvSaveReason::Evict, 0, {}), path);
  const auto b = test::read_bytes(path);
  EXPECT_EQ(read_le(b, 16, 4), 64u);
  EXPECT_EQ(read_le(b, 12, 4), 0u);
  EXPECT_EQ(read_le(b, 8, 4), 6u);
  cpu::Session s = empty_session();
  ASSERT_TRUE(kc->load_longest_prefix("shared!", s));
  EXPECT_EQ(s.size(), 6);
}

TEST(KvEvictionScore, HandComputedValues) {
  const uint64_t now = 1000000;
  // (hits * 2^(-age/6h) + 1) * tokens / size
  EXPECT_DOUBLE_EQ(kv_eviction_score(4, now - 21600, 1, 1000, 500, now), 6.0);    // 4 * 1/2 = 2
  EXPECT_DOUBLE_EQ(kv_eviction_score(4, now - 43200, 1, 1000, 500, now), 4.0);    // 4 * 1/4 = 1
  EXPECT_DOUBLE_EQ(kv_eviction_score(1, now - 6 * 21600, 1, 1000, 500, now), 2.03125);  // 1/64 kept
  EXPECT_DOUBLE_EQ(kv_eviction_score(1, now - 7 * 21600, 1, 1000, 500, now), 2.0);      // 1/128 < 0.01 -> 0
  EXPECT_DOUBLE_EQ(kv_eviction_score(3, 0, now, 1000, 500, now), 8.0);            // last_used 0: created
  EXPECT_DOUBLE_EQ(kv_eviction_score(3, 0, 0, 1000, 500, now), 2.0);              // no dates: no hits
  EXPECT_DOUBLE_EQ(kv_eviction_score(0, now, now, 300, 1200, now), 0.25);
}

TEST_F(KvDiskCacheTest, BudgetEvictsLowestScoresFirst) {
  now_ = 1000000;
  {
    auto big = cache(config());
    for (const char* key : {"key-A", "key-B", "key-C"})
      ASSERT_FALSE(big->store(key, session(5, 15), KvSaveReason::Cold, 0, {}).empty());
  }
  const uint64_t size = fs::file_size(path_of("key-A"));
  ASSERT_EQ(fs::file_size(path_of("key-C")), size);
  // A: no hits, used 1 h ago -> 1 * 5 / size.
  patch(path_of("key-A"), 12, 0, 4);
  patch(path_of("key-A"), 32, now_ - 3600, 8);
  // B: 4 hits, used 6 h ago -> (2 + 1) * 5 / size.
  patch(path_of("key-B"), 12, 4, 4);
  patch(path_of("key-B"), 32, now_ - 21600, 8);
  // C: 1 hit, used 48 h ago -> 2^-8 < 0.01 -> 1 * 5 / size, ties with A and is older.
  patch(path_of("key-C"), 12, 1, 4);
  patch(path_of("key-C"), 32, now_ - 48 * 3600, 8);
  EXPECT_DOUBLE_EQ(kv_eviction_score(0, now_ - 3600, kNow, 5, size, now_), 5.0 / static_cast<double>(size));
  EXPECT_DOUBLE_EQ(kv_eviction_score(4, now_ - 21600, kNow, 5, size, now_), 15.0 / static_cast<double>(size));
  EXPECT_DOUBLE_EQ(kv_eviction_score(1, now_ - 48 * 3600, kNow, 5, size, now_), 5.0 / static_cast<double>(size));

  // Room for two and a half files: storing D evicts C, then A.
  auto kc = cache(config(size * 5 / 2));
  const std::string d = kc->store("key-D", session(5, 16), KvSaveReason::Cold, 0, {});
  EXPECT_EQ(d, path_of("key-D"));
  EXPECT_FALSE(fs::exists(path_of("key-C")));
  EXPECT_FALSE(fs::exists(path_of("key-A")));
  EXPECT_TRUE(fs::exists(path_of("key-B")));
  EXPECT_TRUE(fs::exists(d));
  const auto st = kc->stats();
  EXPECT_EQ(st.files, 2u);
  EXPECT_EQ(st.bytes, 2 * size);

  // A budget the file does not fit with 1% slack: nothing written.
  auto tiny = cache(config(size));
  EXPECT_EQ(tiny->store("key-E", session(5, 17), KvSaveReason::Cold, 0, {}), "");
  EXPECT_FALSE(fs::exists(path_of("key-E")));
  EXPECT_TRUE(has_warning(path_of("key-E"), "budget"));
  EXPECT_TRUE(fs::exists(path_of("key-B")));
}

// The new file is protected from eviction unless it alone exceeds the budget:
// here a same-key store grows the KTM trailer past it.
TEST_F(KvDiskCacheTest, NewFileAloneOverBudgetIsDeleted) {
  const std::string block = "\n\n" + std::string(4000, 'b');
  const std::string key = "prompt" + block;
  uint64_t size = 0;
  {
    auto probe = cache(config());
    size = fs::file_size(probe->store(key, session(5, 28), KvSaveReason::Cold, 0, {}));
  }
  auto kc = cache(config(size + (size + 99) / 100));  // fits with exactly 1% slack
  EXPECT_EQ(kc->store(key, session(5, 28), KvSaveReason::Cold, 0, {}), path_of(key));
  EXPECT_TRUE(warnings_.empty());
  EXPECT_EQ(kc->store(key, session(5, 28), KvSaveReason::Cold, 0, {{"call_big", block}}), "");
  EXPECT_FALSE(fs::exists(path_of(key)));
  EXPECT_TRUE(has_warning(path_of(key), "alone exceeds the budget"));
}

TEST_F(KvDiskCacheTest, UnusableFilesAreSkippedWithAWarning) {
  struct Case {
    const char* what;
    const char* warning;
    std::function<void(const std::string& path)> damage;  // applied to the "abcdef" file
    bool deleted = false;
  };
  const std::vector<Case> cases = {
      {"bad magic", "bad magic", [](const std::string& p) { patch(p, 0, 'X', 1); }},
      {"other version", "version is 2", [](const std::string& p) { patch(p, 3, 2, 1); }},
      {"bad quant bits", "quant bits are 3", [](const std::string& p) { patch(p, 4, 3, 1); }},
      {"unknown ext bit", "unknown bits", [](const std::string& p) { patch(p, 6, 0x30, 1); }},
      {"truncated", "truncated", [](const std::string& p) { cut_to(p, fs::file_size(p) - 100); }},
      {"trailer cut", "cut short", [](const std::string& p) { cut_to(p, fs::file_size(p) - 5); }},
      {"no fingerprint", "no model fingerprint",
       [](const std::string& p) {
         patch(p, 6, 0, 1);
         cut_to(p, fs::file_size(p) - 36);
       }},
      {"damaged payload", "damaged payload",
       [](const std::string& p) { patch(p, 52 + 6 + 4 * 8, 99, 4); },  // payload header: layers
       true},
      {"payload token count", "payload holds",
       [](const std::string& p) { patch(p, 8, 6, 4); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    for (const auto& e : fs::directory_iterator(dir_.path())) fs::remove(e.path());
    warnings_.clear();
    auto kc = cache(config());
    ASSERT_FALSE(kc->store("abc", session(5, 18), KvSaveReason::Cold, 0, {}).empty());
    const std::string bad = kc->store("abcdef", session(7, 19), KvSaveReason::Cold, 0, {});
    ASSERT_FALSE(bad.empty());
    c.damage(bad);
    cpu::Session s = empty_session();
    const auto hit = kc->load_longest_prefix("abcdefgh", s);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->text_len, 3u);
    EXPECT_EQ(s.size(), 5);
    EXPECT_TRUE(has_warning(bad, c.warning)) << (warnings_.empty() ? "" : warnings_.front());
    EXPECT_EQ(fs::exists(bad), !c.deleted);
  }
}

TEST_F(KvDiskCacheTest, FilesOfAnotherModelChunkOrLargerContextAreSkipped) {
  auto kc = cache(config());
  ASSERT_FALSE(kc->store("abc", session(5, 20), KvSaveReason::Cold, 0, {}).empty());

  auto other = cache(config(), kCtx, kChunk, &other_->model());
  const std::string other_file =
      other->store("abcd", session(6, 21, kCtx, &other_->model()), KvSaveReason::Cold, 0, {{"call_x", "d"}});
  auto chunked = cache(config(), kCtx, 2048);
  const std::string chunk_file = chunked->store("abcde", session(6, 22), KvSaveReason::Cold, 0, {});
  auto wide = cache(config(), 128);
  const std::string wide_file = wide->store("abcdef", session(6, 23, 128), KvSaveReason::Cold, 0, {});
  ASSERT_FALSE(other_file.empty() || chunk_file.empty() || wide_file.empty());
  warnings_.clear();

  cpu::Session s = empty_session();
  const auto hit = kc->load_longest_prefix("abcdefgh", s);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->text_len, 3u);
  EXPECT_TRUE(has_warning(other_file, "another model"));
  EXPECT_TRUE(has_warning(chunk_file, "prefill chunk 2048"));
  EXPECT_TRUE(has_warning(wide_file, "larger than the current 64"));
  for (const auto& f : {other_file, chunk_file, wide_file}) EXPECT_TRUE(fs::exists(f));
  // Another model's tool blocks are not replayed; the warning is given once per file version.
  const size_t n_warnings = warnings_.size();
  EXPECT_TRUE(kc->find_tool_blocks({"call_x"}).empty());
  EXPECT_EQ(warnings_.size(), n_warnings);
  // Another model's files are outside this model's budget and stats.
  EXPECT_EQ(kc->stats().files, 3u);
}

TEST_F(KvDiskCacheTest, CrossQuantFilesLoadUnlessRejected) {
  auto kc = cache(config());
  ASSERT_FALSE(kc->store("abc", session(5, 24), KvSaveReason::Cold, 0, {}).empty());
  const std::string q2 = kc->store("abcdef", session(6, 25), KvSaveReason::Cold, 0, {});
  patch(q2, 4, 2, 1);
  cpu::Session s = empty_session();
  auto hit = kc->load_longest_prefix("abcdefgh", s);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->text_len, 6u);

  auto c = config();
  c.reject_different_quant = true;
  auto strict = cache(c);
  cpu::Session t = empty_session();
  hit = strict->load_longest_prefix("abcdefgh", t);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->text_len, 3u);
}

TEST_F(KvDiskCacheTest, WritesAtomicallyAndIgnoresStaleTemporaries) {
  const std::string stale = path_of("key") + ".tmp.999999";
  test::write_text(stale, "half-written garbage");
  test::write_text(dir_.file("notes.txt"), "not a cache file");
  auto kc = cache(config());
  const std::string path = kc->store("key", session(5, 26), KvSaveReason::Shutdown, 0, {});
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(dir_names(), (std::vector<std::string>{sha1_hex("key") + ".kv", sha1_hex("key") + ".kv.tmp.999999",
                                                   "notes.txt"}));
  cpu::Session s = empty_session();
  ASSERT_TRUE(kc->load_longest_prefix("key", s));
  const auto st = kc->stats();
  EXPECT_EQ(st.files, 1u);
  EXPECT_EQ(st.bytes, fs::file_size(path));
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(KvDiskCacheTest, RefusesBadKeyFlagsAndEmptySessions) {
  auto kc = cache(config());
  const cpu::Session s = session(5, 27);
  EXPECT_NE(error_of([&] { kc->store("k", s, KvSaveReason::Cold, kKvExtToolMap, {}); }), "");
  EXPECT_EQ(kc->store("k", empty_session(), KvSaveReason::Cold, 0, {}), "");
  EXPECT_FALSE(fs::exists(path_of("k")));
}

TEST(KvCachePolicy, ContinuedStep) {
  KvCacheConfig c;
  EXPECT_EQ(continued_step(c), 10240);  // 10000 rounded up to a multiple of 2048
  c.continued_interval_tokens = 2048;
  EXPECT_EQ(continued_step(c), 2048);
  c.continued_interval_tokens = 2049;
  EXPECT_EQ(continued_step(c), 4096);
  c.continued_interval_tokens = 0;
  EXPECT_EQ(continued_step(c), 0);
  c.continued_interval_tokens = 10000;
  c.boundary_align_tokens = 0;
  EXPECT_EQ(continued_step(c), 10000);

  KvCacheConfig d;
  EXPECT_TRUE(should_save_continued(10240, 0, d));
  EXPECT_TRUE(should_save_continued(20480, 10240, d));
  EXPECT_FALSE(should_save_continued(10240, 10240, d));  // not beyond the frontier
  EXPECT_FALSE(should_save_continued(10000, 0, d));      // not a multiple
  EXPECT_FALSE(should_save_continued(10241, 0, d));
  d.min_tokens = 20000;
  EXPECT_FALSE(should_save_continued(10240, 0, d));
  d.continued_interval_tokens = 0;
  EXPECT_FALSE(should_save_continued(0, -1, d));
}

TEST(KvCachePolicy, ColdSaveLength) {
  constexpr int32_t U = 9001, A = 9002;
  const KvCacheConfig c;  // min 512, cold max 30000, trim 32, align 2048
  auto prompt = [](int n, std::vector<std::pair<int, int32_t>> marks) {
    std::vector<int32_t> p(static_cast<size_t>(n), 1);
    for (auto [pos, id] : marks) p[static_cast<size_t>(pos)] = id;
    return p;
  };
  // The system anchor: last <｜User｜> before the first <｜Assistant｜>.
  EXPECT_EQ(cold_save_length(prompt(5000, {{100, U}, {700, U}, {800, A}, {900, U}}), U, A, c), 700);
  // Anchor below min: (5000 - 32) rounded down to 2048.
  EXPECT_EQ(cold_save_length(prompt(5000, {{300, U}, {800, A}}), U, A, c), 4096);
  // A user marker after the first assistant marker is no anchor.
  EXPECT_EQ(cold_save_length(prompt(5000, {{600, A}, {700, U}}), U, A, c), 4096);
  EXPECT_EQ(cold_save_length(prompt(2100, {}), U, A, c), 2048);
  // 600 > 512 + 32 but 568 rounds down to 0 < min: the whole prompt (ds4's store_len).
  EXPECT_EQ(cold_save_length(prompt(600, {}), U, A, c), 600);
  EXPECT_EQ(cold_save_length(prompt(530, {}), U, A, c), 530);
  EXPECT_EQ(cold_save_length(prompt(30000, {}), U, A, c), 28672);  // 29968 -> 14 * 2048
  EXPECT_EQ(cold_save_length(prompt(511, {}), U, A, c), 0);        // below min
  EXPECT_EQ(cold_save_length(prompt(30001, {}), U, A, c), 0);      // above cold max
  KvCacheConfig off = c;
  off.cold_max_tokens = 0;
  EXPECT_EQ(cold_save_length(prompt(5000, {}), U, A, off), 0);

  // ds4's anchor examples (min 2): Codex-style scaffolding, then a multi-turn tail.
  KvCacheConfig small;
  small.min_tokens = 2;
  small.boundary_align_tokens = 0;
  EXPECT_EQ(cold_save_length(std::vector<int32_t>{1, 2, U, 3, 4, U, 5, A}, U, A, small), 5);
  EXPECT_EQ(cold_save_length(std::vector<int32_t>{1, 2, U, 3, A, 4, U, 5, A}, U, A, small), 2);
}

TEST(KvCacheConfig, ValidateNamesTheFlag) {
  KvCacheConfig c;
  c.dir = "/tmp/x";
  EXPECT_EQ(error_of([&] { c.validate(); }), "");
  auto with = [&](auto change) {
    KvCacheConfig d = c;
    change(d);
    return error_of([&] { d.validate(); });
  };
  EXPECT_NE(with([](KvCacheConfig& d) { d.cold_max_tokens = 100; }).find("--kv-cache-cold-max-tokens"),
            std::string::npos);
  EXPECT_EQ(with([](KvCacheConfig& d) { d.cold_max_tokens = 0; }), "");
  EXPECT_EQ(with([](KvCacheConfig& d) { d.cold_max_tokens = 512; }), "");
  EXPECT_NE(with([](KvCacheConfig& d) { d.min_tokens = 0; }).find("--kv-cache-min-tokens"), std::string::npos);
  EXPECT_NE(with([](KvCacheConfig& d) { d.space_bytes = 0; }).find("--kv-disk-space-mb"), std::string::npos);
  EXPECT_NE(with([](KvCacheConfig& d) { d.dir.clear(); }).find("--kv-disk-dir"), std::string::npos);
  EXPECT_NE(with([](KvCacheConfig& d) { d.boundary_align_tokens = -1; }).find("--kv-cache-boundary-align-tokens"),
            std::string::npos);
  EXPECT_NE(with([](KvCacheConfig& d) { d.boundary_trim_tokens = -1; }).find("--kv-cache-boundary-trim-tokens"),
            std::string::npos);
  EXPECT_NE(with([](KvCacheConfig& d) { d.continued_interval_tokens = -1; })
                .find("--kv-cache-continued-interval-tokens"),
            std::string::npos);
}

}  // namespace
}  // namespace ds4::runtime
