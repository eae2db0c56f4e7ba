// Why a generation ended (PROTOCOL.md §4 "Stop conditions", first wins). The
// generation loop decides; this file only names the reasons and maps them to
// the API vocabularies.
#pragma once

#include <string_view>

namespace ds4::runtime {

enum class StopReason { None, Eos, MaxTokens, ContextFull, StopString, ToolCalls, Cancelled, Error };

// OpenAI finish_reason: EOS and stop strings -> "stop", token limit and full
// context -> "length", closed tool-call block -> "tool_calls", shutdown or I/O
// failure -> "error". None (still running) -> "" (the API writes null).
constexpr std::string_view to_string(StopReason r) {
  switch (r) {
    case StopReason::None: return "";
    case StopReason::Eos: return "stop";
    case StopReason::MaxTokens: return "length";
    case StopReason::ContextFull: return "length";
    case StopReason::StopString: return "stop";
    case StopReason::ToolCalls: return "tool_calls";
    case StopReason::Cancelled: return "error";
    case StopReason::Error: return "error";
  }
  return "error";
}

// Anthropic stop_reason (PROTOCOL.md §5): tool_calls -> "tool_use", length ->
// "max_tokens", everything else -> "end_turn". None -> "".
constexpr std::string_view to_anthropic_string(StopReason r) {
  switch (r) {
    case StopReason::None: return "";
    case StopReason::ToolCalls: return "tool_use";
    case StopReason::MaxTokens:
    case StopReason::ContextFull: return "max_tokens";
    default: return "end_turn";
  }
}

}  // namespace ds4::runtime
