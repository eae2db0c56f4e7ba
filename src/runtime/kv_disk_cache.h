// The disk KV cache of ds4-server (PROTOCOL.md 6.3, 6.5, 6.6, 3.7): a folder
// of `<sha1(key text)>.kv` files (runtime/kv_cache_file.h), each a session
// checkpoint keyed by the text its tokens decode to. store() writes one and
// keeps the folder inside its byte budget, load_longest_prefix() restores the
// longest checkpoint whose key is a byte prefix of a prompt, and
// find_tool_blocks() reads back the exact DSML blocks remembered for tool
// call ids. The save-policy helpers decide where cold and continued
// checkpoints go.
//
// Files this model cannot use (damaged, cut short, another format version,
// another model, another prefill chunk, a larger context) are skipped with a
// warning naming the file and the reason, once per file version; they are
// never loaded and never counted. A payload found damaged while loading is
// deleted. I/O problems never throw: they are logged and the call reports
// nothing stored / no hit.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/kv_cache_file.h"

namespace ds4::backend {
class Backend;
class Session;
}

namespace ds4::runtime {

struct KvCacheConfig {
  std::string dir;                              // --kv-disk-dir
  uint64_t space_bytes = 4096ull << 20;         // --kv-disk-space-mb
  int64_t min_tokens = 512;                     // --kv-cache-min-tokens
  int64_t cold_max_tokens = 30000;              // --kv-cache-cold-max-tokens (0: no cold saves, no consumption)
  int64_t continued_interval_tokens = 10000;    // --kv-cache-continued-interval-tokens (0: off)
  int64_t boundary_trim_tokens = 32;            // --kv-cache-boundary-trim-tokens
  int64_t boundary_align_tokens = 2048;         // --kv-cache-boundary-align-tokens (0: no alignment)
  bool reject_different_quant = false;          // --kv-cache-reject-different-quant

  // ds4::Error naming the flag: empty dir, space 0, min < 1, cold max neither
  // 0 nor >= min, negative interval, trim or align.
  void validate() const;
};

// --- Save policy (PROTOCOL.md 6.6), pure functions ---

// The tokens a prompt shares with other conversations under the same system
// prompt and tools: up to the last `user_token` before the first
// `assistant_token` (BOS + system + tools); 0 when there is no such token.
int64_t shared_head_length(std::span<const int32_t> prompt, int32_t user_token, int32_t assistant_token);

// Where a cold checkpoint of `prompt` goes, 0 for none: nothing when the
// prompt is shorter than min or longer than cold_max (cold_max 0: cold saves
// off). Otherwise the position of the last `user_token` before the first
// `assistant_token` (BOS + system + tools, shared across sessions) when that
// is >= min; else, when the prompt is longer than min + trim, (length - trim)
// rounded down to a multiple of align if that is >= min; else the whole
// prompt (ds4's ds4_kvstore_store_len falls back to the full length).
int64_t cold_save_length(std::span<const int32_t> prompt, int32_t user_token, int32_t assistant_token,
                         const KvCacheConfig& cfg);

// The continued-checkpoint step: the interval rounded up to a multiple of
// align (10000 -> 10240 with align 2048); 0 when the interval is 0.
int64_t continued_step(const KvCacheConfig& cfg);

// True when a continued checkpoint is due at live position `pos`: a multiple
// of the step, >= min and beyond `last_frontier` (the last stored position).
bool should_save_continued(int64_t pos, int64_t last_frontier, const KvCacheConfig& cfg);

// The budget eviction score (higher is kept longer): (hits * 2^(-age/6h),
// zeroed below 0.01, + 1) * tokens / file_size, with age = now - last_used
// (created when last_used is 0; hits count as 0 when both are 0).
double kv_eviction_score(uint32_t hits, uint64_t last_used, uint64_t created, uint32_t tokens, uint64_t file_size,
                         uint64_t now);

inline constexpr uint64_t kKvHitHalfLifeSeconds = 6 * 60 * 60;

class KvDiskCache {
 public:
  using Warn = std::function<void(const std::string&)>;

  // `model` must outlive the cache; its fingerprint is computed here. n_ctx
  // and prefill_chunk are the server's: files for a larger context or another
  // chunk are not loaded. Creates the folder when missing (ds4::Error when it
  // cannot, or when cfg is invalid).
  KvDiskCache(KvCacheConfig cfg, const backend::Backend& backend, int64_t n_ctx, Warn warn);

  const KvCacheConfig& config() const { return cfg_; }
  // Header byte 4 for this model: 2 for IQ2_XXS / Q2_K routed experts, else 4.
  uint8_t quant_bits() const { return quant_bits_; }

  // Saves `session` under `key_text` (PROTOCOL.md 6.6) and returns the path,
  // or "" when nothing was stored (too large for the budget, I/O failure,
  // empty session; all logged). key_flags: kKvExtResponsesVisibleKey /
  // kKvExtThinkingVisibleKey only (ds4::Error for other bits). Of
  // `tool_blocks`, only blocks occurring in key_text are written. A same-key
  // file this server can use only gets its KTM trailer rewritten (the union
  // of its entries and the new ones; hits and dates kept); any other is
  // replaced. Afterwards the lowest-score files are evicted until the folder
  // fits the budget; the new file is protected unless it alone exceeds it.
  std::string store(std::string_view key_text, const backend::Session& session, KvSaveReason reason, uint8_t key_flags,
                    const std::vector<ToolBlock>& tool_blocks);

  struct Hit {
    std::string path;
    size_t text_len = 0;
    int64_t tokens = 0;
    KvSaveReason reason = KvSaveReason::Unknown;
    uint8_t key_flags = 0;  // kKvExtResponsesVisibleKey / kKvExtThinkingVisibleKey
    bool consumed = false;  // deleted after loading (more tokens than cold_max)
    std::vector<ToolBlock> tool_blocks;
  };

  // PROTOCOL.md 6.5: loads the checkpoint with the longest key that is a byte
  // prefix of `prompt_text` (ties: more tokens) into `session`; the caller
  // appends tokenize(prompt_text.substr(hit.text_len)). On a hit the file's
  // hits and last_used are updated in place, or the file is deleted when it
  // holds more than cold_max tokens. nullopt, session unchanged, on a miss.
  std::optional<Hit> load_longest_prefix(std::string_view prompt_text, backend::Session& session);

  // The KTM entries of every usable file whose id is in `ids` (PROTOCOL.md
  // 3.7: exact replay across restarts); the most recently used file wins when
  // two hold the same id.
  std::vector<ToolBlock> find_tool_blocks(const std::set<std::string>& ids);

  struct Stats {
    size_t files = 0;
    uint64_t bytes = 0;
  };
  // This model's files in the folder (the ones the budget counts).
  Stats stats();

  // Unix seconds used for created / last_used / ages; tests fix it.
  void set_clock(std::function<uint64_t()> now) { now_ = std::move(now); }

 private:
  struct Entry;  // one scanned file of this model (kv_disk_cache.cpp)

  std::vector<Entry> scan();
  std::optional<Entry> inspect(const std::string& name, bool warn_problems);
  void warn_once(const std::string& key, const std::string& message);
  bool rewrite_tool_map(const Entry& existing, const std::vector<ToolBlock>& blocks);
  bool enforce_budget(const std::string& protected_name);
  void remove_file(const std::string& path, const std::string& why);

  KvCacheConfig cfg_;
  const backend::Backend* backend_;
  int64_t n_ctx_;
  int prefill_chunk_;
  uint8_t quant_bits_;
  ModelFingerprint fingerprint_;
  Warn warn_;
  std::function<uint64_t()> now_;
  std::set<std::string> warned_;  // "<name> <size> <mtime>" already reported
  std::mutex mu_;
};

}  // namespace ds4::runtime
