// The decode loop (runtime::generate) on a tiny random-weight model, against
// the forward pass's own logits: every token it samples where the DSML
// syntax tracker says "syntax" is the argmax of the logits at that step
// (greedy on syntax, PROTOCOL.md §3.6) while a high temperature samples
// elsewhere; a completed tool block stops with ToolCalls; EOS, max tokens,
// a full context and cancellation stop as documented, with the tokens not
// evaluated reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/gguf.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "support/synthetic_model.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

namespace ds4::runtime {
namespace {

class GenerateTest : public testing::Test {
 protected:
  GenerateTest()
      : m_(model::preset_tiny(), model::QuantMix::F32, 21),
        file_(gguf::File::open(m_.path())),
        tok_(text::Tokenizer::from_gguf(file_)),
        forward_(m_.model(), cpu::Numerics::Default, nullptr) {}

  cpu::Session prompt_session(int64_t n_ctx = 256) {
    cpu::Session s = forward_.make_session(n_ctx);
    std::vector<int32_t> prompt = {tok_.bos()};
    const auto body = tok_.encode("Call the tool.", false);
    prompt.insert(prompt.end(), body.begin(), body.end());
    forward_.eval(s, prompt);
    return s;
  }

  test::SyntheticModel m_;
  gguf::File file_;
  text::Tokenizer tok_;
  cpu::Forward forward_;
};

// Hot sampling that is far from argmax on these flat random logits.
SamplingParams hot() {
  SamplingParams p;
  p.temperature = 5.0f;
  p.min_p = 0.0f;
  return p;
}

TEST_F(GenerateTest, SyntaxPositionsAreGreedyAndPayloadIsSampled) {
  // Inside an invoke tag's name attribute: structural until the model closes it.
  const std::string prefix = "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"";
  GenerateLimits limits;
  limits.max_tokens = 24;
  limits.ignore_eos = true;
  limits.greedy_syntax = true;
  limits.assistant_prefix = prefix;
  cpu::Session s = prompt_session();
  const cpu::Session start = s;
  Sampler sampler(hot(), 7);
  const GenerateResult r = generate(forward_, s, tok_, sampler, limits, {});
  ASSERT_EQ(r.tokens.size(), 24u);

  // Replay: the tracker over prefix + text so far decides each step; greedy
  // steps must be the argmax of the logits the forward pass gives there.
  cpu::Session replay = start;
  text::DsmlSyntaxTracker tracker;
  tracker.feed(prefix);
  int greedy_steps = 0;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    const int32_t best = argmax(replay.logits());
    if (tracker.greedy()) {
      ++greedy_steps;
      EXPECT_EQ(r.tokens[i], best) << "step " << i;
    }
    tracker.feed(tok_.token_bytes(r.tokens[i]));
    const int32_t one[1] = {r.tokens[i]};
    forward_.eval(replay, one);
  }
  EXPECT_GT(greedy_steps, 0);

  // Without the rule the same seed samples off the argmax at the first step
  // already (temperature 5 over a flat distribution).
  cpu::Session plain = start;
  Sampler sampler2(hot(), 7);
  GenerateLimits no_rule = limits;
  no_rule.greedy_syntax = false;
  const GenerateResult p = generate(forward_, plain, tok_, sampler2, no_rule, {});
  EXPECT_NE(p.tokens, r.tokens);
}

TEST_F(GenerateTest, ACompletedToolBlockStopsWithToolCalls) {
  GenerateLimits limits;
  limits.max_tokens = 50;
  limits.ignore_eos = true;
  limits.stop_at_tool_block = true;
  limits.thinking = false;
  // The prompt's assistant text already holds a whole block: the parser
  // confirms it once the next byte arrives, so generation stops right after
  // the first token.
  limits.assistant_prefix =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"ls\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  cpu::Session s = prompt_session();
  Sampler sampler(SamplingParams::greedy(), 1);
  const GenerateResult r = generate(forward_, s, tok_, sampler, limits, {});
  EXPECT_EQ(r.reason, StopReason::ToolCalls);
  EXPECT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.unevaluated, r.tokens);

  // The same text outside a tool-using request does not stop.
  GenerateLimits off = limits;
  off.stop_at_tool_block = false;
  off.max_tokens = 5;
  cpu::Session s2 = prompt_session();
  const GenerateResult q = generate(forward_, s2, tok_, sampler, off, {});
  EXPECT_EQ(q.reason, StopReason::MaxTokens);
  EXPECT_EQ(q.tokens.size(), 5u);
}

TEST_F(GenerateTest, StopConditionsAndUnevaluatedTokens) {
  Sampler greedy(SamplingParams::greedy(), 1);
  // Max tokens: the last token is not evaluated; the rest are.
  {
    cpu::Session s = prompt_session();
    const int64_t before = s.size();
    GenerateLimits l;
    l.max_tokens = 6;
    l.ignore_eos = true;
    const GenerateResult r = generate(forward_, s, tok_, greedy, l, {});
    EXPECT_EQ(r.reason, StopReason::MaxTokens);
    EXPECT_EQ(r.tokens.size(), 6u);
    EXPECT_EQ(r.unevaluated, std::vector<int32_t>{r.tokens.back()});
    EXPECT_EQ(s.size(), before + 5);
    EXPECT_EQ(tok_.decode(r.tokens), r.text);
  }
  // A full context.
  {
    cpu::Session s = prompt_session(12);
    const int64_t room = 12 - s.size();
    GenerateLimits l;
    l.max_tokens = 100;
    l.ignore_eos = true;
    const GenerateResult r = generate(forward_, s, tok_, greedy, l, {});
    EXPECT_EQ(r.reason, StopReason::ContextFull);
    EXPECT_EQ(static_cast<int64_t>(r.tokens.size()), room + 1);
    EXPECT_EQ(s.size(), 12);
  }
  // Cancellation before the third token.
  {
    cpu::Session s = prompt_session();
    int polls = 0;
    GenerateHooks h;
    h.cancelled = [&] { return ++polls > 2; };
    GenerateLimits l;
    l.max_tokens = 100;
    l.ignore_eos = true;
    const GenerateResult r = generate(forward_, s, tok_, greedy, l, h);
    EXPECT_EQ(r.reason, StopReason::Cancelled);
    EXPECT_EQ(r.tokens.size(), 2u);
    EXPECT_TRUE(r.unevaluated.empty());
  }
  // ignore_eos: EOS is never sampled.
  {
    cpu::Session s = prompt_session();
    GenerateLimits l;
    l.max_tokens = 40;
    l.ignore_eos = true;
    const GenerateResult r = generate(forward_, s, tok_, greedy, l, {});
    EXPECT_EQ(std::count(r.tokens.begin(), r.tokens.end(), tok_.eos()), 0);
  }
}

// Several sessions generated together (generate_batch: one batched forward
// step for all that still run) each end exactly as generate() alone leaves
// them: different prompts, samplers, seeds and stop rules (max tokens, a
// full context, a stop string, cancellation), so they stop at different steps.
TEST_F(GenerateTest, BatchedGenerationsEqualEachAlone) {
  struct Case {
    std::string prompt;
    SamplingParams params;
    uint64_t seed;
    int max_tokens;
    int64_t n_ctx;
    std::vector<std::string> stops;
    int cancel_after;  // polls before a cancel; 0: never
  };
  const std::vector<Case> cases = {
      {"Call the tool.", hot(), 3, 20, 256, {}, 0},
      {"Another prompt, a bit longer than the first one.", SamplingParams::greedy(), 1, 30, 256, {}, 0},
      {"Short.", hot(), 9, 40, 24, {}, 0},  // the context fills first
      {"Stop somewhere.", hot(), 5, 40, 256, {"e"}, 0},
      {"Cancelled.", hot(), 2, 40, 256, {}, 6},
  };
  struct Run {
    cpu::Session session;
    Sampler sampler;
    GenerateLimits limits;
    GenerateHooks hooks;
    int polls = 0;
  };
  const auto make_runs = [&] {
    std::vector<std::unique_ptr<Run>> runs;
    for (const Case& c : cases) {
      cpu::Session s = forward_.make_session(c.n_ctx);
      std::vector<int32_t> prompt = {tok_.bos()};
      const auto body = tok_.encode(c.prompt, false);
      prompt.insert(prompt.end(), body.begin(), body.end());
      forward_.eval(s, prompt);
      auto run = std::make_unique<Run>(Run{std::move(s), Sampler(c.params, c.seed), {}, {}, 0});
      run->limits.max_tokens = c.max_tokens;
      run->limits.ignore_eos = true;
      run->limits.stop_strings = c.stops;
      if (c.cancel_after > 0) {
        Run* r = run.get();
        const int after = c.cancel_after;
        run->hooks.cancelled = [r, after] { return ++r->polls > after; };
      }
      runs.push_back(std::move(run));
    }
    return runs;
  };

  auto alone = make_runs();
  std::vector<GenerateResult> want;
  for (auto& r : alone) want.push_back(generate(forward_, r->session, tok_, r->sampler, r->limits, r->hooks));

  auto together = make_runs();
  std::vector<Generation> gens;
  for (auto& r : together) gens.emplace_back(r->session, tok_, r->sampler, r->limits, r->hooks);
  std::vector<Generation*> ptrs;
  for (Generation& g : gens) ptrs.push_back(&g);
  const std::vector<GenerateResult> got = generate_batch(forward_, ptrs);

  ASSERT_EQ(got.size(), want.size());
  std::vector<StopReason> reasons;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "case " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "case " << i;
    EXPECT_EQ(got[i].reason, want[i].reason) << "case " << i;
    EXPECT_EQ(got[i].unevaluated, want[i].unevaluated) << "case " << i;
    EXPECT_TRUE(std::ranges::equal(together[i]->session.tokens(), alone[i]->session.tokens())) << "case " << i;
    EXPECT_TRUE(std::ranges::equal(together[i]->session.logits(), alone[i]->session.logits())) << "case " << i;
    reasons.push_back(want[i].reason);
  }
  // The cases do stop for their different reasons.
  EXPECT_EQ(reasons[0], StopReason::MaxTokens);
  EXPECT_EQ(reasons[2], StopReason::ContextFull);
  EXPECT_EQ(reasons[3], StopReason::StopString);
  EXPECT_EQ(reasons[4], StopReason::Cancelled);
}

}  // namespace
}  // namespace ds4::runtime
