// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface: one call for a whole
// buffer, or a hasher fed piece by piece for data that is not contiguous.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace ds4 {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  // ds4::Error when OpenSSL cannot set up the digest.
  Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  ~Sha256();

  void update(std::span<const uint8_t> bytes);
  // The digest of everything fed so far; the hasher then starts over empty.
  Sha256Digest finish();

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX, kept opaque so users need no OpenSSL headers
};

Sha256Digest sha256(std::span<const uint8_t> bytes);

}  // namespace ds4
