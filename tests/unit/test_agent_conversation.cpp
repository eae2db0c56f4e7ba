// ds4-agent's conversation loop and saved sessions (src/agent/conversation.h,
// session_store.h) on the tiny random model, its tool calls forced by
// constrained decoding (enums pin the file and the old text, the model's
// logits choose the new text), so every run takes the same path whatever
// the weights are. Checked against independent truths: the files the tools
// change, the official encoder's rendering of the message list (the KV must
// hold exactly that text, and each step must evaluate only what is new), a
// live conversation (a saved and reloaded one continues identically), and
// the refusals a user must see (another build, another model, damage).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agent/conversation.h"
#include "agent/session_store.h"
#include "agent/tools.h"
#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/quant_mix.h"
#include "support/file_io.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"
#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace ds4::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using test::TempDir;

const test::SyntheticModel& tiny() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 23);
  return m;
}

engine::Engine& engine() {
  static engine::Engine e([] {
    engine::EngineOptions o;
    o.model_path = tiny().path();
    o.threads = 2;
    return o;
  }());
  return e;
}

// One forced edit of a.txt: "foo" -> "bar" or "baz", as the model's logits
// choose (neither holds "foo", so a second edit always finds none).
Json edit_constraint() {
  return Json::parse(R"([{"type":"function","function":{"name":"edit","parameters":{"type":"object",
    "properties":{"path":{"enum":["a.txt"]},"old":{"enum":["foo"]},"new":{"enum":["bar","baz"]}},
    "required":["path","old","new"]}}}])");
}

AgentOptions forced_edits(int max_steps) {
  AgentOptions o;
  o.mode = text::ThinkingMode::None;
  o.n_ctx = 8192;
  o.max_tokens = 600;  // a forced block takes ~200 tokens of the tiny tokenizer
  o.max_steps = max_steps;
  o.sampling.temperature = 0;
  o.constrain_tools = edit_constraint();
  return o;
}

struct Work {
  TempDir dir;
  fs::path root = dir.path() / "work";
  ToolBox tools;
  Work() : tools([this] {
    fs::create_directories(root);
    test::write_text((root / "a.txt").string(), "hello foo world\n");
    return Workspace(root);
  }(), ShellOptions{}) {}
};

// The text of every token the conversation holds, evaluated or pending.
std::string transcript_text(const Conversation& c) {
  const Conversation::State st = c.state();
  std::vector<int32_t> ids(c.session().tokens().begin(), c.session().tokens().end());
  ids.insert(ids.end(), st.pending.begin(), st.pending.end());
  return engine().tokenizer().decode(ids);
}

// The official encoder's text for the first `n` messages.
std::string official_text(const Json& messages, size_t n, text::ThinkingMode mode) {
  Json first = Json::array();
  for (size_t i = 0; i < n; ++i) first.push_back(messages[i]);
  text::RenderOptions o;
  o.mode = mode;
  o.add_generation_prompt = false;
  return text::render_chat(first, nullptr, o).text();
}

TEST(AgentConversation, StepsRunTheCallsAndTheKvHoldsTheOfficialRendering) {
  Work w;
  Conversation c(engine(), w.tools, forced_edits(2));
  std::vector<StepStats> steps;
  std::vector<std::string> calls;
  AgentEvents e;
  e.step_done = [&](const StepStats& s) { steps.push_back(s); };
  e.tool_call = [&](const std::string& name, const std::string&) { calls.push_back(name); };
  const TurnSummary t = c.send("change the file", e);
  EXPECT_EQ(t.end, TurnEnd::MaxSteps);
  EXPECT_EQ(t.steps, 2);
  EXPECT_EQ(t.tool_calls, 2);
  EXPECT_EQ(calls, (std::vector<std::string>{"edit", "edit"}));

  const Json& m = c.messages();
  ASSERT_EQ(m.size(), 6u) << m.dump(1);
  EXPECT_EQ(m[1]["role"], "user");
  ASSERT_EQ(m[2]["tool_calls"].size(), 1u);
  const Json args = Json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_EQ(args["path"], "a.txt");
  EXPECT_EQ(args["old"], "foo");
  // The first edit happened, the second found no "foo" left and changed nothing.
  EXPECT_EQ(test::read_text((w.root / "a.txt").string()), "hello " + args["new"].get<std::string>() + " world\n");
  EXPECT_EQ(m[3]["content"], "edited a.txt at line 1");
  EXPECT_EQ(m[5]["role"], "tool");
  EXPECT_NE(m[5]["content"].get<std::string>().find("does not occur"), std::string::npos);

  // The KV (with the EOS still pending) is the official encoder's text for
  // everything up to the last reply; the last results wait for the next message.
  EXPECT_EQ(c.state().rendered, 5u);
  EXPECT_EQ(transcript_text(c), official_text(m, 5, text::ThinkingMode::None));
  // The second step evaluated only the EOS, the token generation stopped on
  // and the tool result, not the ~2000-token conversation before them.
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_GT(steps[0].prompt_tokens, 1000);
  EXPECT_LT(steps[1].prompt_tokens, 100);

  // The next message carries those results in the same user turn.
  c.send("again", e);
  EXPECT_EQ(transcript_text(c), official_text(c.messages(), c.state().rendered, text::ThinkingMode::None));
  EXPECT_EQ(c.messages()[6]["role"], "user");
}

TEST(AgentConversation, ASavedSessionContinuesExactlyAsTheLiveOne) {
  Work w;
  TempDir sessions_dir;
  SessionStore store(sessions_dir.path().string(), engine());
  Conversation live(engine(), w.tools, forced_edits(1));
  live.send("first", {});
  store.save("s1", live);

  Conversation restored(engine(), w.tools, forced_edits(1));
  store.load("s1", restored);
  EXPECT_EQ(restored.messages(), live.messages());
  EXPECT_EQ(restored.used(), live.used());

  test::write_text((w.root / "a.txt").string(), "hello foo world\n");
  live.send("second", {});
  test::write_text((w.root / "a.txt").string(), "hello foo world\n");
  restored.send("second", {});
  EXPECT_EQ(restored.messages(), live.messages());
  const auto a = live.session().tokens(), b = restored.session().tokens();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));

  const auto list = store.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "s1");
  EXPECT_EQ(list[0].title, "first");
  EXPECT_TRUE(list[0].problem.empty());
  EXPECT_GT(list[0].tokens, 1000);
  EXPECT_GT(list[0].bytes, 0u);
  store.remove("s1");
  EXPECT_TRUE(store.list().empty());
  EXPECT_THROW(store.remove("s1"), Error);
}

TEST(AgentConversation, StripDropsOldOutputsAndReasoningAndRebuildsTheKv) {
  Work w;
  Conversation c(engine(), w.tools, forced_edits(1));
  c.send("first", {});
  c.send("second", {});
  const int64_t before = c.used();
  const auto [was, now] = c.strip({});
  EXPECT_EQ(was, before);
  const Json& m = c.messages();
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["content"], "[output removed by /strip]");
  // After the last user message everything stays.
  ASSERT_EQ(m.size(), 7u);
  EXPECT_EQ(m[6]["role"], "tool");
  EXPECT_NE(m[6]["content"], "[output removed by /strip]");
  EXPECT_EQ(now, c.used());
  // The KV holds what it held, stripped; the last results still wait.
  EXPECT_EQ(c.state().rendered, 6u);
  EXPECT_EQ(transcript_text(c), official_text(m, 6, text::ThinkingMode::None));
  // They join the next message's user turn, as the official encoder merges them.
  c.send("third", {});
  EXPECT_EQ(transcript_text(c), official_text(c.messages(), c.state().rendered, text::ThinkingMode::None));
}

TEST(AgentConversation, AMessageThatCannotFitChangesNothing) {
  Work w;
  AgentOptions o = forced_edits(1);
  o.n_ctx = 2600;
  Conversation c(engine(), w.tools, o);
  c.send("short", {});
  const Json before = c.messages();
  const int64_t used = c.used();
  try {
    c.send(std::string(4000, 'x'), {});
    FAIL() << "expected a context error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens of context"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.messages(), before);
  EXPECT_EQ(c.used(), used);
}

TEST(AgentSessions, DamagedForeignAndMisnamedSessionsAreRefusedNamingWhy) {
  Work w;
  TempDir sessions_dir;
  SessionStore store(sessions_dir.path().string(), engine());
  Conversation c(engine(), w.tools, forced_edits(1));
  EXPECT_THROW(store.save("empty", c), Error);  // nothing said yet
  c.send("hi", {});
  for (const std::string& bad : std::vector<std::string>{"", ".hidden", "a/b", "x y", std::string(65, 'n')}) {
    EXPECT_THROW(store.save(bad, c), Error) << bad;
  }
  store.save("good", c);
  store.save("other-build", c);
  store.save("damaged-kv", c);
  const fs::path dir = sessions_dir.path();
  {
    Json t = Json::parse(test::read_text((dir / "agent-other-build.json").string()));
    t["build"] = "0.0.1 000000000000";
    test::write_text((dir / "agent-other-build.json").string(), t.dump());
    std::fstream f(dir / "agent-damaged-kv.session", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  test::write_text((dir / "agent-broken.json").string(), "{not json");

  Conversation target(engine(), w.tools, forced_edits(1));
  const auto message = [&](const std::string& name) {
    try {
      store.load(name, target);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  EXPECT_NE(message("other-build").find("saved by ds4 0.0.1 000000000000"), std::string::npos);
  EXPECT_NE(message("damaged-kv").find("damaged"), std::string::npos) << message("damaged-kv");
  EXPECT_NE(message("broken").find("damaged"), std::string::npos);
  EXPECT_NE(message("missing").find("no saved session named 'missing'"), std::string::npos);
  EXPECT_FALSE(target.started());  // nothing was half-loaded
  EXPECT_EQ(message("good"), "loaded");

  int problems = 0;
  for (const auto& s : store.list()) problems += !s.problem.empty();
  EXPECT_EQ(problems, 2);  // other-build and broken (a damaged KV shows when loaded)

  // A session saved with another model is refused by the KV file's fingerprint.
  const test::SyntheticModel other(model::preset_tiny(), model::QuantMix::Ds4Q2, 24);
  engine::EngineOptions eo;
  eo.model_path = other.path();
  engine::Engine other_engine(eo);
  SessionStore other_store(sessions_dir.path().string(), other_engine);
  Conversation foreign(other_engine, w.tools, forced_edits(1));
  EXPECT_THROW(other_store.load("good", foreign), Error);
  try {
    other_store.load("good", foreign);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds4::agent
