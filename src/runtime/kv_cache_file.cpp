#include "runtime/kv_cache_file.h"

#include <openssl/evp.h>

#include <cstring>
#include <set>

#include "core/error.h"

namespace ds4::runtime {

namespace {

constexpr char kMagic[3] = {'K', 'V', 'C'};
constexpr char kToolMapTag[3] = {'K', 'T', 'M'};
constexpr char kFingerprintTag[3] = {'M', 'F', 'P'};
constexpr uint8_t kToolMapVersion = 1;
constexpr uint8_t kFingerprintVersion = 1;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void append_u32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  put_u32(b, v);
  out.insert(out.end(), b, b + 4);
}
void append_bytes(std::vector<uint8_t>& out, std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }

// Sequential reads over the trailer bytes; every shortfall names what was cut.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  std::span<const uint8_t> take(size_t n, const char* what) {
    if (b_.size() - pos_ < n) throw Error(std::string("trailer cut short in ") + what);
    auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  uint32_t u32(const char* what) { return get_u32(take(4, what).data()); }
  std::string str(size_t n, const char* what) {
    auto s = take(n, what);
    return std::string(reinterpret_cast<const char*>(s.data()), s.size());
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

void expect_tag(Reader& r, const char (&tag)[3], uint8_t version, const char* what) {
  auto t = r.take(4, what);
  if (std::memcmp(t.data(), tag, 3) != 0) throw Error(std::string(what) + " trailer tag is wrong");
  if (t[3] != version)
    throw Error(std::string(what) + " trailer version is " + std::to_string(t[3]) + ", expected " +
                std::to_string(version));
}

}  // namespace

std::string_view kv_save_reason_name(KvSaveReason reason) {
  switch (reason) {
    case KvSaveReason::Unknown: return "unknown";
    case KvSaveReason::Cold: return "cold";
    case KvSaveReason::Continued: return "continued";
    case KvSaveReason::Evict: return "evict";
    case KvSaveReason::Shutdown: return "shutdown";
    case KvSaveReason::AgentSystem: return "agent-system";
    case KvSaveReason::AgentSession: return "agent-session";
  }
  return "unknown";
}

std::array<uint8_t, kKvHeaderBytes> encode_kv_header(const KvFileHeader& h) {
  std::array<uint8_t, kKvHeaderBytes> b{};
  std::memcpy(b.data(), kMagic, 3);
  b[3] = kKvFileVersion;
  b[4] = h.quant_bits;
  b[5] = static_cast<uint8_t>(h.reason);
  b[6] = h.ext_flags;
  b[7] = h.reserved7;
  put_u32(&b[8], h.tokens);
  put_u32(&b[12], h.hits);
  put_u32(&b[16], h.ctx);
  std::memcpy(&b[20], h.reserved20.data(), 4);
  put_u64(&b[24], h.created);
  put_u64(&b[32], h.last_used);
  put_u64(&b[40], h.payload_bytes);
  return b;
}

KvFileHeader decode_kv_header(std::span<const uint8_t> b) {
  if (b.size() < kKvHeaderBytes) throw Error("header cut short (" + std::to_string(b.size()) + " bytes)");
  if (std::memcmp(b.data(), kMagic, 3) != 0) throw Error("bad magic (not a KVC file)");
  if (b[3] != kKvFileVersion)
    throw Error("version is " + std::to_string(b[3]) + ", this build reads " + std::to_string(kKvFileVersion));
  KvFileHeader h;
  h.quant_bits = b[4];
  if (h.quant_bits != 2 && h.quant_bits != 4)
    throw Error("routed-expert quant bits are " + std::to_string(h.quant_bits) + ", expected 2 or 4");
  if (b[5] > static_cast<uint8_t>(KvSaveReason::AgentSession))
    throw Error("save reason " + std::to_string(b[5]) + " is unknown");
  h.reason = static_cast<KvSaveReason>(b[5]);
  h.ext_flags = b[6];
  if (h.ext_flags & ~kKvKnownExtFlags) throw Error("ext flags " + std::to_string(h.ext_flags) + " hold unknown bits");
  h.reserved7 = b[7];
  h.tokens = get_u32(&b[8]);
  if (h.tokens == 0) throw Error("token count is 0");
  h.hits = get_u32(&b[12]);
  h.ctx = get_u32(&b[16]);
  std::memcpy(h.reserved20.data(), &b[20], 4);
  h.created = get_u64(&b[24]);
  h.last_used = get_u64(&b[32]);
  h.payload_bytes = get_u64(&b[40]);
  return h;
}

uint8_t KvTrailers::ext_flags() const {
  uint8_t f = 0;
  if (!tool_blocks.empty()) f |= kKvExtToolMap;
  if (title) f |= kKvExtSessionTitle;
  if (fingerprint) f |= kKvExtModelFingerprint;
  return f;
}

std::vector<uint8_t> encode_kv_trailers(const KvTrailers& t) {
  std::vector<uint8_t> out;
  if (!t.tool_blocks.empty()) {
    append_bytes(out, std::string_view(kToolMapTag, 3));
    out.push_back(kToolMapVersion);
    append_u32(out, static_cast<uint32_t>(t.tool_blocks.size()));
    for (const auto& [id, block] : t.tool_blocks) {
      append_u32(out, static_cast<uint32_t>(id.size()));
      append_u32(out, static_cast<uint32_t>(block.size()));
      append_bytes(out, id);
      append_bytes(out, block);
    }
  }
  if (t.title) {
    append_u32(out, static_cast<uint32_t>(t.title->size()));
    append_bytes(out, *t.title);
  }
  if (t.fingerprint) {
    append_bytes(out, std::string_view(kFingerprintTag, 3));
    out.push_back(kFingerprintVersion);
    out.insert(out.end(), t.fingerprint->begin(), t.fingerprint->end());
  }
  return out;
}

KvTrailers decode_kv_trailers(std::span<const uint8_t> bytes, uint8_t ext_flags) {
  Reader r(bytes);
  KvTrailers t;
  if (ext_flags & kKvExtToolMap) {
    expect_tag(r, kToolMapTag, kToolMapVersion, "KTM");
    const uint32_t count = r.u32("KTM count");
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t id_len = r.u32("KTM entry");
      const uint32_t dsml_len = r.u32("KTM entry");
      if (id_len < 1 || id_len > kKvMaxToolIdBytes)
        throw Error("KTM id length " + std::to_string(id_len) + " is outside 1.." + std::to_string(kKvMaxToolIdBytes));
      std::string id = r.str(id_len, "KTM id");
      std::string block = r.str(dsml_len, "KTM block");
      t.tool_blocks.emplace_back(std::move(id), std::move(block));
    }
  }
  if (ext_flags & kKvExtSessionTitle) t.title = r.str(r.u32("title length"), "title");
  if (ext_flags & kKvExtModelFingerprint) {
    expect_tag(r, kFingerprintTag, kFingerprintVersion, "MFP");
    auto fp = r.take(32, "model fingerprint");
    t.fingerprint.emplace();
    std::memcpy(t.fingerprint->data(), fp.data(), 32);
  }
  if (r.left() != 0) throw Error(std::to_string(r.left()) + " bytes after the trailers");
  return t;
}

std::vector<ToolBlock> tool_blocks_in_key(std::string_view key_text, const std::vector<ToolBlock>& blocks) {
  std::vector<ToolBlock> out;
  std::set<std::string_view> ids;
  for (const auto& entry : blocks) {
    const auto& [id, block] = entry;
    if (id.empty() || id.size() > kKvMaxToolIdBytes || block.empty()) continue;
    if (key_text.find(block) == std::string_view::npos) continue;
    if (!ids.insert(id).second) continue;
    out.push_back(entry);
  }
  return out;
}

std::string sha1_hex(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest(text.data(), text.size(), md, &md_len, EVP_sha1(), nullptr) != 1 || md_len != 20)
    throw Error("SHA-1 failed in OpenSSL");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(40, '0');
  for (unsigned i = 0; i < 20; ++i) {
    hex[2 * i] = kHex[md[i] >> 4];
    hex[2 * i + 1] = kHex[md[i] & 15];
  }
  return hex;
}

bool is_kv_file_name(std::string_view name) {
  if (name.size() != 43 || name.substr(40) != ".kv") return false;
  for (char c : name.substr(0, 40))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace ds4::runtime
