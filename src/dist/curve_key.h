// The cluster key of a distributed run (docs/distributed.md "Keys"): one
// CURVE key pair (Curve25519, Z85 text) in a file every member holds. The
// coordinator serves with it and admits only peers that prove they hold the
// same pair (its ZAP handler compares their public key); a worker connects
// with it and checks the coordinator's public key against it. Whoever lacks
// the file can neither join nor read the traffic.
//
// File format, mode 0600, three lines:
//   ds4-dist-key 1
//   public <40 Z85 characters>
//   secret <40 Z85 characters>
#pragma once

#include <string>

namespace ds4::dist {

struct CurveKey {
  std::string public_z85;  // 40 characters
  std::string secret_z85;  // 40 characters
};

// A new random key pair (libsodium through libzmq).
CurveKey generate_curve_key();

// Writes `key` to `path` (a new file, mode 0600, written to PATH.part then
// renamed). ds4::Error when the file exists or cannot be written.
void write_curve_key(const std::string& path, const CurveKey& key);

// ds4::Error naming the file and the problem: missing, readable by group or
// others, not a key file, a key that is not Z85 or whose public half does
// not belong to its secret half.
CurveKey read_curve_key(const std::string& path);

}  // namespace ds4::dist
