// Token ids of a rendered chat. Two ways, for two kinds of caller:
//  - segments (the CLI and the agent, which know which bytes a person typed):
//    the joined text is tokenized as one string, but special-token literals
//    are recognised only inside template segments, so typed text such as
//    "<｜User｜>" stays text while BPE still sees the same spans it would
//    see in the joined text;
//  - whole text (the server, which gets rendered prompts from clients and must
//    tokenize exactly what the official tokenizer would): specials parsed
//    everywhere (PROTOCOL.md §1.5, trap 3).
#pragma once

#include <cstdint>
#include <vector>

#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace ds4::text {

std::vector<TokenId> tokenize_segments(const RenderedChat& chat, const Tokenizer& tokenizer);
std::vector<TokenId> tokenize_rendered_text(const RenderedChat& chat, const Tokenizer& tokenizer);

}  // namespace ds4::text
