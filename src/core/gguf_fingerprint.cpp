#include "core/gguf_fingerprint.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_split.h"
#include "core/sha256.h"

namespace ds4::gguf {

namespace {

void hash_samples(const File& f, Sha256& h) {
  for (const TensorInfo& t : f.tensors()) {
    const std::span<const uint8_t> data = t.bytes();
    if (data.size() <= 2 * kFingerprintSampleBytes) {
      h.update(data);
    } else {
      h.update(data.first(kFingerprintSampleBytes));
      h.update(data.last(kFingerprintSampleBytes));
    }
  }
}

Fingerprint recorded(const File& f) {
  std::string missing;
  for (const std::string& p : f.missing_shards()) missing += (missing.empty() ? "" : ", ") + p;
  const std::optional<std::string> hex = f.find_string(kSplitFingerprintKey);
  if (!hex) {
    throw Error(f.path() + ": shards of this set are not here (" + missing + ") and it records no model fingerprint (" +
                std::string(kSplitFingerprintKey) + ", which ds4-gguf split --split-layers writes): every shard is needed");
  }
  Fingerprint fp{};
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  bool ok = hex->size() == 2 * fp.size();
  for (size_t i = 0; ok && i < fp.size(); ++i) {
    const int hi = nibble((*hex)[2 * i]), lo = nibble((*hex)[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    fp[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  if (!ok) throw Error(f.path() + ": metadata key " + std::string(kSplitFingerprintKey) + " is not 64 lowercase hex digits");
  return fp;
}

}  // namespace

Fingerprint merged_fingerprint(const File& f) {
  Sha256 h;
  h.update(merged_writer(f).directory());
  hash_samples(f, h);
  return h.finish();
}

Fingerprint content_fingerprint(const File& f) {
  if (!f.missing_shards().empty()) return recorded(f);
  if (f.is_split()) return merged_fingerprint(f);
  // A file without tensors may end before its aligned data offset.
  const std::span<const uint8_t> bytes = f.bytes();
  Sha256 h;
  h.update(bytes.first(static_cast<size_t>(std::min<uint64_t>(f.data_offset(), bytes.size()))));
  hash_samples(f, h);
  return h.finish();
}

std::string fingerprint_hex(const Fingerprint& fp) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : fp) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

}  // namespace ds4::gguf
