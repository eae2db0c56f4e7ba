#include "runtime/kv_disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <system_error>
#include <utility>

#include "backend/backend.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "model/deepseek4_fingerprint.h"
#include "model/deepseek4_model.h"

namespace ds4::runtime {

namespace fs = std::filesystem;

namespace {

// The DSV4 payload header: 13 u32 (PROTOCOL.md 6.4); the fields read here.
constexpr size_t kPayloadHeaderBytes = 13 * 4;
constexpr size_t kPayloadMagic = 0, kPayloadVersion = 1, kPayloadSavedCtx = 2, kPayloadPrefillChunk = 3,
                 kPayloadTokens = 7;

// Effective hits below this count as none (a long-unused file scores like a new one).
constexpr double kMinEffectiveHits = 0.01;

uint32_t le_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

std::string errno_text() { return std::strerror(errno); }

// A file descriptor closed on scope exit; I/O helpers throw ds4::Error with the path.
class File {
 public:
  File(const std::string& path, int flags, mode_t mode = 0644) : path_(path), fd_(::open(path.c_str(), flags, mode)) {
    if (fd_ < 0) throw Error("cannot open " + path + ": " + errno_text());
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  void read_at(void* dst, size_t n, uint64_t offset) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw Error("cannot read " + path_ + ": " + errno_text());
      if (got == 0) throw Error(path_ + " is cut short");
      p += got;
      n -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }
  std::vector<uint8_t> read_bytes(size_t n, uint64_t offset) const {
    std::vector<uint8_t> v(n);
    read_at(v.data(), n, offset);
    return v;
  }
  void write_at(const void* src, size_t n, uint64_t offset) const {
    const auto* p = static_cast<const uint8_t*>(src);
    while (n > 0) {
      const ssize_t put = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) throw Error("cannot write " + path_ + ": " + errno_text());
      p += put;
      n -= static_cast<size_t>(put);
      offset += static_cast<uint64_t>(put);
    }
  }
  void truncate(uint64_t size) const {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) throw Error("cannot resize " + path_ + ": " + errno_text());
  }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error("cannot write " + path_ + ": " + errno_text());
  }

 private:
  std::string path_;
  int fd_;
};

void put_le(std::array<uint8_t, 8>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

uint8_t routed_expert_quant_bits(const model::Deepseek4Model& model) {
  for (const auto& layer : model.weights().layers) {
    if (!layer.ffn_gate_exps.present()) continue;
    const GgmlType t = layer.ffn_gate_exps.type;
    return (t == GgmlType::IQ2_XXS || t == GgmlType::Q2_K) ? 2 : 4;
  }
  return 4;
}

}  // namespace

// --- configuration and save policy ---

void KvCacheConfig::validate() const {
  if (dir.empty()) throw Error("--kv-disk-dir: the folder name is empty");
  if (space_bytes == 0) throw Error("--kv-disk-space-mb must be at least 1");
  if (min_tokens < 1) throw Error("--kv-cache-min-tokens must be at least 1, got " + std::to_string(min_tokens));
  if (cold_max_tokens != 0 && cold_max_tokens < min_tokens)
    throw Error("--kv-cache-cold-max-tokens must be 0 or >= --kv-cache-min-tokens (" + std::to_string(min_tokens) +
                "), got " + std::to_string(cold_max_tokens));
  if (continued_interval_tokens < 0)
    throw Error("--kv-cache-continued-interval-tokens must be >= 0, got " + std::to_string(continued_interval_tokens));
  if (boundary_trim_tokens < 0)
    throw Error("--kv-cache-boundary-trim-tokens must be >= 0, got " + std::to_string(boundary_trim_tokens));
  if (boundary_align_tokens < 0)
    throw Error("--kv-cache-boundary-align-tokens must be >= 0, got " + std::to_string(boundary_align_tokens));
}

int64_t shared_head_length(std::span<const int32_t> prompt, int32_t user_token, int32_t assistant_token) {
  int64_t last_user = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] == assistant_token) break;
    if (prompt[i] == user_token) last_user = static_cast<int64_t>(i);
  }
  return last_user;
}

int64_t cold_save_length(std::span<const int32_t> prompt, int32_t user_token, int32_t assistant_token,
                         const KvCacheConfig& cfg) {
  const auto n = static_cast<int64_t>(prompt.size());
  if (cfg.cold_max_tokens <= 0 || n < cfg.min_tokens || n > cfg.cold_max_tokens) return 0;
  const int64_t head = shared_head_length(prompt, user_token, assistant_token);
  if (head >= cfg.min_tokens) return head;
  if (n > cfg.min_tokens + cfg.boundary_trim_tokens) {
    int64_t stable = n - cfg.boundary_trim_tokens;
    if (cfg.boundary_align_tokens > 0) stable -= stable % cfg.boundary_align_tokens;
    if (stable >= cfg.min_tokens) return stable;
  }
  return n;
}

int64_t continued_step(const KvCacheConfig& cfg) {
  if (cfg.continued_interval_tokens <= 0) return 0;
  const int64_t align = cfg.boundary_align_tokens;
  if (align <= 0) return cfg.continued_interval_tokens;
  return (cfg.continued_interval_tokens + align - 1) / align * align;
}

bool should_save_continued(int64_t pos, int64_t last_frontier, const KvCacheConfig& cfg) {
  const int64_t step = continued_step(cfg);
  return step > 0 && pos >= cfg.min_tokens && pos % step == 0 && pos > last_frontier;
}

double kv_eviction_score(uint32_t hits, uint64_t last_used, uint64_t created, uint32_t tokens, uint64_t file_size,
                         uint64_t now) {
  if (file_size == 0) return 0.0;
  double effective = hits;
  const uint64_t used_at = last_used != 0 ? last_used : created;
  if (used_at == 0) {
    effective = 0.0;
  } else if (now > used_at) {
    effective *= std::exp2(-static_cast<double>(now - used_at) / static_cast<double>(kKvHitHalfLifeSeconds));
    if (effective < kMinEffectiveHits) effective = 0.0;
  }
  return (effective + 1.0) * static_cast<double>(tokens) / static_cast<double>(file_size);
}

// --- the folder ---

struct KvDiskCache::Entry {
  std::string name;  // <sha>.kv
  std::string path;
  KvFileHeader header;
  uint32_t text_len = 0;
  uint64_t file_size = 0;
  uint64_t trailer_offset = 0;
  KvTrailers trailers;
  bool usable = false;  // loadable by this server (context, prefill chunk, payload version)

  std::string sha() const { return name.substr(0, 40); }
  uint64_t payload_offset() const { return kKvTextOffset + text_len; }
};

KvDiskCache::KvDiskCache(KvCacheConfig cfg, const backend::Backend& backend, int64_t n_ctx, Warn warn)
    : cfg_(std::move(cfg)),
      backend_(&backend),
      n_ctx_(n_ctx),
      prefill_chunk_(backend.prefill_chunk()),
      quant_bits_(routed_expert_quant_bits(backend.model())),
      fingerprint_(model::fingerprint(backend.model())),
      warn_(std::move(warn)),
      now_([] { return static_cast<uint64_t>(std::time(nullptr)); }) {
  cfg_.validate();
  std::error_code ec;
  fs::create_directories(cfg_.dir, ec);
  if (ec || !fs::is_directory(cfg_.dir))
    throw Error("--kv-disk-dir: cannot create the folder " + cfg_.dir + (ec ? ": " + ec.message() : ""));
}

void KvDiskCache::warn_once(const std::string& key, const std::string& message) {
  if (warned_.insert(key).second && warn_) warn_(message);
}

void KvDiskCache::remove_file(const std::string& path, const std::string& why) {
  std::error_code ec;
  fs::remove(path, ec);
  if (warn_) warn_("kv cache: " + why + (ec ? "; removing " + path + " failed: " + ec.message() : "; removed " + path));
}

std::optional<KvDiskCache::Entry> KvDiskCache::inspect(const std::string& name, bool warn_problems) {
  Entry e;
  e.name = name;
  e.path = (fs::path(cfg_.dir) / name).string();
  struct stat st {};
  if (::stat(e.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  e.file_size = static_cast<uint64_t>(st.st_size);
  const std::string version_key =
      name + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
      std::to_string(st.st_mtim.tv_nsec);
  auto skip = [&](const std::string& why) -> std::optional<Entry> {
    if (warn_problems) warn_once(version_key, "kv cache: skipping " + e.path + ": " + why);
    return std::nullopt;
  };
  std::vector<uint8_t> ph;  // the payload header
  try {
    File f(e.path, O_RDONLY);
    if (e.file_size < kKvTextOffset) return skip("cut short (" + std::to_string(e.file_size) + " bytes)");
    const auto head = f.read_bytes(kKvTextOffset, 0);
    e.header = decode_kv_header(head);
    e.text_len = le_u32(&head[kKvHeaderBytes]);
    const uint64_t need = kKvTextOffset + uint64_t{e.text_len} + e.header.payload_bytes;
    if (e.header.payload_bytes > e.file_size || e.file_size < need)
      return skip("truncated: " + std::to_string(e.file_size) + " bytes, the header describes at least " +
                  std::to_string(need));
    e.trailer_offset = need;
    e.trailers = decode_kv_trailers(f.read_bytes(e.file_size - need, need), e.header.ext_flags);
    if (!e.trailers.fingerprint) return skip("no model fingerprint (another model's or a ds4 file)");
    if (*e.trailers.fingerprint != fingerprint_) return skip("made with another model (fingerprint differs)");
    if (e.header.payload_bytes < kPayloadHeaderBytes) return skip("payload too short for its header");
    ph = f.read_bytes(kPayloadHeaderBytes, e.payload_offset());
  } catch (const Error& err) {
    return skip(err.what());
  }
  const auto field = [&](size_t i) { return le_u32(&ph[4 * i]); };
  if (field(kPayloadMagic) != backend::kDsv4PayloadMagic) return skip("payload magic is not DSV4");
  if (field(kPayloadTokens) != e.header.tokens)
    return skip("payload holds " + std::to_string(field(kPayloadTokens)) + " tokens, the header says " +
                std::to_string(e.header.tokens));

  // This model's file (counted in the budget); whether this server can load it is a separate question.
  std::string unusable;
  if (field(kPayloadVersion) != backend::kDsv4PayloadVersion)
    unusable = "payload version " + std::to_string(field(kPayloadVersion)) + ", this build reads " +
               std::to_string(backend::kDsv4PayloadVersion);
  else if (e.header.ctx > n_ctx_ || field(kPayloadSavedCtx) > n_ctx_)
    unusable = "saved for context " + std::to_string(std::max(e.header.ctx, field(kPayloadSavedCtx))) +
               ", larger than the current " + std::to_string(n_ctx_);
  else if (static_cast<int64_t>(field(kPayloadPrefillChunk)) != prefill_chunk_)
    unusable = "prefill chunk " + std::to_string(field(kPayloadPrefillChunk)) + " differs from the current " +
               std::to_string(prefill_chunk_);
  e.usable = unusable.empty();
  if (!e.usable && warn_problems) warn_once(version_key, "kv cache: skipping " + e.path + ": " + unusable);
  return e;
}

std::vector<KvDiskCache::Entry> KvDiskCache::scan() {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(cfg_.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_kv_file_name(name)) names.push_back(name);
  }
  if (ec && warn_) warn_("kv cache: cannot list " + cfg_.dir + ": " + ec.message());
  std::sort(names.begin(), names.end());
  std::vector<Entry> entries;
  for (const auto& name : names)
    if (auto e = inspect(name, true)) entries.push_back(std::move(*e));
  return entries;
}

bool KvDiskCache::rewrite_tool_map(const Entry& existing, const std::vector<ToolBlock>& blocks) {
  KvTrailers t;
  t.tool_blocks = blocks;
  std::set<std::string> ids;
  for (const auto& b : blocks) ids.insert(b.first);
  for (const auto& b : existing.trailers.tool_blocks)
    if (ids.insert(b.first).second) t.tool_blocks.push_back(b);
  t.title = existing.trailers.title;
  t.fingerprint = fingerprint_;
  const auto bytes = encode_kv_trailers(t);
  const uint8_t flags = static_cast<uint8_t>((existing.header.ext_flags & kKvKeyFlagsMask) | t.ext_flags());
  File f(existing.path, O_RDWR);
  f.write_at(bytes.data(), bytes.size(), existing.trailer_offset);
  f.truncate(existing.trailer_offset + bytes.size());
  f.write_at(&flags, 1, kKvExtFlagsOffset);
  f.close();
  return true;
}

bool KvDiskCache::enforce_budget(const std::string& protected_name) {
  auto entries = scan();
  uint64_t total = 0;
  bool protect = false;
  for (const auto& e : entries) {
    total += e.file_size;
    if (e.name == protected_name) protect = e.file_size <= cfg_.space_bytes;
  }
  const uint64_t now = now_();
  bool protected_kept = true;
  while (total > cfg_.space_bytes && !entries.empty()) {
    size_t victim = 0;
    double victim_score = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      const double score = (protect && e.name == protected_name)
                               ? std::numeric_limits<double>::infinity()
                               : kv_eviction_score(e.header.hits, e.header.last_used, e.header.created,
                                                   e.header.tokens, e.file_size, now);
      if (i == 0 || score < victim_score ||
          (score == victim_score && e.header.last_used < entries[victim].header.last_used)) {
        victim = i;
        victim_score = score;
      }
    }
    const Entry& v = entries[victim];
    if (v.name == protected_name) {
      protected_kept = false;
      remove_file(v.path, "new checkpoint of " + std::to_string(v.file_size) + " bytes alone exceeds the budget of " +
                              std::to_string(cfg_.space_bytes) + " bytes");
    } else {
      std::error_code ec;
      fs::remove(v.path, ec);
      if (ec && warn_) warn_("kv cache: cannot evict " + v.path + ": " + ec.message());
    }
    total -= std::min(total, v.file_size);
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(victim));
  }
  return protected_kept;
}

std::string KvDiskCache::store(std::string_view key_text, const backend::Session& session, KvSaveReason reason,
                               uint8_t key_flags, const std::vector<ToolBlock>& tool_blocks) {
  if (key_flags & ~kKvKeyFlagsMask)
    throw Error("kv cache: key flags " + std::to_string(key_flags) + " hold bits other than the visible-key bits");
  std::lock_guard lock(mu_);
  const std::string name = sha1_hex(key_text) + ".kv";
  const std::string path = (fs::path(cfg_.dir) / name).string();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    if (session.size() == 0) {
      if (warn_) warn_("kv cache: not saving an empty session as " + path);
      return "";
    }
    if (key_text.size() > std::numeric_limits<uint32_t>::max()) {
      if (warn_) warn_("kv cache: not saving " + path + ": the key text exceeds 4 GiB");
      return "";
    }
    const auto blocks = tool_blocks_in_key(key_text, tool_blocks);

    // Same key already on disk: keep a usable one and only refresh its tool map.
    if (auto existing = inspect(name, false)) {
      bool same = existing->usable && existing->header.quant_bits == quant_bits_ &&
                  existing->text_len == key_text.size();
      if (same) {
        File f(existing->path, O_RDONLY);
        const auto text = f.read_bytes(existing->text_len, kKvTextOffset);
        same = std::equal(text.begin(), text.end(), key_text.begin(), key_text.end(),
                          [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); });
      }
      if (same) {
        rewrite_tool_map(*existing, blocks);
        return enforce_budget(name) ? path : "";
      }
    }

    const auto payload = backend_->save_state(session);
    KvTrailers trailers;
    trailers.tool_blocks = blocks;
    trailers.fingerprint = fingerprint_;
    const auto trailer_bytes = encode_kv_trailers(trailers);
    const uint64_t now = now_();
    KvFileHeader h;
    h.quant_bits = quant_bits_;
    h.reason = reason;
    h.ext_flags = static_cast<uint8_t>(key_flags | trailers.ext_flags());
    h.tokens = static_cast<uint32_t>(session.size());
    h.ctx = static_cast<uint32_t>(session.n_ctx());
    h.created = now;
    h.last_used = now;
    h.payload_bytes = payload.size();

    const uint64_t file_bytes = kKvTextOffset + key_text.size() + payload.size() + trailer_bytes.size();
    const uint64_t slack = (file_bytes + 99) / 100;
    if (file_bytes + slack > cfg_.space_bytes) {
      if (warn_)
        warn_("kv cache: not saving " + path + ": " + std::to_string(file_bytes) + " bytes (+1% slack) exceed the " +
              std::to_string(cfg_.space_bytes) + "-byte budget");
      return "";
    }

    try {
      File f(tmp, O_WRONLY | O_CREAT | O_TRUNC);
      const auto header = encode_kv_header(h);
      std::array<uint8_t, 8> len{};
      put_le(len, key_text.size());
      uint64_t off = 0;
      f.write_at(header.data(), header.size(), off);
      off += header.size();
      f.write_at(len.data(), 4, off);
      off += 4;
      f.write_at(key_text.data(), key_text.size(), off);
      off += key_text.size();
      f.write_at(payload.data(), payload.size(), off);
      off += payload.size();
      f.write_at(trailer_bytes.data(), trailer_bytes.size(), off);
      f.close();
      if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename " + tmp + ": " + errno_text());
    } catch (...) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw;
    }
    return enforce_budget(name) ? path : "";
  } catch (const Error& e) {
    if (warn_) warn_("kv cache: saving " + path + " failed: " + e.what());
    return "";
  } catch (const std::exception& e) {
    if (warn_) warn_("kv cache: saving " + path + " failed: " + e.what());
    return "";
  }
}

std::optional<KvDiskCache::Hit> KvDiskCache::load_longest_prefix(std::string_view prompt_text,
                                                                 backend::Session& session) {
  if (!backend_->owns(session)) throw Error("kv cache: the session belongs to another backend or model");
  std::lock_guard lock(mu_);
  std::vector<Entry> candidates;
  for (auto& e : scan()) {
    if (!e.usable || e.text_len > prompt_text.size()) continue;
    if (static_cast<int64_t>(e.header.tokens) < cfg_.min_tokens) continue;
    if (e.header.ctx > session.n_ctx()) continue;
    if (cfg_.reject_different_quant && e.header.quant_bits != quant_bits_) continue;
    candidates.push_back(std::move(e));
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Entry& a, const Entry& b) {
    return a.text_len != b.text_len ? a.text_len > b.text_len : a.header.tokens > b.header.tokens;
  });
  std::map<size_t, std::string> prefix_sha;  // each distinct length hashed once
  for (const Entry& e : candidates) {
    auto [it, fresh] = prefix_sha.try_emplace(e.text_len);
    if (fresh) it->second = sha1_hex(prompt_text.substr(0, e.text_len));
    if (it->second != e.sha()) continue;
    try {
      File f(e.path, O_RDONLY);
      const auto text = f.read_bytes(e.text_len, kKvTextOffset);
      if (!std::equal(text.begin(), text.end(), prompt_text.begin(),
                      [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); })) {
        remove_file(e.path, "key text does not match its SHA-1 name");
        continue;
      }
      const auto payload = f.read_bytes(static_cast<size_t>(e.header.payload_bytes), e.payload_offset());
      try {
        backend_->load_state(payload, session);
      } catch (const Error& err) {
        remove_file(e.path, std::string("damaged payload (") + err.what() + ")");
        continue;
      }
    } catch (const Error& err) {
      remove_file(e.path, std::string("unreadable (") + err.what() + ")");
      continue;
    }
    Hit hit;
    hit.path = e.path;
    hit.text_len = e.text_len;
    hit.tokens = e.header.tokens;
    hit.reason = e.header.reason;
    hit.key_flags = e.header.ext_flags & kKvKeyFlagsMask;
    hit.tool_blocks = e.trailers.tool_blocks;
    hit.consumed = cfg_.cold_max_tokens > 0 && static_cast<int64_t>(e.header.tokens) > cfg_.cold_max_tokens;
    try {
      if (hit.consumed) {
        std::error_code ec;
        fs::remove(e.path, ec);
        if (ec) throw Error("cannot remove consumed " + e.path + ": " + ec.message());
      } else {
        File f(e.path, O_RDWR);
        std::array<uint8_t, 8> b{};
        put_le(b, e.header.hits + 1u);
        f.write_at(b.data(), 4, kKvHitsOffset);
        put_le(b, now_());
        f.write_at(b.data(), 8, kKvLastUsedOffset);
        f.close();
      }
    } catch (const Error& err) {
      if (warn_) warn_(std::string("kv cache: ") + err.what());
    }
    return hit;
  }
  return std::nullopt;
}

std::vector<ToolBlock> KvDiskCache::find_tool_blocks(const std::set<std::string>& ids) {
  if (ids.empty()) return {};
  std::lock_guard lock(mu_);
  auto entries = scan();
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.header.last_used > b.header.last_used; });
  std::vector<ToolBlock> found;
  std::set<std::string> seen;
  for (const auto& e : entries)
    for (const auto& b : e.trailers.tool_blocks)
      if (ids.count(b.first) && seen.insert(b.first).second) found.push_back(b);
  return found;
}

KvDiskCache::Stats KvDiskCache::stats() {
  std::lock_guard lock(mu_);
  Stats s;
  for (const auto& e : scan()) {
    ++s.files;
    s.bytes += e.file_size;
  }
  return s;
}

}  // namespace ds4::runtime
