#include "core/sha256.h"

#include <openssl/evp.h>

#include <utility>

#include "core/error.h"

namespace ds4 {
namespace {

EVP_MD_CTX* md(void* ctx) { return static_cast<EVP_MD_CTX*>(ctx); }

void init(void* ctx) {
  if (EVP_DigestInit_ex(md(ctx), EVP_sha256(), nullptr) != 1) throw Error("sha256: cannot initialise the digest");
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) throw Error("sha256: cannot allocate a digest context");
  try {
    init(ctx_);
  } catch (...) {
    EVP_MD_CTX_free(md(ctx_));
    throw;
  }
}

Sha256::Sha256(Sha256&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(md(ctx_));
    ctx_ = std::exchange(other.ctx_, nullptr);
  }
  return *this;
}

Sha256::~Sha256() { EVP_MD_CTX_free(md(ctx_)); }

void Sha256::update(std::span<const uint8_t> bytes) {
  if (ctx_ == nullptr) throw Error("sha256: hasher used after a move");
  // EVP_DigestUpdate with a null pointer and length 0 is allowed, but an
  // empty span may carry any pointer; skip it.
  if (bytes.empty()) return;
  if (EVP_DigestUpdate(md(ctx_), bytes.data(), bytes.size()) != 1) throw Error("sha256: digest update failed");
}

Sha256Digest Sha256::finish() {
  if (ctx_ == nullptr) throw Error("sha256: hasher used after a move");
  Sha256Digest out{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(md(ctx_), out.data(), &n) != 1 || n != out.size()) throw Error("sha256: digest final failed");
  init(ctx_);
  return out;
}

Sha256Digest sha256(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

}  // namespace ds4
