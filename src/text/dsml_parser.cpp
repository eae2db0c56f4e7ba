#include "text/dsml_parser.h"

#include "text/dsml_render.h"

#include <algorithm>
#include <array>
#include <optional>

namespace ds4::text {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// A tag longer than this is not a tag (bounds what a stream holds back).
constexpr size_t kMaxTagBytes = 4096;
// Same nesting limit the server applies to request JSON (PROTOCOL.md §5.3).
constexpr int kMaxJsonDepth = 256;

// The tags of one DSML spelling: "｜DSML｜" (official), "DSML｜" (first bar
// missing) or "" (plain XML-like tags).
struct TagFamily {
  std::string open_block;     // complete start tag
  std::string close_block;    // heads: the tag up to its attributes / '>'
  std::string invoke;
  std::string close_invoke;
  std::string parameter;
  std::string close_parameter;  // complete: a value ends at its first occurrence
  std::string close_parameter_escape;
};

TagFamily make_family(std::string_view prefix) {
  const std::string p(prefix);
  return {"<" + p + "tool_calls>", "</" + p + "tool_calls", "<" + p + "invoke", "</" + p + "invoke",
          "<" + p + "parameter",   "</" + p + "parameter>", "&lt;/" + p + "parameter>"};
}

const std::array<TagFamily, 3>& families() {
  static const std::array<TagFamily, 3> f = {make_family("｜DSML｜"), make_family("DSML｜"), make_family("")};
  return f;
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == ':';
}

// Length of the longest suffix of `s` that is a proper prefix of `pattern`.
size_t partial_suffix(std::string_view s, std::string_view pattern) {
  for (size_t k = std::min(s.size(), pattern.size() - 1); k > 0; --k) {
    if (pattern.starts_with(s.substr(s.size() - k))) return k;
  }
  return 0;
}

// Largest end <= `end` that does not cut a multi-byte UTF-8 sequence whose
// lead byte announces more bytes than are present.
size_t utf8_safe_end(std::string_view s, size_t end) {
  for (size_t back = 1; back <= 3 && back <= end; ++back) {
    const auto c = static_cast<unsigned char>(s[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? end - back : end;
  }
  return end;
}

// Appends the valid UTF-8 in `bytes` to `out`, each maximal invalid subpart
// replaced by U+FFFD; an incomplete sequence at the end waits in `partial`.
void append_utf8_sanitized(std::string& out, std::string& partial, std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (partial.empty()) {
      if (c < 0x80) {
        out += static_cast<char>(c);
      } else if (c >= 0xC2 && c <= 0xF4) {
        partial += static_cast<char>(c);
      } else {
        out += kReplacementChar;
      }
      ++i;
      continue;
    }
    const auto lead = static_cast<unsigned char>(partial[0]);
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    unsigned char lo = 0x80, hi = 0xBF;
    if (partial.size() == 1) {
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (c >= lo && c <= hi) {
      partial += static_cast<char>(c);
      if (partial.size() == need) {
        out += partial;
        partial.clear();
      }
      ++i;
    } else {
      out += kReplacementChar;  // the byte is looked at again as a possible lead
      partial.clear();
    }
  }
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out, partial;
  append_utf8_sanitized(out, partial, bytes);
  if (!partial.empty()) out += kReplacementChar;
  return out;
}

struct Attribute {
  std::string_view name, value;
};

enum class TagScan { Incomplete, Complete, NoMatch };

struct TagResult {
  TagScan status = TagScan::NoMatch;
  size_t end = 0;  // one past '>'
  std::vector<Attribute> attributes;

  const Attribute* find(std::string_view name) const {
    for (const Attribute& a : attributes) {
      if (a.name == name) return &a;
    }
    return nullptr;
  }
};

// Reads `head` followed by ` name="value"` attributes and '>' from the start
// of `s`. The answer for a prefix never contradicts the answer for a longer
// one (Incomplete may become anything; the others stay), which keeps the
// stream parser's decisions independent of chunking.
TagResult scan_tag(std::string_view s, std::string_view head) {
  TagResult r;
  auto incomplete = [&] {
    r.status = s.size() >= kMaxTagBytes ? TagScan::NoMatch : TagScan::Incomplete;
    return r;
  };
  if (s.size() < head.size()) {
    r.status = head.starts_with(s) ? TagScan::Incomplete : TagScan::NoMatch;
    return r;
  }
  if (!s.starts_with(head)) return r;
  size_t p = head.size();
  for (;;) {
    while (p < s.size() && is_ws(s[p])) ++p;
    if (p == s.size()) return incomplete();
    if (s[p] == '>') {
      if (p + 1 > kMaxTagBytes) return r;
      r.status = TagScan::Complete;
      r.end = p + 1;
      return r;
    }
    // The official parser accepts `<｜DSML｜invokename="x">` (its regex allows
    // no space there), so attributes need no whitespace before them.
    const size_t name_start = p;
    while (p < s.size() && is_name_char(s[p])) ++p;
    if (p == s.size()) return incomplete();
    if (p == name_start || s[p] != '=') return r;
    if (++p == s.size()) return incomplete();
    if (s[p] != '"') return r;
    const size_t value_start = ++p;
    // The official parser matches names non-greedily up to `">`, so a quote
    // inside a value ends it only where whitespace or '>' follows.
    for (;;) {
      p = s.find('"', p);
      if (p == std::string_view::npos || p + 1 == s.size()) return incomplete();
      if (is_ws(s[p + 1]) || s[p + 1] == '>') break;
      ++p;
    }
    r.attributes.push_back({s.substr(name_start, value_start - 2 - name_start), s.substr(value_start, p - value_start)});
    ++p;
  }
}

bool is_delta(DsmlEvent::Kind k) {
  return k == DsmlEvent::Kind::ReasoningDelta || k == DsmlEvent::Kind::ContentDelta ||
         k == DsmlEvent::Kind::ToolArgumentsDelta;
}

}  // namespace

DsmlStreamParser::DsmlStreamParser(DsmlOptions options)
    : options_(options),
      state_(options.thinking ? State::ThinkStart : State::Content),
      tools_enabled_(options.tools_active) {}

std::vector<DsmlEvent> DsmlStreamParser::feed(std::string_view bytes) {
  std::vector<DsmlEvent> events;
  if (finished_ || bytes.empty()) return events;
  out_ = &events;
  pending_.append(bytes);
  run(false);
  out_ = nullptr;
  return events;
}

std::vector<DsmlEvent> DsmlStreamParser::finish() {
  std::vector<DsmlEvent> events;
  if (finished_) return events;
  out_ = &events;
  run(true);
  out_ = nullptr;
  finished_ = true;
  return events;
}

void DsmlStreamParser::run(bool eof) {
  for (;;) {
    Step s = Step::NeedMore;
    switch (state_) {
      case State::ThinkStart: s = step_think_start(eof); break;
      case State::Reasoning: s = step_reasoning(eof); break;
      case State::Content: s = step_content(eof); break;
      case State::BetweenInvokes: s = step_between_invokes(eof); break;
      case State::BetweenParams: s = step_between_params(eof); break;
      case State::Value: s = step_value(eof); break;
      case State::AfterBlock: step_after_block(); break;
    }
    if (s == Step::NeedMore) return;
  }
}

DsmlStreamParser::Step DsmlStreamParser::step_think_start(bool eof) {
  if (!eof && pending_.size() < kThinkOpen.size() && kThinkOpen.starts_with(pending_)) return Step::NeedMore;
  if (pending_.starts_with(kThinkOpen)) pending_.erase(0, kThinkOpen.size());
  state_ = State::Reasoning;
  return Step::Progress;
}

DsmlStreamParser::Step DsmlStreamParser::step_reasoning(bool eof) {
  const size_t close = pending_.find(kThinkClose);
  if (close != std::string::npos) {
    emit(DsmlEvent::Kind::ReasoningDelta, std::string_view(pending_).substr(0, close));
    pending_.erase(0, close + kThinkClose.size());
    message_.thinking_closed = true;
    state_ = State::Content;
    return Step::Progress;
  }
  size_t end = pending_.size();
  if (!eof) end = utf8_safe_end(pending_, end - partial_suffix(pending_, kThinkClose));
  emit(DsmlEvent::Kind::ReasoningDelta, std::string_view(pending_).substr(0, end));
  pending_.erase(0, end);
  return Step::NeedMore;
}

DsmlStreamParser::Step DsmlStreamParser::step_content(bool eof) {
  if (tools_enabled_) {
    size_t start = std::string::npos;
    for (size_t f = 0; f < families().size(); ++f) {
      const size_t pos = pending_.find(families()[f].open_block);
      if (pos < start) {
        start = pos;
        family_ = static_cast<int>(f);
      }
    }
    if (start != std::string::npos) {
      // The official start token is "\n\n" + tag; without it the block takes
      // the whole whitespace run before the tag, so content never ends in the
      // separator (PROTOCOL.md §9 trap 5).
      size_t b = start;
      if (b >= 2 && pending_[b - 1] == '\n' && pending_[b - 2] == '\n') {
        b -= 2;
      } else {
        while (b > 0 && is_ws(pending_[b - 1])) --b;
      }
      emit_content(std::string_view(pending_).substr(0, b));
      const size_t tag_end = start + families()[family_].open_block.size();
      block_raw_ = pending_.substr(b, tag_end - b);
      block_tag_offset_ = start - b;
      pending_.erase(0, tag_end);
      calls_announced_ = false;
      state_ = State::BetweenInvokes;
      return Step::Progress;
    }
  }
  size_t end = pending_.size();
  if (!eof) {
    if (tools_enabled_) {
      size_t hold = 0;
      for (const TagFamily& f : families()) hold = std::max(hold, partial_suffix(pending_, f.open_block));
      end -= hold;
      while (end > 0 && is_ws(pending_[end - 1])) --end;  // may be the "\n\n" before a block
    }
    end = utf8_safe_end(pending_, end);
  }
  emit_content(std::string_view(pending_).substr(0, end));
  pending_.erase(0, end);
  return Step::NeedMore;
}

std::optional<DsmlStreamParser::Step> DsmlStreamParser::skip_block_whitespace(bool eof) {
  size_t ws = 0;
  while (ws < pending_.size() && is_ws(pending_[ws])) ++ws;
  consume_block(ws);
  if (!pending_.empty()) return std::nullopt;
  if (eof) fail_block("dsml: unterminated tool call block", true);
  return eof ? Step::Progress : Step::NeedMore;
}

DsmlStreamParser::Step DsmlStreamParser::no_tag(bool incomplete, bool eof, std::string_view expected) {
  if (incomplete && !eof) return Step::NeedMore;
  if (incomplete) {
    fail_block("dsml: unterminated tool call block", true);
  } else {
    fail_block(std::string(expected), false);
  }
  return Step::Progress;
}

DsmlStreamParser::Step DsmlStreamParser::step_between_invokes(bool eof) {
  if (const std::optional<Step> wait = skip_block_whitespace(eof)) return *wait;
  const TagFamily& fam = families()[family_];
  const TagResult close = scan_tag(pending_, fam.close_block);
  if (close.status == TagScan::Complete && close.attributes.empty()) {
    consume_block(close.end);
    message_.raw_tool_block = block_raw_;
    message_.tool_block_complete = true;
    emit(DsmlEvent::Kind::ToolBlockEnd, {});
    state_ = State::AfterBlock;
    return Step::Progress;
  }
  const TagResult invoke = scan_tag(pending_, fam.invoke);
  if (invoke.status == TagScan::Complete) {
    const Attribute* name = invoke.find("name");
    if (name == nullptr) {
      fail_block("dsml: invoke tag without a name", false);
      return Step::Progress;
    }
    ParsedToolCall call;
    call.name = sanitize_utf8(name->value);
    consume_block(invoke.end);
    calls_announced_ = true;
    param_names_.clear();
    const int index = static_cast<int>(message_.tool_calls.size());
    emit(DsmlEvent::Kind::ToolCallBegin, call.name, index);
    message_.tool_calls.push_back(std::move(call));
    emit_arguments("{", false);
    state_ = State::BetweenParams;
    return Step::Progress;
  }
  return no_tag(close.status == TagScan::Incomplete || invoke.status == TagScan::Incomplete, eof,
                "dsml: expected an invoke tag or the closing tool_calls tag");
}

DsmlStreamParser::Step DsmlStreamParser::step_between_params(bool eof) {
  if (const std::optional<Step> wait = skip_block_whitespace(eof)) return *wait;
  const TagFamily& fam = families()[family_];
  const int index = static_cast<int>(message_.tool_calls.size()) - 1;
  const TagResult close = scan_tag(pending_, fam.close_invoke);
  if (close.status == TagScan::Complete && close.attributes.empty()) {
    consume_block(close.end);
    emit_arguments("}", true);
    emit(DsmlEvent::Kind::ToolCallEnd, {}, index);
    state_ = State::BetweenInvokes;
    return Step::Progress;
  }
  const TagResult param = scan_tag(pending_, fam.parameter);
  if (param.status == TagScan::Complete) {
    const Attribute* name = param.find("name");
    const Attribute* string = param.find("string");
    if (name == nullptr) {
      fail_block("dsml: parameter tag without a name", false);
      return Step::Progress;
    }
    if (string != nullptr && string->value != "true" && string->value != "false") {
      fail_block("dsml: parameter string attribute is neither \"true\" nor \"false\"", false);
      return Step::Progress;
    }
    std::string key = sanitize_utf8(name->value);
    if (std::find(param_names_.begin(), param_names_.end(), key) != param_names_.end()) {
      fail_block("dsml: duplicate parameter name \"" + key + "\"", false);
      return Step::Progress;
    }
    param_is_string_ = string == nullptr || string->value == "true";
    consume_block(param.end);
    std::string fragment = param_names_.empty() ? "\"" : ",\"";
    append_json_escaped(fragment, key);
    fragment += param_is_string_ ? "\":\"" : "\":";
    emit_arguments(fragment, false);
    param_names_.push_back(key);
    param_name_ = std::move(key);
    value_raw_.clear();
    value_text_.clear();
    utf8_partial_.clear();
    json_in_string_ = json_escape_ = false;
    json_depth_ = json_max_depth_ = 0;
    state_ = State::Value;
    return Step::Progress;
  }
  return no_tag(close.status == TagScan::Incomplete || param.status == TagScan::Incomplete, eof,
                "dsml: expected a parameter tag or the closing invoke tag");
}

DsmlStreamParser::Step DsmlStreamParser::step_value(bool eof) {
  const TagFamily& fam = families()[family_];
  const size_t close = pending_.find(fam.close_parameter);
  if (close != std::string::npos) {
    value_bytes(std::string_view(pending_).substr(0, close));
    consume_block(close + fam.close_parameter.size());
    if (close_value()) state_ = State::BetweenParams;
    return Step::Progress;
  }
  if (eof) {
    fail_block("dsml: unterminated tool call block", true);
    return Step::Progress;
  }
  size_t hold = partial_suffix(pending_, fam.close_parameter);
  if (param_is_string_ && options_.decode_parameter_close_escape) {
    hold = std::max(hold, partial_suffix(pending_, fam.close_parameter_escape));
  }
  const size_t safe = pending_.size() - hold;
  value_bytes(std::string_view(pending_).substr(0, safe));
  consume_block(safe);
  return Step::NeedMore;
}

void DsmlStreamParser::step_after_block() {
  if (!trailing_warned_ && std::any_of(pending_.begin(), pending_.end(), [](char c) { return !is_ws(c); })) {
    trailing_warned_ = true;
    warn("dsml: text after the closing tool_calls tag ignored");
  }
  pending_.clear();
}

void DsmlStreamParser::value_bytes(std::string_view bytes) {
  if (bytes.empty()) return;
  std::string fragment;
  if (param_is_string_) {
    std::string piece;
    if (options_.decode_parameter_close_escape) {
      const TagFamily& fam = families()[family_];
      std::string decoded;
      size_t p = 0;
      for (size_t q; (q = bytes.find(fam.close_parameter_escape, p)) != std::string_view::npos;
           p = q + fam.close_parameter_escape.size()) {
        decoded.append(bytes.substr(p, q - p));
        decoded += fam.close_parameter;
      }
      decoded.append(bytes.substr(p));
      append_utf8_sanitized(piece, utf8_partial_, decoded);
    } else {
      append_utf8_sanitized(piece, utf8_partial_, bytes);
    }
    value_text_ += piece;
    append_json_escaped(fragment, piece);
  } else {
    // Minify: whitespace outside string literals goes; the raw text is
    // validated as a whole when the value closes.
    value_raw_.append(bytes);
    for (char c : bytes) {
      if (json_in_string_) {
        fragment += c;
        if (json_escape_) {
          json_escape_ = false;
        } else if (c == '\\') {
          json_escape_ = true;
        } else if (c == '"') {
          json_in_string_ = false;
        }
        continue;
      }
      if (is_ws(c)) continue;
      fragment += c;
      if (c == '"') json_in_string_ = true;
      if (c == '[' || c == '{') json_max_depth_ = std::max(json_max_depth_, ++json_depth_);
      if (c == ']' || c == '}') --json_depth_;
    }
  }
  emit_arguments(fragment, false);
}

bool DsmlStreamParser::close_value() {
  ParsedToolCall& call = message_.tool_calls.back();
  if (param_is_string_) {
    std::string fragment;
    if (!utf8_partial_.empty()) {
      utf8_partial_.clear();
      value_text_ += kReplacementChar;
      fragment += kReplacementChar;
    }
    fragment += '"';
    emit_arguments(fragment, false);
    call.arguments[param_name_] = value_text_;
    return true;
  }
  if (json_max_depth_ > kMaxJsonDepth) {
    fail_block("dsml: parameter \"" + param_name_ + "\" nests JSON too deeply", false);
    return false;
  }
  // nlohmann's parser takes a NUL byte for the end of input; JSON text never
  // holds a raw NUL, so such a value is refused before parsing.
  nlohmann::ordered_json value;
  if (value_raw_.find('\0') == std::string::npos) value = nlohmann::ordered_json::parse(value_raw_, nullptr, false);
  if (value_raw_.find('\0') != std::string::npos || value.is_discarded()) {
    fail_block("dsml: parameter \"" + param_name_ + "\" has string=\"false\" but its value is not JSON", false);
    return false;
  }
  call.arguments[param_name_] = std::move(value);
  return true;
}

void DsmlStreamParser::consume_block(size_t n) {
  block_raw_.append(pending_, 0, n);
  pending_.erase(0, n);
}

void DsmlStreamParser::fail_block(const std::string& why, bool unterminated) {
  warn(why);
  if (unterminated) message_.tool_block_unterminated = true;
  std::string text = std::move(block_raw_);
  text += pending_;
  block_raw_.clear();
  if (!calls_announced_) {
    // Not a block after all: its start tag is text, and a real start may
    // still follow anywhere after the tag's '<'.
    emit_content(std::string_view(text).substr(0, block_tag_offset_ + 1));
    pending_ = text.substr(block_tag_offset_ + 1);
  } else {
    emit(DsmlEvent::Kind::ToolBlockAbort, why);
    message_.tool_calls.clear();
    tools_enabled_ = false;
    args_hold_.clear();
    pending_ = std::move(text);
  }
  state_ = State::Content;
}

void DsmlStreamParser::emit(DsmlEvent::Kind kind, std::string_view text, int index) {
  if (is_delta(kind)) {
    if (text.empty()) return;
    if (kind == DsmlEvent::Kind::ReasoningDelta) message_.reasoning.append(text);
    if (kind == DsmlEvent::Kind::ContentDelta) message_.content.append(text);
    if (!out_->empty() && out_->back().kind == kind && out_->back().index == index) {
      out_->back().text.append(text);
      return;
    }
  }
  out_->push_back(DsmlEvent{kind, std::string(text), index});
}

void DsmlStreamParser::emit_content(std::string_view text) { emit(DsmlEvent::Kind::ContentDelta, text); }

void DsmlStreamParser::emit_arguments(std::string_view fragment, bool flush) {
  args_hold_.append(fragment);
  const size_t end = flush ? args_hold_.size() : utf8_safe_end(args_hold_, args_hold_.size());
  if (end == 0) return;
  ParsedToolCall& call = message_.tool_calls.back();
  call.arguments_json.append(args_hold_, 0, end);
  emit(DsmlEvent::Kind::ToolArgumentsDelta, std::string_view(args_hold_).substr(0, end),
       static_cast<int>(message_.tool_calls.size()) - 1);
  args_hold_.erase(0, end);
}

void DsmlStreamParser::warn(const std::string& message) {
  message_.warnings.push_back(message);
  emit(DsmlEvent::Kind::Warning, message);
}

ParsedMessage parse_dsml_completion(std::string_view text, DsmlOptions options) {
  DsmlStreamParser parser(options);
  parser.feed(text);
  parser.finish();
  return parser.message();
}

// ---------------------------------------------------------------------------
// DsmlSyntaxTracker

void DsmlSyntaxTracker::feed(std::string_view bytes) {
  for (char c : bytes) feed_byte(c);
}

void DsmlSyntaxTracker::feed_byte(char c) {
  const TagFamily& fam = families()[family_];
  switch (state_) {
    case State::Outside: {
      window_ += c;
      for (size_t f = 0; f < families().size(); ++f) {
        if (window_.ends_with(families()[f].open_block)) {
          family_ = static_cast<int>(f);
          state_ = State::Tags;
          in_tag_ = false;
          window_.clear();
          return;
        }
      }
      if (window_.size() > 32) window_.erase(0, window_.size() - 32);
      return;
    }
    case State::Tags: {
      if (!in_tag_) {
        if (c == '<') {
          in_tag_ = true;
          tag_in_quote_ = false;
          tag_ = "<";
        }
        return;
      }
      tag_ += c;
      if (tag_in_quote_) {
        if (c == '"') tag_in_quote_ = false;
      } else if (c == '"') {
        tag_in_quote_ = true;
      } else if (c == '<') {
        tag_ = "<";  // forgiving: a new tag starts
      } else if (c == '>') {
        in_tag_ = false;
        if (tag_.starts_with(fam.parameter)) {
          state_ = tag_.find("string=\"false\"") != std::string::npos ? State::JsonValue : State::StringValue;
          window_.clear();
          json_in_string_ = json_escape_ = false;
        } else if (tag_.starts_with(fam.close_block)) {
          state_ = State::Outside;
          window_.clear();
        }
      }
      if (tag_.size() > kMaxTagBytes) in_tag_ = false;
      return;
    }
    case State::StringValue:
    case State::JsonValue: {
      window_ += c;
      if (window_.ends_with(fam.close_parameter)) {
        state_ = State::Tags;
        in_tag_ = false;
        window_.clear();
        return;
      }
      if (window_.size() >= fam.close_parameter.size()) {
        window_.erase(0, window_.size() - (fam.close_parameter.size() - 1));
      }
      if (state_ == State::JsonValue) {
        if (json_in_string_) {
          if (json_escape_) {
            json_escape_ = false;
          } else if (c == '\\') {
            json_escape_ = true;
          } else if (c == '"') {
            json_in_string_ = false;
          }
        } else if (c == '"') {
          json_in_string_ = true;
        }
      }
      return;
    }
  }
}

size_t DsmlSyntaxTracker::partial_close_length() const {
  return partial_suffix(window_, families()[family_].close_parameter);
}

DsmlSyntaxTracker::Region DsmlSyntaxTracker::region() const {
  switch (state_) {
    case State::Outside: return Region::Outside;
    case State::Tags: return Region::Structural;
    case State::StringValue: return partial_close_length() >= 2 ? Region::Structural : Region::StringBody;
    case State::JsonValue:
      if (partial_close_length() >= 2) return Region::Structural;
      return json_in_string_ ? Region::JsonString : Region::JsonValue;
  }
  return Region::Outside;
}

}  // namespace ds4::text
