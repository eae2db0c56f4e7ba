// The bytes of one disk KV cache file, `<dir>/<sha1hex>.kv` (PROTOCOL.md 6.3):
//
//   [48-byte header][u32 text_len][text][DSV4 session payload][trailers in ext-bit order]
//
// Header, little-endian: "KVC", version 1, routed-expert quant bits (2 or 4),
// save reason, ext flags, byte 7 reserved, u32 tokens, u32 hits, u32 context
// size, 4 reserved bytes, u64 created, u64 last used (unix seconds), u64
// payload bytes. The text is the key (normally the decoded cached tokens) and
// the file name is SHA-1(text) in lowercase hex.
//
// Trailers, present when their ext bit is set, in bit order:
//   bit0 KTM:  "KTM", u8 version 1, u32 count, per entry u32 id_len (1..256),
//              u32 dsml_len, id bytes, exact DSML block bytes (PROTOCOL.md 3.7).
//   bit3 title (newer ds4 agent): u32 len + UTF-8 title; kept, never written.
//   bit4 MFP:  "MFP", u8 version 1, the 32-byte deepseek4 model fingerprint
//              (model/deepseek4_fingerprint.h).
// Bits 1 and 2 carry no trailer: they say the key is a Responses-visible or a
// thinking-visible transcript (the payload then holds more tokens than the
// text describes).
//
// Deviation from ds4: ds4 leaves byte 7 reserved and so cannot tell two models
// apart. The MFP trailer (bit4) is this engine's extension; the reader requires
// it to equal the loaded model's fingerprint, and files without it (ds4's own
// files included) count as another model's and are never loaded.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ds4::runtime {

enum class KvSaveReason : uint8_t {
  Unknown = 0,
  Cold = 1,
  Continued = 2,
  Evict = 3,
  Shutdown = 4,
  AgentSystem = 5,
  AgentSession = 6,
};
// "unknown", "cold", "continued", "evict", "shutdown", "agent-system", "agent-session".
std::string_view kv_save_reason_name(KvSaveReason reason);

inline constexpr size_t kKvHeaderBytes = 48;
inline constexpr size_t kKvTextOffset = kKvHeaderBytes + 4;  // after the u32 text_len
inline constexpr uint8_t kKvFileVersion = 1;

// Ext flag bits (header byte 6).
inline constexpr uint8_t kKvExtToolMap = 0x01;
inline constexpr uint8_t kKvExtResponsesVisibleKey = 0x02;
inline constexpr uint8_t kKvExtThinkingVisibleKey = 0x04;
inline constexpr uint8_t kKvExtSessionTitle = 0x08;
inline constexpr uint8_t kKvExtModelFingerprint = 0x10;
// The bits a caller chooses (what the key is); the others follow the trailers.
inline constexpr uint8_t kKvKeyFlagsMask = kKvExtResponsesVisibleKey | kKvExtThinkingVisibleKey;
inline constexpr uint8_t kKvKnownExtFlags = 0x1f;

inline constexpr size_t kKvMaxToolIdBytes = 256;

using ModelFingerprint = std::array<uint8_t, 32>;
// (call id, exact raw DSML block).
using ToolBlock = std::pair<std::string, std::string>;

struct KvFileHeader {
  uint8_t quant_bits = 4;
  KvSaveReason reason = KvSaveReason::Unknown;
  uint8_t ext_flags = 0;
  uint8_t reserved7 = 0;
  uint32_t tokens = 0;
  uint32_t hits = 0;
  uint32_t ctx = 0;
  std::array<uint8_t, 4> reserved20{};
  uint64_t created = 0;
  uint64_t last_used = 0;
  uint64_t payload_bytes = 0;
};

// Header field offsets, for in-place rewrites.
inline constexpr size_t kKvHitsOffset = 12;
inline constexpr size_t kKvLastUsedOffset = 32;
inline constexpr size_t kKvExtFlagsOffset = 6;

std::array<uint8_t, kKvHeaderBytes> encode_kv_header(const KvFileHeader& header);
// ds4::Error naming the field: bad magic, other version, quant bits not 2 or
// 4, unknown reason, unknown ext flags, token count 0.
KvFileHeader decode_kv_header(std::span<const uint8_t> bytes);

struct KvTrailers {
  std::vector<ToolBlock> tool_blocks;
  std::optional<std::string> title;
  std::optional<ModelFingerprint> fingerprint;

  // The ext bits these trailers set (bit0 only when there are tool blocks).
  uint8_t ext_flags() const;
};

std::vector<uint8_t> encode_kv_trailers(const KvTrailers& trailers);
// Parses exactly `bytes` as the trailers `ext_flags` announces; ds4::Error on
// a bad tag or version, an id length outside 1..256, a cut-short entry or
// bytes left over.
KvTrailers decode_kv_trailers(std::span<const uint8_t> bytes, uint8_t ext_flags);

// The entries of `blocks` whose block occurs in `key_text` (PROTOCOL.md 6.3:
// only those are written), in order, without repeated ids (first one wins),
// empty blocks or ids outside 1..256 bytes.
std::vector<ToolBlock> tool_blocks_in_key(std::string_view key_text, const std::vector<ToolBlock>& blocks);

// SHA-1 of `text` as 40 lowercase hex digits (the file name without ".kv").
std::string sha1_hex(std::string_view text);
// True for names of the form <40 lowercase hex>.kv.
bool is_kv_file_name(std::string_view name);

}  // namespace ds4::runtime
