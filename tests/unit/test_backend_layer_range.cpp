// The Backend interface on the CPU backend (issue 23): evaluating a batch
// over a layer range, the unit pipeline stages are built from. Stages that
// pass each token's hidden state on must end exactly where one evaluation
// over every layer ends: the last stage's logits (after a prompt, every row,
// after each decode step) bit-identical to the whole model's, in both
// numerics, for every split point. The truth is the whole-model evaluation,
// which test_forward.cpp and the reference tests hold to llama.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/forward.h"
#include "core/error.h"
#include "model/deepseek4_hparams.h"
#include "support/random_tokens.h"
#include "support/synthetic_model.h"

namespace ds4::backend {
namespace {

using test::random_tokens;

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// A pipeline of stages over one backend: stage i evaluates layers
// [bounds[i], bounds[i+1]) on its own sessions (one per conversation).
struct Pipeline {
  Backend &backend;
  std::vector<int> bounds;  // 0 = b0 < b1 < ... < n_layer
  std::vector<std::vector<std::unique_ptr<Session>>> sessions;  // [stage][conversation]

  Pipeline(Backend &b, std::vector<int> cuts, size_t conversations, int64_t n_ctx) : backend(b) {
    bounds.push_back(0);
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(b.n_layer());
    sessions.resize(bounds.size() - 1);
    for (auto &stage : sessions)
      for (size_t c = 0; c < conversations; ++c) stage.push_back(b.new_session(n_ctx));
  }

  // Evaluates tokens[c] for every conversation c through every stage in one
  // batched call per stage; rows[c] (may be null) gets every row's logits.
  void eval(const std::vector<std::vector<int32_t>> &tokens, const std::vector<float *> &rows) {
    const auto hd = static_cast<size_t>(backend.hidden_size());
    std::vector<std::vector<float>> in(tokens.size()), out(tokens.size());
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      const bool last = s + 2 == bounds.size();
      std::vector<Part> parts(tokens.size());
      for (size_t c = 0; c < tokens.size(); ++c) {
        out[c].assign(tokens[c].size() * hd, 0.0f);
        parts[c].session = sessions[s][c].get();
        parts[c].tokens = tokens[c];
        parts[c].hidden_in = s > 0 ? in[c].data() : nullptr;
        parts[c].hidden_out = last ? nullptr : out[c].data();
        parts[c].all_logits = last ? rows[c] : nullptr;
      }
      backend.eval(parts, LayerRange{bounds[s], last ? -1 : bounds[s + 1]});
      std::swap(in, out);
    }
  }
  Session &last(size_t c) { return *sessions.back()[c]; }
};

class LayerRangeTest : public testing::TestWithParam<Numerics> {};

TEST_P(LayerRangeTest, StagesEqualTheWholeModel) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 31);
  const int64_t nv = m.hparams().n_vocab;
  cpu::Forward f(m.model(), GetParam(), nullptr);
  f.set_prefill_chunk(8);  // the prompts cross chunk boundaries in every stage
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(nv, 23, 1), random_tokens(nv, 9, 2)};
  constexpr int kSteps = 6;

  // The whole model, each conversation alone: every prompt row, then greedy steps.
  std::vector<std::vector<float>> want_rows;
  std::vector<std::vector<std::vector<float>>> want_steps(prompts.size());
  for (size_t c = 0; c < prompts.size(); ++c) {
    auto s = f.new_session(64);
    want_rows.emplace_back(prompts[c].size() * static_cast<size_t>(nv));
    f.eval(*s, prompts[c], want_rows.back().data());
    for (int i = 0; i < kSteps; ++i) {
      const int32_t next = argmax(s->logits());
      f.eval(*s, std::span<const int32_t>(&next, 1));
      want_steps[c].emplace_back(s->logits().begin(), s->logits().end());
    }
  }

  const std::vector<std::vector<int>> splits = {{1}, {3}, {5}, {2, 4}, {1, 2, 3, 4, 5}};
  for (const auto &cuts : splits) {
    std::string name = "cuts";
    for (int c : cuts) name += " " + std::to_string(c);
    Pipeline p(f, cuts, prompts.size(), 64);
    std::vector<std::vector<float>> rows;
    for (const auto &pr : prompts) rows.emplace_back(pr.size() * static_cast<size_t>(nv));
    p.eval(prompts, {rows[0].data(), rows[1].data()});
    for (size_t c = 0; c < prompts.size(); ++c) {
      ASSERT_EQ(rows[c], want_rows[c]) << name << ", conversation " << c << ": prompt rows";
      // Stages before the head hold the tokens but no logits.
      for (size_t s = 0; s + 1 < p.sessions.size(); ++s) {
        EXPECT_TRUE(p.sessions[s][c]->logits().empty());
        EXPECT_EQ(p.sessions[s][c]->size(), static_cast<int64_t>(prompts[c].size()));
      }
    }
    for (int i = 0; i < kSteps; ++i) {
      std::vector<std::vector<int32_t>> next;
      for (size_t c = 0; c < prompts.size(); ++c) next.push_back({argmax(p.last(c).logits())});
      p.eval(next, {nullptr, nullptr});
      for (size_t c = 0; c < prompts.size(); ++c)
        ASSERT_TRUE(std::ranges::equal(p.last(c).logits(), want_steps[c][static_cast<size_t>(i)]))
            << name << ", conversation " << c << ", step " << i;
    }
  }
}

// A last range through layer n_layer without the head (end n_layer, not
// -1) hands out hidden states; eval_head on them gives the whole model's
// logits bit for bit, for one row and for several at once.
TEST_P(LayerRangeTest, EvalHeadOnTheLastLayersStatesEqualsTheHead) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 33);
  const int64_t nv = m.hparams().n_vocab;
  const int n_layer = static_cast<int>(m.hparams().n_layer);
  cpu::Forward f(m.model(), GetParam(), nullptr);
  const auto prompt = random_tokens(nv, 13, 3);
  auto whole = f.new_session(64);
  std::vector<float> want(prompt.size() * static_cast<size_t>(nv));
  f.eval(*whole, prompt, want.data());

  const auto hd = static_cast<size_t>(f.hidden_size());
  auto first = f.new_session(64), second = f.new_session(64);
  std::vector<float> mid(prompt.size() * hd), last(prompt.size() * hd);
  Part a{first.get(), prompt};
  a.hidden_out = mid.data();
  f.eval(std::span<const Part>(&a, 1), LayerRange{0, 3});
  Part b{second.get(), prompt};
  b.hidden_in = mid.data();
  b.hidden_out = last.data();
  f.eval(std::span<const Part>(&b, 1), LayerRange{3, n_layer});
  EXPECT_TRUE(second->logits().empty()) << "no head ran";
  std::vector<float> got(want.size());
  f.eval_head(last.data(), static_cast<int64_t>(prompt.size()), got.data());
  EXPECT_EQ(got, want);
  std::vector<float> one(static_cast<size_t>(nv));
  f.eval_head(last.data() + (prompt.size() - 1) * hd, 1, one.data());
  EXPECT_TRUE(std::equal(one.begin(), one.end(), want.end() - nv));
}

INSTANTIATE_TEST_SUITE_P(Numerics, LayerRangeTest, testing::Values(Numerics::Default, Numerics::Quality),
                         [](const auto &info) { return std::string(info.param == Numerics::Default ? "Default" : "Quality"); });

TEST(LayerRange, BadRangesAndMissingBuffersAreRefusedWithNothingChanged) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, 32);
  cpu::Forward f(m.model(), Numerics::Default, nullptr);
  auto s = f.new_session(16);
  const std::vector<int32_t> t = {3, 4, 5};
  std::vector<float> hidden(t.size() * static_cast<size_t>(f.hidden_size()));
  std::vector<float> rows(t.size() * static_cast<size_t>(f.n_vocab()));
  const auto refused = [&](Part part, LayerRange r, const std::string &says) {
    part.session = s.get();
    part.tokens = t;
    try {
      f.eval(std::span<const Part>(&part, 1), r);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_EQ(s->size(), 0);
  };
  refused({}, {0, 0}, "not a non-empty range");
  refused({}, {2, 1}, "not a non-empty range");
  refused({}, {0, 7}, "not a non-empty range");
  refused({}, {-1, 3}, "not a non-empty range");
  refused({}, {2, -1}, "no hidden states");
  refused({}, {0, 3}, "no buffer for the hidden states after layer 2");
  Part with_rows;
  with_rows.all_logits = rows.data();
  with_rows.hidden_out = hidden.data();
  refused(with_rows, {0, 3}, "ends before the output head");
  // A part without tokens needs no buffers.
  Part empty;
  empty.session = s.get();
  EXPECT_NO_THROW(f.eval(std::span<const Part>(&empty, 1), LayerRange{2, 4}));
}

TEST(BackendSession, SnapshotRestoreAndStateThroughTheInterface) {
  test::SyntheticModel m(model::preset_tiny(), model::QuantMix::F32, 33);
  const int64_t nv = m.hparams().n_vocab;
  cpu::Forward f(m.model(), Numerics::Default, nullptr);
  cpu::Forward quality(m.model(), Numerics::Quality, nullptr);
  Backend &b = f;
  auto s = b.new_session(64);
  const auto prompt = random_tokens(nv, 12, 3);
  b.eval(*s, prompt);
  const std::vector<float> at_prompt(s->logits().begin(), s->logits().end());
  const std::unique_ptr<Session> snap = s->snapshot();
  const int32_t next = 7;
  b.eval(*s, std::span<const int32_t>(&next, 1));
  EXPECT_FALSE(std::ranges::equal(s->logits(), at_prompt));
  s->restore(*snap);
  EXPECT_EQ(s->size(), 12);
  EXPECT_TRUE(std::ranges::equal(s->logits(), at_prompt));

  // The payload round trip lands on the same state: the next step agrees.
  const std::vector<uint8_t> payload = b.save_state(*s);
  auto loaded = b.new_session(64);
  b.load_state(payload, *loaded);
  b.eval(*s, std::span<const int32_t>(&next, 1));
  b.eval(*loaded, std::span<const int32_t>(&next, 1));
  EXPECT_TRUE(std::ranges::equal(s->logits(), loaded->logits()));

  // Sessions of another numerics are not this backend's.
  auto other = quality.new_session(64);
  EXPECT_TRUE(b.owns(*s));
  EXPECT_FALSE(b.owns(*other));
  EXPECT_THROW(b.eval(*other, prompt), Error);
  EXPECT_THROW(b.load_state(payload, *other), Error);
  EXPECT_EQ(other->size(), 0);

  // A cancelled evaluation leaves the session unusable until restored.
  b.set_progress([](int64_t done, int64_t) { return done < 10; });
  EXPECT_THROW(b.eval(*s, prompt), Cancelled);
  b.set_progress(nullptr);
  EXPECT_FALSE(s->consistent());
  EXPECT_THROW(b.eval(*s, std::span<const int32_t>(&next, 1)), Error);
  s->restore(*snap);
  EXPECT_TRUE(s->consistent());
  b.eval(*s, std::span<const int32_t>(&next, 1));
}

}  // namespace
}  // namespace ds4::backend
