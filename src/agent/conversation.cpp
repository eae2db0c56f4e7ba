#include "agent/conversation.h"

#include <chrono>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "runtime/generate.h"
#include "text/chat_tokens.h"
#include "text/dsml_parser.h"
#include "text/tokenizer.h"

using Json = nlohmann::ordered_json;

namespace ds4::agent {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Json system_message(const AgentOptions& o, const Json& tools) {
  std::string content(default_agent_instructions());
  if (!o.system.empty()) content += "\n\n" + o.system;
  return {{"role", "system"}, {"content", content}, {"tools", tools}};
}

// The tool calls of a parsed reply as an assistant message's tool_calls.
Json tool_calls_json(const text::ParsedMessage& m, const std::vector<std::string>& ids) {
  Json calls = Json::array();
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    calls.push_back({{"id", ids[i]},
                     {"type", "function"},
                     {"function", {{"name", m.tool_calls[i].name}, {"arguments", m.tool_calls[i].arguments_json}}}});
  }
  return calls;
}

const char* kStrippedOutput = "[output removed by /strip]";

}  // namespace

std::string_view default_agent_instructions() {
  return "You are a helpful coding assistant running inside ds4-agent, in the user's working directory. Use the "
         "tools to read, search and change files and to run commands; paths are relative to the working "
         "directory. Change files with edit (exact, unique old text) or write. Keep answers short.";
}

Conversation::Conversation(engine::Engine& engine, ToolBox& tools, AgentOptions options)
    : engine_(engine),
      tools_(tools),
      options_(std::move(options)),
      sampler_(options_.sampling, options_.seed),
      session_(engine.new_session(options_.n_ctx)) {
  if (!options_.constrain_tools.is_null())
    constraint_.emplace(options_.constrain_tools, "", engine.tokenizer(), options_.mode != text::ThinkingMode::None);
  clear();
}

Conversation::~Conversation() = default;

int64_t Conversation::n_ctx() const { return session_->n_ctx(); }

int64_t Conversation::used() const { return session_->size() + static_cast<int64_t>(pending_.size()); }

void Conversation::clear() {
  session_->reset();
  messages_ = Json::array({system_message(options_, tools_.schemas())});
  rendered_ = 0;
  pending_.clear();
  call_counter_ = 0;
}

std::string Conversation::next_call_id() { return "call_" + std::to_string(++call_counter_); }

std::vector<int32_t> Conversation::render_new_messages() const {
  text::RenderOptions o;
  o.mode = options_.mode;
  o.add_bos = rendered_ == 0;
  o.add_generation_prompt = true;
  Json context = Json::array(), fresh = Json::array();
  for (size_t i = 0; i < messages_.size(); ++i) (i < rendered_ ? context : fresh).push_back(messages_[i]);
  o.context = std::move(context);
  return text::tokenize_segments(text::render_chat(fresh, nullptr, o), engine_.tokenizer());
}

bool Conversation::evaluate(std::vector<int32_t> add, const AgentEvents& events, StepStats& stats) {
  backend::Backend& backend = engine_.backend();
  const std::unique_ptr<backend::Session> snapshot = session_->snapshot();
  const int64_t layers = backend.n_layer();
  const int64_t n_add = static_cast<int64_t>(add.size());
  if (events.progress) backend.set_progress([&](int64_t done, int64_t) { return events.progress(done / layers, n_add); });
  const auto t0 = Clock::now();
  try {
    backend.eval(*session_, add);
  } catch (const Cancelled&) {
    backend.set_progress(nullptr);
    session_->restore(*snapshot);
    return false;
  } catch (...) {
    backend.set_progress(nullptr);
    session_->restore(*snapshot);
    throw;
  }
  backend.set_progress(nullptr);
  stats.prompt_tokens = n_add;
  stats.prefill_seconds = seconds_since(t0);
  return true;
}

TurnSummary Conversation::send(const std::string& user_text, const AgentEvents& events) {
  const Json saved_messages = messages_;
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  TurnSummary summary;
  const text::Tokenizer& tok = engine_.tokenizer();
  const bool thinking = options_.mode != text::ThinkingMode::None;
  while (true) {
    // What is new since the last step (the user's message or the tool
    // results), after the tokens still waiting (the last reply's EOS).
    std::vector<int32_t> add = pending_;
    const std::vector<int32_t> fresh = render_new_messages();
    add.insert(add.end(), fresh.begin(), fresh.end());
    const int64_t need = session_->size() + static_cast<int64_t>(add.size()) + 1;
    if (need > session_->n_ctx()) {
      if (summary.steps == 0) {
        messages_ = saved_messages;
        throw Error("this message needs " + std::to_string(need) + " tokens of context but the session holds " +
                    std::to_string(session_->n_ctx()) + " (" + std::to_string(used()) +
                    " used); /strip drops old tool outputs, /new starts over, -c N sets a larger context");
      }
      summary.end = TurnEnd::ContextFull;
      summary.note = "the context is full (" + std::to_string(used()) + " of " + std::to_string(n_ctx()) +
                     " tokens): the tool results were kept but not shown to the model; /strip or /new";
      return summary;
    }
    StepStats stats;
    if (!evaluate(add, events, stats)) {
      if (summary.steps == 0) messages_ = saved_messages;
      summary.end = TurnEnd::Cancelled;
      summary.note = summary.steps == 0 ? "interrupted: the message was not added" : "interrupted";
      return summary;
    }
    rendered_ = messages_.size();
    pending_.clear();
    ++summary.steps;

    // Generate, streaming reasoning and content; the DSML block is parsed.
    text::DsmlOptions dsml;
    dsml.thinking = thinking;
    dsml.tools_active = true;
    text::DsmlStreamParser parser(dsml);
    const auto forward = [&](const std::vector<text::DsmlEvent>& evs) {
      for (const auto& e : evs) {
        if (e.kind == text::DsmlEvent::Kind::ReasoningDelta && events.reasoning) events.reasoning(e.text);
        if (e.kind == text::DsmlEvent::Kind::ContentDelta && events.content) events.content(e.text);
      }
    };
    runtime::GenerateLimits limits;
    limits.max_tokens = options_.max_tokens;
    limits.greedy_syntax = true;
    limits.stop_at_tool_block = true;
    limits.thinking = thinking;
    if (constraint_) limits.constraint = &*constraint_;
    runtime::GenerateHooks hooks;
    hooks.cancelled = events.cancelled;
    hooks.on_token = [&](int32_t, std::string_view piece) {
      forward(parser.feed(piece));
      return runtime::StopReason::None;
    };
    const runtime::GenerateResult gen = runtime::generate(engine_.backend(), *session_, tok, sampler_, limits, hooks);
    if (!gen.tail.empty()) forward(parser.feed(gen.tail));
    forward(parser.finish());
    stats.generated_tokens = static_cast<int64_t>(gen.tokens.size());
    stats.generate_seconds = gen.seconds;
    if (events.step_done) events.step_done(stats);

    const text::ParsedMessage& reply = parser.message();
    const bool calls = !reply.tool_calls.empty() && reply.tool_block_complete;
    std::vector<std::string> ids;
    if (calls) {
      for (size_t i = 0; i < reply.tool_calls.size(); ++i) ids.push_back(next_call_id());
    }
    Json assistant = {{"role", "assistant"}, {"content", reply.content}};
    if (thinking) assistant["reasoning_content"] = reply.reasoning;
    if (calls) assistant["tool_calls"] = tool_calls_json(reply, ids);
    messages_.push_back(std::move(assistant));
    // The reply's tokens are in the KV as generated; its EOS (and a token
    // generation stopped on) go in with the next step.
    rendered_ = messages_.size();
    pending_ = gen.unevaluated;
    pending_.push_back(tok.eos());

    if (gen.reason == runtime::StopReason::Cancelled) {
      summary.end = TurnEnd::Cancelled;
      summary.note = "interrupted";
      return summary;
    }
    if (gen.reason == runtime::StopReason::ContextFull) {
      summary.end = TurnEnd::ContextFull;
      summary.note = "the context is full; /strip drops old tool outputs, /new starts over";
      return summary;
    }
    if (reply.tool_block_unterminated || (!reply.tool_calls.empty() && !reply.tool_block_complete)) {
      summary.end = gen.reason == runtime::StopReason::MaxTokens ? TurnEnd::MaxTokens : TurnEnd::Unterminated;
      summary.note = "the reply stopped inside a tool call, which was not run";
      return summary;
    }
    if (gen.reason == runtime::StopReason::MaxTokens && !calls) {
      summary.end = TurnEnd::MaxTokens;
      summary.note = "the reply was cut at the -n token limit";
      return summary;
    }
    if (!calls) return summary;

    // Run the calls; their results are the next step's new messages.
    for (size_t i = 0; i < reply.tool_calls.size(); ++i) {
      const text::ParsedToolCall& call = reply.tool_calls[i];
      ToolResult result;
      if (events.cancelled && events.cancelled()) {
        result = {"error: not run: the user stopped the turn", true};
      } else {
        if (events.tool_call) events.tool_call(call.name, call.arguments_json);
        result = tools_.run(call.name, call.arguments, events.cancelled);
        if (events.tool_result) events.tool_result(call.name, result);
      }
      ++summary.tool_calls;
      messages_.push_back({{"role", "tool"}, {"tool_call_id", ids[i]}, {"content", result.text}});
    }
    if (events.cancelled && events.cancelled()) {
      summary.end = TurnEnd::Cancelled;
      summary.note = "interrupted after the tool calls; their results go to the model with your next message";
      return summary;
    }
    if (options_.max_steps > 0 && summary.steps >= options_.max_steps) {
      summary.end = TurnEnd::MaxSteps;
      summary.note = "stopped at --max-steps " + std::to_string(options_.max_steps) +
                     "; the tool results go to the model with your next message";
      return summary;
    }
  }
}

std::pair<int64_t, int64_t> Conversation::strip(const AgentEvents& events) {
  const int64_t before = used();
  size_t last_user = 0;
  for (size_t i = 0; i < messages_.size(); ++i) {
    if (messages_[i]["role"] == "user") last_user = i;
  }
  Json stripped = messages_;
  for (size_t i = 1; i < last_user; ++i) {
    Json& m = stripped[i];
    if (m["role"] == "assistant" && m.contains("reasoning_content")) m["reasoning_content"] = "";
    if (m["role"] == "tool") m["content"] = kStrippedOutput;
  }
  // What the KV held is rendered again from the start (a rendered reply
  // ends with its EOS, so nothing waits afterwards); tool results not shown
  // to the model yet stay for the next message, which they join.
  text::RenderOptions o;
  o.mode = options_.mode;
  o.add_generation_prompt = false;
  Json held = Json::array();
  for (size_t i = 0; i < rendered_; ++i) held.push_back(stripped[i]);
  const std::vector<int32_t> tokens =
      text::tokenize_segments(text::render_chat(held, nullptr, o), engine_.tokenizer());
  if (static_cast<int64_t>(tokens.size()) + 1 > session_->n_ctx())
    throw Error("even stripped, the conversation needs " + std::to_string(tokens.size() + 1) +
                " tokens of context; /new starts over");
  std::unique_ptr<backend::Session> fresh = engine_.new_session(session_->n_ctx());
  std::swap(fresh, session_);
  StepStats stats;
  if (!evaluate(tokens, events, stats)) {
    std::swap(fresh, session_);
    return {before, before};
  }
  messages_ = std::move(stripped);
  pending_.clear();
  return {before, used()};
}

Conversation::State Conversation::state() const { return {messages_, rendered_, pending_}; }

void Conversation::restore(State state, std::unique_ptr<backend::Session> session) {
  if (!state.messages.is_array() || state.messages.empty() || !state.messages[0].is_object() ||
      state.messages[0].value("role", "") != "system")
    throw Error("the saved conversation does not start with its system message");
  if (state.rendered > state.messages.size()) throw Error("the saved conversation's rendered count is past its end");
  if (!engine_.backend().owns(*session)) throw Error("the saved session belongs to another backend");
  if (session->size() + static_cast<int64_t>(state.pending.size()) >= session->n_ctx())
    throw Error("the saved conversation fills its context");
  messages_ = std::move(state.messages);
  rendered_ = state.rendered;
  pending_ = std::move(state.pending);
  session_ = std::move(session);
  call_counter_ = 0;
  for (const auto& m : messages_) {
    if (m.contains("tool_calls")) call_counter_ += static_cast<int>(m["tool_calls"].size());
  }
}

}  // namespace ds4::agent
