// The engine facade (src/engine, issue 23): what a program gets by opening a
// model file through it. Truths: the model's own metadata and file (facts),
// the official chat rendering and the tokenizer (render), and a greedy
// decode on a separately built CPU forward pass over the same file
// (generation jobs: the engine's reply is that greedy path up to EOS).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/deepseek4_hparams.h"
#include "runtime/sampler.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"
#include "text/chat_render.h"
#include "text/chat_tokens.h"
#include "text/tokenizer.h"

namespace ds4::engine {
namespace {

const test::SyntheticModel& synthetic() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 41);
  return m;
}

EngineOptions options_for(const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.prefill_chunk = 16;
  return o;
}

nlohmann::ordered_json hello() {
  return nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Say something about the sea."}}});
}

runtime::Sampler greedy() {
  runtime::SamplingParams p;
  p.temperature = 0;
  return runtime::Sampler(p, 1);
}

TEST(Engine, FactsComeFromTheFile) {
  Engine e(options_for(synthetic().path()));
  const auto& hp = synthetic().hparams();
  EXPECT_EQ(e.facts().n_vocab, hp.n_vocab);
  EXPECT_EQ(e.facts().n_layer, hp.n_layer);
  EXPECT_EQ(e.facts().n_ctx_train, static_cast<int64_t>(hp.n_ctx_train));
  EXPECT_EQ(e.facts().file_bytes, std::filesystem::file_size(synthetic().path()));
  EXPECT_GT(e.facts().decode_weight_bytes_per_token, 0u);
  EXPECT_LT(e.facts().decode_weight_bytes_per_token, e.facts().file_bytes);
  EXPECT_FALSE(e.facts().kernel_isa.empty());
  ASSERT_TRUE(e.has_tokenizer());
  EXPECT_EQ(e.facts().eos, e.tokenizer().eos());
  EXPECT_EQ(e.backend().name(), "cpu");
  EXPECT_EQ(e.backend().prefill_chunk(), 16);
  const std::string report = e.memory_report(64);
  EXPECT_NE(report.find("kv state for ctx 64"), std::string::npos) << report;
  EXPECT_NE(report.find("prefill chunk 16"), std::string::npos) << report;
}

TEST(Engine, AMissingFileIsOneErrorNamingIt) {
  test::TempDir dir;
  const std::string path = (dir.path() / "absent.gguf").string();
  try {
    Engine e(options_for(path));
    FAIL() << "opened a missing file";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(path), std::string::npos) << err.what();
  }
}

// --backend cuda: options the CPU backend alone has, and a name that is no
// backend, are one line each; where the GPU backend cannot start (a build
// without it, or no GPU here) the line says why.
TEST(Engine, TheBackendChoiceIsCheckedInOneLine) {
  const auto message = [](const EngineOptions& o) -> std::string {
    try {
      Engine e(o);
    } catch (const Error& err) {
      return err.what();
    }
    return "";
  };
  EngineOptions o = options_for(synthetic().path());
  o.backend = "metal";
  EXPECT_EQ(message(o), "--backend metal: the backends are cpu and cuda");
  o.backend = "cuda";
  o.ssd_streaming = true;
  EXPECT_EQ(message(o), "--backend cuda: --ssd-streaming runs on the CPU backend only");
  o.ssd_streaming = false;
  // Both numerics run on the GPU backend: without a GPU here, the same
  // one-line reason for either.
  const std::string why = message(o);
  o.numerics = backend::Numerics::Quality;
  EXPECT_EQ(message(o), why);
  if (!why.empty()) {  // no GPU backend here: it says so, in one line
    EXPECT_EQ(why.rfind("--backend cuda: ", 0), 0u) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

TEST(Engine, RenderIsTheOfficialTextAndItsTokens) {
  Engine e(options_for(synthetic().path()));
  text::RenderOptions ro;
  ro.mode = text::ThinkingMode::None;
  const Prompt p = e.render(hello(), nullptr, ro);
  const text::RenderedChat chat = text::render_chat(hello(), nullptr, ro);
  EXPECT_EQ(p.text, chat.text());
  EXPECT_EQ(p.tokens, text::tokenize_segments(chat, e.tokenizer()));
  ASSERT_FALSE(p.tokens.empty());
  EXPECT_EQ(p.tokens.front(), e.tokenizer().bos());
}

// The greedy path of `prompt` on an independent forward pass over the same file.
std::vector<int32_t> greedy_truth(const std::vector<int32_t>& prompt, int n) {
  cpu::Forward f(synthetic().model(), backend::Numerics::Default, nullptr);
  auto s = f.make_session(256);
  f.eval(s, prompt);
  return f.generate_greedy(s, n);
}

TEST(Engine, AJobIsTheGreedyPathWithEveryCallback) {
  Engine e(options_for(synthetic().path()));
  const Prompt p = e.render(hello(), nullptr, {});
  constexpr int kMax = 12;
  std::vector<int32_t> want = greedy_truth(p.tokens, kMax);
  const auto eos_at = std::find(want.begin(), want.end(), e.tokenizer().eos());
  const bool hits_eos = eos_at != want.end();
  want.erase(eos_at, want.end());

  auto session = e.new_session(256);
  runtime::Sampler sampler = greedy();
  runtime::GenerateLimits limits;
  limits.max_tokens = kMax;
  std::vector<int32_t> seen;
  std::vector<std::pair<int64_t, int64_t>> progress;
  int done_calls = 0;
  JobCallbacks cb;
  cb.progress = [&](int64_t done, int64_t total) {
    progress.emplace_back(done, total);
    return true;
  };
  cb.on_token = [&](int32_t id, std::string_view) {
    seen.push_back(id);
    return runtime::StopReason::None;
  };
  cb.done = [&](const runtime::GenerateResult&) { ++done_calls; };
  const runtime::GenerateResult r = e.run(*session, p.tokens, sampler, limits, cb);
  EXPECT_EQ(r.tokens, want);
  EXPECT_EQ(seen, want);
  EXPECT_EQ(done_calls, 1);
  EXPECT_EQ(r.reason, hits_eos ? runtime::StopReason::Eos : runtime::StopReason::MaxTokens);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), std::make_pair(static_cast<int64_t>(p.tokens.size()), static_cast<int64_t>(p.tokens.size())));
  EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
}

TEST(Engine, ACancelledPrefillLeavesTheSessionAsItWas) {
  Engine e(options_for(synthetic().path()));
  const Prompt p = e.render(hello(), nullptr, {});
  auto session = e.new_session(256);
  e.prefill(*session, std::span<const int32_t>(p.tokens).first(5));
  const std::vector<float> before(session->logits().begin(), session->logits().end());
  runtime::Sampler sampler = greedy();
  runtime::GenerateLimits limits;
  limits.max_tokens = 4;
  JobCallbacks cb;
  cb.progress = [](int64_t, int64_t) { return false; };
  bool done = false;
  cb.done = [&](const runtime::GenerateResult& r) { done = r.reason == runtime::StopReason::Cancelled; };
  const auto r = e.run(*session, std::span<const int32_t>(p.tokens).subspan(5), sampler, limits, cb);
  EXPECT_EQ(r.reason, runtime::StopReason::Cancelled);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_TRUE(done);
  EXPECT_TRUE(session->consistent());
  EXPECT_EQ(session->size(), 5);
  EXPECT_TRUE(std::ranges::equal(session->logits(), before));
}

TEST(Engine, CancelStopsGenerationAtThatToken) {
  Engine e(options_for(synthetic().path()));
  const Prompt p = e.render(hello(), nullptr, {});
  auto session = e.new_session(256);
  runtime::Sampler sampler = greedy();
  runtime::GenerateLimits limits;
  limits.max_tokens = 50;
  limits.ignore_eos = true;
  int tokens = 0;
  JobCallbacks cb;
  cb.on_token = [&](int32_t, std::string_view) {
    ++tokens;
    return runtime::StopReason::None;
  };
  cb.cancelled = [&] { return tokens >= 3; };
  const auto r = e.run(*session, p.tokens, sampler, limits, cb);
  EXPECT_EQ(r.reason, runtime::StopReason::Cancelled);
  EXPECT_EQ(r.tokens.size(), 3u);
}

TEST(Engine, SessionFilesRoundTrip) {
  Engine e(options_for(synthetic().path()));
  test::TempDir dir;
  const std::string path = (dir.path() / "s.ds4s").string();
  const Prompt p = e.render(hello(), nullptr, {});
  auto a = e.new_session(128);
  e.prefill(*a, p.tokens);
  e.save_session(path, *a);
  auto b = e.new_session(128);
  e.load_session(path, *b);
  EXPECT_TRUE(std::ranges::equal(a->tokens(), b->tokens()));
  EXPECT_TRUE(std::ranges::equal(a->logits(), b->logits()));
  const int32_t next = 9;
  e.prefill(*a, std::span<const int32_t>(&next, 1));
  e.prefill(*b, std::span<const int32_t>(&next, 1));
  EXPECT_TRUE(std::ranges::equal(a->logits(), b->logits()));
  EXPECT_THROW(e.load_session((dir.path() / "absent").string(), *b), Error);
}

}  // namespace
}  // namespace ds4::engine
