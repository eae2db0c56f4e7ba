// One agent conversation over a live KV session (PROTOCOL.md §7.2, rendered
// with the official encoder): the messages as OpenAI-style JSON (the system
// message carries the tool schemas) and the session holding their tokens.
// Each step renders only what is new since the last one (the user's message,
// the tool results) as a continuation of the rendered messages, evaluates it
// after the tokens already in the KV, and generates; the model's own tokens
// stay in the KV verbatim (reasoning included), so a step costs its new
// tokens only. A step that ends in a DSML tool block runs the calls and the
// next step starts with their results, until a reply without calls,
// --max-steps, Ctrl+C, the token limit or a full context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/tools.h"
#include "runtime/sampler.h"
#include "runtime/tool_call_constraint.h"
#include "text/chat_render.h"

namespace ds4::backend {
class Session;
}
namespace ds4::engine {
class Engine;
}

namespace ds4::agent {

// The built-in instructions that open the system message.
std::string_view default_agent_instructions();

struct AgentOptions {
  // Appended after the built-in instructions (-sys).
  std::string system;
  text::ThinkingMode mode = text::ThinkingMode::High;
  int64_t n_ctx = 100000;
  int max_tokens = 50000;  // per step
  int max_steps = 0;       // generation steps per user message; 0 = no limit
  runtime::SamplingParams sampling = runtime::SamplingParams::thinking_defaults();
  uint64_t seed = 0;
  // Diagnostics and tests (--constrain-tools): every step's output is one
  // DSML call of these tools (an OpenAI tools array, enums allowed), chosen
  // by the model among what the schemas allow (runtime/tool_call_constraint.h).
  // The model still sees the real tools.
  nlohmann::ordered_json constrain_tools = nullptr;
};

struct StepStats {
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  int64_t generated_tokens = 0;
  double generate_seconds = 0;
};

struct AgentEvents {
  // Prefill progress (tokens done, total); false cancels the step.
  std::function<bool(int64_t done, int64_t total)> progress;
  // Polled while generating, while a shell command runs and between tool
  // calls; true stops the turn (and kills the command).
  std::function<bool()> cancelled;
  // The generated text as it streams (DSML held back until it is parsed).
  std::function<void(std::string_view text)> reasoning;
  std::function<void(std::string_view text)> content;
  // A parsed call before it runs, and its result.
  std::function<void(const std::string& name, const std::string& arguments_json)> tool_call;
  std::function<void(const std::string& name, const ToolResult& result)> tool_result;
  std::function<void(const StepStats& stats)> step_done;
};

enum class TurnEnd { Answered, Cancelled, MaxSteps, MaxTokens, ContextFull, Unterminated };

struct TurnSummary {
  TurnEnd end = TurnEnd::Answered;
  int steps = 0;
  int tool_calls = 0;
  std::string note;  // for the user, when the turn did not simply end with an answer
};

class Conversation {
 public:
  // The engine and tools must outlive this object.
  Conversation(engine::Engine& engine, ToolBox& tools, AgentOptions options);
  ~Conversation();
  Conversation(const Conversation&) = delete;
  Conversation& operator=(const Conversation&) = delete;

  // Runs the user's message to the end of the turn. ds4::Error (the
  // conversation as it was) when its prompt cannot fit the context.
  TurnSummary send(const std::string& user_text, const AgentEvents& events);

  // The system message (instructions + tools), then the turns.
  const nlohmann::ordered_json& messages() const { return messages_; }
  const AgentOptions& options() const { return options_; }
  int64_t n_ctx() const;
  // Tokens of the transcript: in the KV plus those waiting to be evaluated.
  int64_t used() const;
  // True once anything was said.
  bool started() const { return messages_.size() > 1; }

  // Drops old tool outputs and reasoning (everything before the last user
  // message), renders the conversation again and evaluates it into a fresh
  // KV. Returns the tokens it took before and after.
  std::pair<int64_t, int64_t> strip(const AgentEvents& events);
  // A new, empty conversation (same options).
  void clear();

  // What a saved session holds besides the KV: the messages, how many of
  // them the KV (and `pending`) already holds, and the transcript tokens not
  // evaluated yet.
  struct State {
    nlohmann::ordered_json messages;
    size_t rendered = 0;
    std::vector<int32_t> pending;
  };
  State state() const;
  const backend::Session& session() const { return *session_; }
  // Puts a saved conversation back: `session` holds its KV (made by this
  // engine's backend, already loaded). ds4::Error when the state does not
  // fit it (the conversation unchanged).
  void restore(State state, std::unique_ptr<backend::Session> session);

 private:
  // Tokens of messages_[rendered_..] as the continuation of the rest.
  std::vector<int32_t> render_new_messages() const;
  // Evaluates `add`; false when cancelled (the session put back as it was).
  bool evaluate(std::vector<int32_t> add, const AgentEvents& events, StepStats& stats);
  std::string next_call_id();

  engine::Engine& engine_;
  ToolBox& tools_;
  AgentOptions options_;
  std::optional<runtime::ToolCallConstraint> constraint_;
  runtime::Sampler sampler_;
  std::unique_ptr<backend::Session> session_;
  nlohmann::ordered_json messages_;
  size_t rendered_ = 0;
  std::vector<int32_t> pending_;
  int call_counter_ = 0;
};

}  // namespace ds4::agent
