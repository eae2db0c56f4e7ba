// Chat rendering: OpenAI-style messages (+ tools, thinking mode) → prompt text,
// byte-identical to DeepSeek's official V4 encoder (encoding_dsv4.py,
// `encode_messages`), which is what the model was trained on. Where ds4 (and
// PROTOCOL.md §2.2–2.5) differ, this follows the official encoder; the list of
// differences is PROTOCOL.md §2.7 and its Appendix.
//
// Message fields read (anything else is ignored):
//   role            system | developer | user | assistant | tool | latest_reminder
//   content         string, null (= "") or a list of parts: {"type":"text","text":…}
//                   parts are joined with "\n\n"; other parts render
//                   "[Unsupported TYPE]" (the official rule for tool-result part
//                   lists, applied here to every role; the official encoder
//                   crashes on list content outside tool results).
//   reasoning_content  (assistant) string or null
//   tool_calls      (assistant) [{id, type, function{name, arguments}}]; arguments is
//                   a JSON object text (invalid JSON → one "arguments" string
//                   parameter, official); a non-string arguments value renders as
//                   the official encoder renders it: one string="false" parameter
//                   "arguments" holding its json.dumps.
//   tool_call_id    (tool) pairs results with calls for the official result sort
//   tools           OpenAI tools array: rendered after system/developer content;
//                   non-empty on a system/developer/assistant/latest_reminder
//                   message it switches drop_thinking off; on user and tool
//                   messages it is ignored (lost in the official merge)
//   response_format (system/developer) rendered as a "## Response Format" section
//   task            action | query | authority | domain | title | read_url (quick
//                   instruction tasks: append the task token)
//   wo_eos          (assistant) true → no <｜end▁of▁sentence｜>
// Official behaviours kept on purpose: consecutive user/tool messages merge into
// one user turn (parts joined "\n\n"; results stably sorted by the last call
// order); developer is a user turn (dropped before the last user when thinking
// is dropped); a system message in mid chat is written in place with no marker.
// Deviations from the official code (its crashes / Python artefacts):
//   null content renders "" (official writes "None" for tool/latest_reminder);
//   every structural problem throws ds4::Error instead of AssertionError/
//   KeyError/TypeError: messages not an array or an element not an object,
//   unknown or missing role (only when the message is rendered: the official
//   thinking-mode drop silently removes unknown roles before the last user),
//   empty developer content, content or reasoning of another JSON type, a tool
//   call without function/name/arguments, arguments JSON that is not an object,
//   an unknown task, a tools entry without "function".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds4::text {

// None = official thinking_mode "chat"; High = "thinking"; Max = "thinking" with
// reasoning_effort "max" (Think Max prefix before the first message).
enum class ThinkingMode { None, High, Max };

struct RenderOptions {
  ThinkingMode mode = ThinkingMode::High;
  // Official add_default_bos_token: BOS once at the start of the conversation
  // (never when `context` is given).
  bool add_bos = true;
  // When the last message is user/developer (or carries a task), the official
  // encoder always closes it with <｜Assistant｜> + <think> | </think> (or the
  // task suffix). false omits exactly that final suffix (a ds4 extension).
  bool add_generation_prompt = true;
  bool drop_thinking = true;  // official default
  // Official `context`: messages already rendered (e.g. in the KV cache). Only
  // the continuation (`messages`) is rendered, as the official encoder does;
  // null or an empty array = no context.
  nlohmann::ordered_json context = nullptr;
  // Exact replay (PROTOCOL.md §3.7): for an assistant message with tool calls,
  // given their ids in order, the DSML block the model really sampled for
  // them (with its leading whitespace), written instead of the canonical
  // rendering; nullopt = render canonically. Unset = always canonical.
  std::function<std::optional<std::string>(const std::vector<std::string>& call_ids)> exact_tool_block;
};

// One piece of rendered text. Template pieces (BOS, role markers, think tags,
// task tokens, DSML tags, the fixed tools/response-format text) may contain
// special-token literals that must be tokenized as special tokens; content
// pieces came from a client or the model (system/user/assistant text,
// reasoning, tool results, tool schemas, tool names and argument values) and
// must be tokenized as plain text. Segment boundaries are not BPE boundaries:
// tokenize the joined text, recognizing special literals only inside template
// pieces. Adjacent pieces of the same kind are merged; no piece is empty.
struct RenderedSegment {
  std::string text;
  bool is_template;
};

struct RenderedChat {
  std::vector<RenderedSegment> segments;
  // All segments joined: byte-identical to the official encode_messages output.
  std::string text() const;
};

// `tools` may be null or an OpenAI tools array [{type, function{…}}]. Non-empty
// tools are attached to the first message of the conversation (context first)
// when it is a system message without tools; otherwise an empty system message
// carrying them is put first, which renders BOS + "\n\n## Tools…" (official
// layout for tools without a system prompt). A non-empty `tools` together with a
// first system message that already has tools throws ds4::Error.
RenderedChat render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                         const RenderOptions& options);

// Think Max is honoured only with an allocated context of at least this many
// tokens (PROTOCOL.md §2.1, a ds4 rule); below it Max falls back to High.
inline constexpr int64_t kThinkMaxMinContext = 393216;
// Returns the mode to use for a context of `ctx` tokens. On a downgrade it
// writes a warning for the user into `*warning` (when non-null); otherwise
// clears it.
ThinkingMode effective_thinking_mode(ThinkingMode requested, int64_t ctx, std::string* warning);

// The official REASONING_EFFORT_MAX text (ends with "\n\n").
std::string_view think_max_prefix();

}  // namespace ds4::text
