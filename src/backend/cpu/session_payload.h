// Saving and loading a Session.
//
// The payload is ds4's "DSV4" session payload, version 1 (PROTOCOL.md 6.4):
// 13 u32 header fields, token ids, next-token logits, per-layer compressed and
// indexer row counts, then per layer the live raw window rows in position
// order, the compressed rows and compressor frontier (kv, score), and on
// ratio-4 layers the indexer rows and indexer frontier. All little-endian f32
// / u32. A payload whose layout, shape or counts do not fit the session it is
// loaded into is refused with a ds4::Error naming the field, and the session
// is left unchanged.
//
// The payload carries shapes but no model identity, so a session file wraps
// it in a container (docs/session-files.md): magic "DS4S", container version,
// numerics, the model fingerprint (model/deepseek4_fingerprint.h), the payload
// length, the payload, and a SHA-256 of everything before it. Files are
// written to a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/session.h"

namespace ds4::cpu {

using backend::kDsv4PayloadMagic;
using backend::kDsv4PayloadVersion;

// The DSV4 payload of `session`; prefill_chunk is recorded in the header.
std::vector<uint8_t> serialize_payload(const Session &session, int prefill_chunk);

// Replaces the contents of `session` with the payload. The payload's saved
// context may be at most session.n_ctx() and its tokens fewer than it; the
// prefill chunk recorded is not checked (this engine's results do not depend
// on it). ds4::Error, session unchanged, on any mismatch or truncation.
void deserialize_payload(std::span<const uint8_t> payload, Session &session);

// The state of layers [range.begin, range.end) (end -1: through the last
// layer, with the logits) with the token list: what a pipeline stage holds
// of a session (dist/pipeline_backend.h merges the stages' states into one
// payload). Its own format, magic "DS4L": header, tokens, logits when the
// range ends with the head, per layer of the range the payload's counts and
// rows. deserialize_layers replaces those layers, the token list and (with
// the head) the logits, leaving the other layers as they are; ds4::Error,
// session unchanged, when anything does not fit.
std::vector<uint8_t> serialize_layers(const Session &session, backend::LayerRange range);
void deserialize_layers(std::span<const uint8_t> blob, Session &session, backend::LayerRange range);

// Session file = container + payload (see above).
void save_session_file(const std::string &path, const Session &session, int prefill_chunk);
// ds4::Error naming the file and the problem (not a session file, damaged,
// another model, other numerics, payload mismatch); session unchanged.
void load_session_file(const std::string &path, Session &session);

}  // namespace ds4::cpu
