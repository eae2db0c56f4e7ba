// ds4-agent: a coding agent on DeepSeek V4, in this process (no server):
//   ds4-agent [-m MODEL] [-p FIRST_MESSAGE] [--yes] [--allow-path DIR]...
// Tools on the working directory (read, write, edit, list, glob, grep,
// shell), sessions saved as KV + transcript (/save /list /switch /del
// /strip), Ctrl+C to stop a turn. Every failure to start is one line
// "ds4-agent: <message>" on stderr and exit status 1.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agent/conversation.h"
#include "agent/session_store.h"
#include "agent/tools.h"
#include "agent/workspace.h"
#include "agent_ui.h"
#include "common/engine_flags.h"
#include "common/program_main.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "text/chat_render.h"
#include "version/version.h"

namespace {

using ds4::Error;

struct Options {
  ds4::engine::EngineOptions engine;
  int64_t ctx = 100000;
  int max_tokens = 50000;
  int max_steps = 0;
  std::string prompt;
  std::string system;
  ds4::text::ThinkingMode think = ds4::text::ThinkingMode::High;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  bool yes = false;
  std::vector<std::string> allow_paths;
  std::string session_dir = ds4::agent::default_session_dir();
  std::string chdir;
  std::string constrain_tools;
  int shell_timeout = 120;
  bool color = true;
};

nlohmann::ordered_json read_tools_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read --constrain-tools " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) throw Error(path + ": not a JSON array of tools");
  return j;
}

int run(const Options& o) {
  if (!o.chdir.empty() && ::chdir(o.chdir.c_str()) != 0) throw Error("--chdir " + o.chdir + ": no such folder");
  std::vector<std::filesystem::path> allowed(o.allow_paths.begin(), o.allow_paths.end());
  ds4::agent::Workspace workspace(std::filesystem::current_path(), allowed);
  if (o.ctx < 256) throw Error("-c " + std::to_string(o.ctx) + ": the agent needs a context of at least 256 tokens");
  if (o.max_tokens < 1) throw Error("-n must be at least 1");
  if (o.max_steps < 0) throw Error("--max-steps must be 0 (no limit) or more");

  ds4::agent::AgentOptions ao;
  ao.system = o.system;
  ao.n_ctx = o.ctx;
  ao.max_tokens = o.max_tokens;
  ao.max_steps = o.max_steps;
  std::string warning;
  ao.mode = ds4::text::effective_thinking_mode(o.think, o.ctx, &warning);
  if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  if (o.temperature) ao.sampling.temperature = *o.temperature;
  if (o.top_p) ao.sampling.top_p = *o.top_p;
  if (o.min_p) ao.sampling.min_p = *o.min_p;
  if (o.top_k) ao.sampling.top_k = *o.top_k;
  ao.seed = o.seed.value_or(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  if (!o.constrain_tools.empty()) ao.constrain_tools = read_tools_file(o.constrain_tools);

  ds4::engine::Engine engine(o.engine);
  ds4::app::AgentUiSettings ui_settings;
  ui_settings.color = o.color;
  ui_settings.initial_prompt = o.prompt;
  ds4::app::AgentUi ui(ui_settings);

  ds4::agent::ShellOptions shell;
  shell.default_timeout_sec = o.shell_timeout;
  std::function<bool(const std::string&)> confirm;
  if (!o.yes) confirm = [&ui](const std::string& command) { return ui.confirm(command); };
  ds4::agent::ToolBox tools(workspace, shell, confirm);
  ds4::agent::Conversation conversation(engine, tools, ao);
  ds4::agent::SessionStore sessions(o.session_dir, engine);

  const auto& facts = engine.facts();
  std::fprintf(stderr, "ds4-agent: %s, %u layers, context %lld tokens, working directory %s. /help lists the commands.\n",
               facts.name.empty() ? "deepseek4" : facts.name.c_str(), facts.n_layer, static_cast<long long>(o.ctx),
               workspace.root().c_str());
  return ui.run(conversation, sessions);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A coding agent on DeepSeek V4 in this process: tools on the working directory, saved sessions.",
               "ds4-agent"};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", ds4::version_line("ds4-agent"), "Print the version and git commit and exit");
  Options o;
  o.engine.model_path = "ds4flash.gguf";
  o.engine.threads = ds4::default_thread_count();
  ds4::app::add_engine_flags(app, o.engine, "Model GGUF file")->capture_default_str();
  ds4::app::add_backend_flags(app, o.engine);
  app.add_option("-c,--ctx", o.ctx, "Context size in tokens")->capture_default_str();
  app.add_option("-n,--tokens", o.max_tokens, "Most tokens generated per step")->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "Generation steps per message (tool rounds + 1); 0 = no limit")
      ->capture_default_str();
  app.add_option("-p,--prompt", o.prompt, "Send this message first, then read more");
  app.add_option("--system", o.system, "Extra system text after the built-in instructions");
  app.add_flag_callback("--think", [&o] { o.think = ds4::text::ThinkingMode::High; }, "Reason first (default)");
  app.add_flag_callback("--nothink", [&o] { o.think = ds4::text::ThinkingMode::None; }, "Answer without reasoning");
  app.add_flag_callback("--think-max", [&o] { o.think = ds4::text::ThinkingMode::Max; },
                        "Maximum reasoning effort (needs -c 393216 or more)");
  app.add_option("--temp", o.temperature, "Sampling temperature (0 = greedy; default 1)");
  app.add_option("--top-p", o.top_p, "Nucleus sampling (default 1)");
  app.add_option("--min-p", o.min_p, "Min-p sampling (default 0.05)");
  app.add_option("--top-k", o.top_k, "Top-k sampling (default 0 = off)");
  app.add_option("--seed", o.seed, "Sampling seed (default: from the clock)");
  app.add_flag("--yes", o.yes, "Run shell commands without asking");
  app.add_option("--allow-path", o.allow_paths, "Let the tools use this folder too (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--session-dir", o.session_dir, "Where /save keeps sessions")->capture_default_str();
  app.add_option("--chdir", o.chdir, "Working directory (default: the current one)");
  app.add_option("--shell-timeout", o.shell_timeout, "Default time limit of a shell command, seconds")
      ->capture_default_str();
  app.add_option("--constrain-tools", o.constrain_tools,
                 "Tests and diagnostics: every step's output is one DSML call of the tools in this JSON file (an "
                 "OpenAI tools array; enums pin values), chosen by the model by constrained decoding");
  app.add_flag_callback("--no-color", [&o] { o.color = false; }, "No colours or progress bar");

  return ds4::app::parse_and_run(app, argc, argv, "ds4-agent", [&o] {
    ds4::app::check_engine_flags(o.engine);
    return run(o);
  });
}
