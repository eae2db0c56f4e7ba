#include "text/chat_tokens.h"

#include <algorithm>
#include <string>
#include <utility>

namespace ds4::text {

namespace {

// Special-token literals of the table, longest first.
std::vector<std::pair<std::string, TokenId>> special_literals(const Tokenizer& tokenizer) {
  std::vector<std::pair<std::string, TokenId>> out;
  for (uint32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const auto t = static_cast<TokenId>(id);
    if (tokenizer.is_special(t)) {
      std::string text = tokenizer.token_bytes(t);
      if (!text.empty()) out.emplace_back(std::move(text), t);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return out;
}

}  // namespace

std::vector<TokenId> tokenize_segments(const RenderedChat& chat, const Tokenizer& tokenizer) {
  const auto specials = special_literals(tokenizer);
  std::vector<TokenId> ids;
  std::string plain;  // text since the last special, across segment boundaries
  const auto flush = [&] {
    if (plain.empty()) return;
    const std::vector<TokenId> part = tokenizer.encode(plain, false);
    ids.insert(ids.end(), part.begin(), part.end());
    plain.clear();
  };
  for (const RenderedSegment& s : chat.segments) {
    if (!s.is_template) {
      plain += s.text;
      continue;
    }
    const std::string_view t = s.text;
    size_t i = 0;
    while (i < t.size()) {
      const std::pair<std::string, TokenId>* hit = nullptr;
      for (const auto& sp : specials) {
        if (t.compare(i, sp.first.size(), sp.first) == 0) {
          hit = &sp;
          break;
        }
      }
      if (hit == nullptr) {
        plain += t[i++];
        continue;
      }
      flush();
      ids.push_back(hit->second);
      i += hit->first.size();
    }
  }
  flush();
  return ids;
}

std::vector<TokenId> tokenize_rendered_text(const RenderedChat& chat, const Tokenizer& tokenizer) {
  return tokenizer.encode(chat.text(), true);
}

}  // namespace ds4::text
