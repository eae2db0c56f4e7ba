#include "text/chat_render.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "text/dsml_render.h"

namespace ds4::text {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

constexpr std::string_view kThinkMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The official tools section, split around the schema lines.
constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// Quick-instruction task tokens (official DS_TASK_SP_TOKENS).
const std::map<std::string, std::string_view, std::less<>>& task_tokens() {
  static const std::map<std::string, std::string_view, std::less<>> tokens = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"},   {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
  };
  return tokens;
}

struct ToolCall {
  std::string id;  // `id`, else `function.id`: what results are paired by
  ToolCallText text;
};

// One piece of a user turn after merging: plain text or a tool result.
struct Block {
  bool is_result = false;
  std::string text;
  std::string tool_use_id;
};

struct Message {
  std::string role;  // "" when missing (rendering then fails as unknown)
  std::string where;  // "messages[3]" for error texts
  std::string content;
  std::string reasoning;
  bool has_blocks = false;  // a user message after merging
  std::vector<Block> blocks;
  Json tools;  // the `function` objects; empty array = none
  Json response_format;  // null when absent or falsy
  std::vector<ToolCall> tool_calls;
  std::optional<std::string> task;
  bool wo_eos = false;
};

// Python truthiness of a JSON value (the official code tests fields with `if x:`).
bool truthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return v.get<bool>();
    case Json::value_t::number_integer: return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case Json::value_t::number_float: return v.get<double>() != 0.0;
    case Json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object: return !v.empty();
    default: return true;
  }
}

const std::string& expect_string(const Json& v, const std::string& what) {
  if (!v.is_string()) throw Error(what + " must be a string, got " + std::string(v.type_name()));
  return v.get_ref<const std::string&>();
}

// content: string, null/missing → "", or a list of parts joined by "\n\n".
std::string content_text(const Json& msg, const std::string& where) {
  const auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    throw Error(where + ".content must be a string, null or an array of parts, got " + std::string(it->type_name()));
  }
  std::string out;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& part = (*it)[i];
    const std::string part_where = where + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) throw Error(part_where + " must be an object");
    if (i > 0) out += "\n\n";
    const auto type = part.find("type");
    const bool is_text = type != part.end() && type->is_string() && *type == "text";
    if (is_text) {
      const auto text = part.find("text");
      if (text != part.end()) out += expect_string(*text, part_where + ".text");
    } else if (type == part.end() || type->is_null()) {
      out += "[Unsupported None]";
    } else {
      out += "[Unsupported " + expect_string(*type, part_where + ".type") + "]";
    }
  }
  return out;
}

// OpenAI tools array → the `function` objects the official encoder renders.
Json tool_functions(const Json& tools, const std::string& where) {
  Json out = Json::array();
  if (tools.is_null()) return out;
  if (!tools.is_array()) throw Error(where + " must be an array of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    if (!tool.is_object() || !tool.contains("function")) {
      throw Error(where + "[" + std::to_string(i) + "] has no \"function\" (OpenAI tool format expected)");
    }
    out.push_back(tool["function"]);
  }
  return out;
}

std::string optional_id(const Json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  return expect_string(*it, where + "." + key);
}

std::vector<ToolCall> tool_calls_of(const Json& calls, const std::string& where) {
  std::vector<ToolCall> out;
  if (calls.is_null()) return out;
  if (!calls.is_array()) throw Error(where + " must be an array");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const Json& call = calls[i];
    if (!call.is_object()) throw Error(w + " must be an object");
    const auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) throw Error(w + " has no \"function\" object");
    ToolCall tc;
    tc.id = optional_id(call, "id", w);
    if (tc.id.empty()) tc.id = optional_id(*fn, "id", w + ".function");
    const auto name = fn->find("name");
    if (name == fn->end()) throw Error(w + ".function has no \"name\"");
    tc.text.name = expect_string(*name, w + ".function.name");
    const auto args = fn->find("arguments");
    if (args == fn->end()) throw Error(w + ".function has no \"arguments\"");
    if (args->is_string()) {
      tc.text.arguments_json = args->get<std::string>();
    } else {
      // The official encoder cannot json.loads a non-string and falls back to
      // {"arguments": value}; writing that object reproduces its output.
      Json wrapped = Json::object();
      wrapped["arguments"] = *args;
      tc.text.arguments_json = python_json_dumps(wrapped);
    }
    out.push_back(std::move(tc));
  }
  return out;
}

std::vector<Message> load_messages(const Json& list, const char* name) {
  if (!list.is_array()) throw Error(std::string(name) + " must be a JSON array of messages");
  std::vector<Message> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = std::string(name) + "[" + std::to_string(i) + "]";
    const Json& m = list[i];
    if (!m.is_object()) throw Error(where + " must be an object");
    Message msg;
    msg.where = where;
    if (const auto role = m.find("role"); role != m.end() && !role->is_null()) {
      msg.role = expect_string(*role, where + ".role");
    }
    msg.content = content_text(m, where);
    if (const auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
      msg.reasoning = expect_string(*r, where + ".reasoning_content");
    }
    if (const auto t = m.find("tools"); t != m.end()) msg.tools = tool_functions(*t, where + ".tools");
    else msg.tools = Json::array();
    if (const auto rf = m.find("response_format"); rf != m.end() && truthy(*rf)) msg.response_format = *rf;
    if (msg.role == "assistant") {
      if (const auto tc = m.find("tool_calls"); tc != m.end()) msg.tool_calls = tool_calls_of(*tc, where + ".tool_calls");
    }
    if (const auto task = m.find("task"); task != m.end() && !task->is_null()) {
      const std::string& t = expect_string(*task, where + ".task");
      if (!task_tokens().contains(t)) {
        throw Error(where + ".task '" + t + "' is not one of action, query, authority, domain, title, read_url");
      }
      msg.task = t;
    }
    if (const auto w = m.find("wo_eos"); w != m.end()) msg.wo_eos = truthy(*w);
    if (msg.role == "tool") {
      Block b;
      b.is_result = true;
      b.text = msg.content;
      b.tool_use_id = optional_id(m, "tool_call_id", where);
      msg.blocks.push_back(std::move(b));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// Official merge: every tool result and user text joins the preceding user
// turn (a user turn that carries a task accepts results but not more text).
std::vector<Message> merge_into_user_turns(std::vector<Message> in) {
  std::vector<Message> out;
  for (auto& msg : in) {
    const bool prev_user = !out.empty() && out.back().role == "user" && out.back().has_blocks;
    if (msg.role == "tool") {
      if (prev_user) {
        out.back().blocks.push_back(std::move(msg.blocks.front()));
      } else {
        Message turn;
        turn.role = "user";
        turn.where = msg.where;
        turn.tools = Json::array();
        turn.has_blocks = true;
        turn.blocks.push_back(std::move(msg.blocks.front()));
        out.push_back(std::move(turn));
      }
    } else if (msg.role == "user") {
      Block text{false, msg.content, {}};
      if (prev_user && !out.back().task) {
        out.back().blocks.push_back(std::move(text));
      } else {
        Message turn;
        turn.role = "user";
        turn.where = msg.where;
        turn.content = msg.content;
        turn.tools = Json::array();  // tools and response_format on a user message are not kept
        turn.has_blocks = true;
        turn.blocks.push_back(std::move(text));
        turn.task = msg.task;
        turn.wo_eos = msg.wo_eos;
        out.push_back(std::move(turn));
      }
    } else {
      out.push_back(std::move(msg));
    }
  }
  return out;
}

// Official sort: within a user turn, tool results follow the call order of the
// latest assistant message with calls (unknown ids rank as position 0; stable).
void sort_results_by_call_order(const std::vector<Message*>& seq) {
  std::map<std::string, size_t, std::less<>> order;
  for (Message* msg : seq) {
    if (msg->role == "assistant" && !msg->tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < msg->tool_calls.size(); ++i) {
        if (!msg->tool_calls[i].id.empty()) order[msg->tool_calls[i].id] = i;
      }
    } else if (msg->role == "user" && msg->has_blocks) {
      std::vector<Block> results;
      for (const auto& b : msg->blocks)
        if (b.is_result) results.push_back(b);
      if (results.size() < 2 || order.empty()) continue;
      const auto rank = [&order](const Block& b) {
        const auto it = order.find(b.tool_use_id);
        return it == order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&rank](const Block& a, const Block& b) { return rank(a) < rank(b); });
      size_t next = 0;
      for (auto& b : msg->blocks)
        if (b.is_result) b = results[next++];
    }
  }
}

ptrdiff_t last_user_index(const std::vector<Message>& msgs) {
  for (size_t i = msgs.size(); i-- > 0;) {
    if (msgs[i].role == "user" || msgs[i].role == "developer") return static_cast<ptrdiff_t>(i);
  }
  return -1;
}

// Official drop: before the last user/developer message, assistant reasoning is
// removed and messages of other roles than user/system/latest_reminder (i.e.
// developer and unknown roles) disappear.
std::vector<Message> drop_old_thinking(const std::vector<Message>& in) {
  const ptrdiff_t last_user = last_user_index(in);
  std::vector<Message> out;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& role = in[i].role;
    const bool keep = role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
                      role == "direct_search_results" || static_cast<ptrdiff_t>(i) >= last_user;
    if (keep) {
      out.push_back(in[i]);
    } else if (role == "assistant") {
      out.push_back(in[i]);
      out.back().reasoning.clear();
    }
  }
  return out;
}

class SegmentWriter {
 public:
  explicit SegmentWriter(std::vector<RenderedSegment>& out) : out_(out) {}
  void markup(std::string_view s) { add(s, true); }
  void text(std::string_view s) { add(s, false); }

 private:
  void add(std::string_view s, bool is_template) {
    if (s.empty()) return;
    if (!out_.empty() && out_.back().is_template == is_template) out_.back().text += s;
    else out_.push_back({std::string(s), is_template});
  }
  std::vector<RenderedSegment>& out_;
};

struct RenderContext {
  bool thinking = false;
  bool effort_max = false;
  bool drop_thinking = true;
  bool add_generation_prompt = true;
  std::function<std::optional<std::string>(const std::vector<std::string>&)> exact_tool_block;
};

void write_tools_and_format(SegmentWriter& w, const Message& msg) {
  if (!msg.tools.empty()) {
    w.markup("\n\n");
    w.markup(kToolsHead);
    std::string lines;
    for (const auto& fn : msg.tools) {
      if (!lines.empty()) lines += '\n';
      lines += python_json_dumps(fn);
    }
    w.text(lines);
    w.markup(kToolsTail);
  }
  if (!msg.response_format.is_null()) {
    w.markup("\n\n");
    w.markup(kResponseFormatHead);
    w.text(python_json_dumps(msg.response_format));
  }
}

void write_message(SegmentWriter& w, const std::vector<Message>& msgs, size_t index, ptrdiff_t last_user,
                   const RenderContext& rc) {
  const Message& msg = msgs[index];
  if (index == 0 && rc.thinking && rc.effort_max) w.markup(kThinkMax);

  if (msg.role == "system") {
    w.text(msg.content);
    write_tools_and_format(w, msg);
  } else if (msg.role == "developer") {
    if (msg.content.empty()) throw Error(msg.where + ": a developer message needs non-empty content");
    w.markup(kUser);
    w.text(msg.content);
    write_tools_and_format(w, msg);
  } else if (msg.role == "user") {
    w.markup(kUser);
    if (msg.has_blocks && !msg.blocks.empty()) {
      for (size_t i = 0; i < msg.blocks.size(); ++i) {
        if (i > 0) w.markup("\n\n");
        const Block& b = msg.blocks[i];
        if (b.is_result) w.markup("<tool_result>");
        w.text(b.text);
        if (b.is_result) w.markup("</tool_result>");
      }
    } else {
      w.text(msg.content);
    }
  } else if (msg.role == "latest_reminder") {
    w.markup(kLatestReminder);
    w.text(msg.content);
  } else if (msg.role == "assistant") {
    // An answer to a task turn never carries a reasoning part; a history answer
    // whose reasoning is dropped has none either (its turn opened with </think>).
    const bool after_task = index > 0 && msgs[index - 1].task.has_value();
    if (rc.thinking && !after_task && (!rc.drop_thinking || static_cast<ptrdiff_t>(index) > last_user)) {
      w.text(msg.reasoning);
      w.markup(kThinkClose);
    }
    w.text(msg.content);
    std::optional<std::string> exact;
    if (!msg.tool_calls.empty() && rc.exact_tool_block) {
      std::vector<std::string> ids;
      for (const auto& tc : msg.tool_calls) ids.push_back(tc.id);
      exact = rc.exact_tool_block(ids);
    }
    if (exact) {
      // The sampled block: DSML markup with the model's own values inside.
      w.markup(*exact);
    } else {
      std::vector<ToolCallText> calls;
      for (const auto& tc : msg.tool_calls) calls.push_back(tc.text);
      render_tool_calls_dsml(calls, [&w](std::string_view s, bool is_template) {
        if (is_template) w.markup(s);
        else w.text(s);
      });
    }
    if (!msg.wo_eos) w.markup(kEos);
  } else {
    throw Error(msg.where + ": unknown role '" + msg.role + "'");
  }

  // What closes the message depends on what follows: nothing before another
  // user-side message, the task token or the next assistant turn's opening
  // otherwise (also after the last message: the generation prompt).
  if (index + 1 < msgs.size()) {
    const std::string& next = msgs[index + 1].role;
    if (next != "assistant" && next != "latest_reminder") return;
  } else if (!rc.add_generation_prompt) {
    return;
  }
  if (msg.task) {
    const std::string_view token = task_tokens().find(*msg.task)->second;
    if (*msg.task == "action") {
      w.markup(kAssistant);
      w.markup(rc.thinking ? kThinkOpen : kThinkClose);
    }
    w.markup(token);
  } else if (msg.role == "user" || msg.role == "developer") {
    w.markup(kAssistant);
    const bool open_think =
        rc.thinking && (!rc.drop_thinking || static_cast<ptrdiff_t>(index) >= last_user);
    w.markup(open_think ? kThinkOpen : kThinkClose);
  }
}

// Hands the request's tools to the first message of the conversation.
void attach_tools(std::vector<Message>& first_list, const Json& tools) {
  Json functions = tool_functions(tools, "tools");
  if (functions.empty()) return;
  if (!first_list.empty() && first_list.front().role == "system") {
    if (!first_list.front().tools.empty()) {
      throw Error("tools are given both as an argument and on the first system message (" +
                  first_list.front().where + ")");
    }
    first_list.front().tools = std::move(functions);
    return;
  }
  Message sys;
  sys.role = "system";
  sys.where = "tools";
  sys.tools = std::move(functions);
  first_list.insert(first_list.begin(), std::move(sys));
}

}  // namespace

std::string RenderedChat::text() const {
  std::string out;
  size_t n = 0;
  for (const auto& s : segments) n += s.text.size();
  out.reserve(n);
  for (const auto& s : segments) out += s.text;
  return out;
}

RenderedChat render_chat(const Json& messages, const Json& tools, const RenderOptions& options) {
  const bool has_context = !options.context.is_null() && !(options.context.is_array() && options.context.empty());
  std::vector<Message> context_raw = has_context ? load_messages(options.context, "context") : std::vector<Message>{};
  std::vector<Message> raw = load_messages(messages, "messages");
  attach_tools(has_context ? context_raw : raw, tools);

  std::vector<Message> current = merge_into_user_turns(std::move(raw));
  {
    // Results in the new messages may answer calls made in the context.
    std::vector<Message*> seq;
    for (auto& m : context_raw) seq.push_back(&m);
    for (auto& m : current) seq.push_back(&m);
    sort_results_by_call_order(seq);
  }
  std::vector<Message> context = merge_into_user_turns(std::move(context_raw));
  {
    std::vector<Message*> seq;
    for (auto& m : context) seq.push_back(&m);
    sort_results_by_call_order(seq);
  }

  RenderContext rc;
  rc.thinking = options.mode != ThinkingMode::None;
  rc.effort_max = options.mode == ThinkingMode::Max;
  rc.add_generation_prompt = options.add_generation_prompt;
  rc.drop_thinking = options.drop_thinking;
  rc.exact_tool_block = options.exact_tool_block;
  std::vector<Message> full = context;
  full.insert(full.end(), current.begin(), current.end());
  for (const auto& m : full) {
    if (!m.tools.empty()) rc.drop_thinking = false;  // tool conversations keep every reasoning
  }

  // Only the continuation is rendered; with dropping, the context counts as
  // long as it is after its own drop (the official bookkeeping).
  size_t first_rendered = context.size();
  if (rc.thinking && rc.drop_thinking) {
    full = drop_old_thinking(full);
    first_rendered = drop_old_thinking(context).size();
  }

  RenderedChat out;
  SegmentWriter w(out.segments);
  if (options.add_bos && context.empty()) w.markup(kBos);
  const ptrdiff_t last_user = last_user_index(full);
  for (size_t i = first_rendered; i < full.size(); ++i) write_message(w, full, i, last_user, rc);
  return out;
}

ThinkingMode effective_thinking_mode(ThinkingMode requested, int64_t ctx, std::string* warning) {
  if (warning) warning->clear();
  if (requested != ThinkingMode::Max || ctx >= kThinkMaxMinContext) return requested;
  if (warning) {
    *warning = "Think Max needs a context of at least " + std::to_string(kThinkMaxMinContext) +
               " tokens (this one has " + std::to_string(ctx) + "); using normal thinking instead";
  }
  return ThinkingMode::High;
}

std::string_view think_max_prefix() { return kThinkMax; }

}  // namespace ds4::text
