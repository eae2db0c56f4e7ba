#include "dist/curve_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <zmq.h>

#include "core/error.h"

namespace ds4::dist {

namespace {

constexpr char kHeader[] = "ds4-dist-key 1";

std::string os_error() { return std::strerror(errno); }

void check_z85(const std::string& path, const char* which, const std::string& z85) {
  uint8_t raw[32];
  if (z85.size() != 40 || zmq_z85_decode(raw, z85.c_str()) == nullptr)
    throw Error(path + ": the " + std::string(which) + " key is not 40 Z85 characters");
}

}  // namespace

CurveKey generate_curve_key() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw Error(std::string("cannot make a CURVE key pair: ") + zmq_strerror(zmq_errno()) +
                " (libzmq built without CURVE?)");
  return CurveKey{pub, sec};
}

void write_curve_key(const std::string& path, const CurveKey& key) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) throw Error(path + " exists: not overwriting a key (remove it first)");
  const std::string part = path + ".part";
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot write " + part + ": " + os_error());
  const std::string text = std::string(kHeader) + "\npublic " + key.public_z85 + "\nsecret " + key.secret_z85 + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const std::string why = ok ? std::string() : os_error();
  ::close(fd);
  if (!ok || ::rename(part.c_str(), path.c_str()) != 0) {
    const std::string reason = ok ? os_error() : why;
    ::unlink(part.c_str());
    throw Error("cannot write " + path + ": " + reason);
  }
}

CurveKey read_curve_key(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) throw Error("cannot read the key file " + path + ": " + os_error());
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw Error(path + " is readable or writable by group or others (mode " + mode + "): chmod 600 " + path);
  }
  std::ifstream in(path);
  if (!in) throw Error("cannot read the key file " + path + ": " + os_error());
  std::string header, pub_word, pub, sec_word, sec;
  std::getline(in, header);
  if (header != kHeader) throw Error(path + " is not a ds4 key file (made by ds4-worker --gen-key)");
  in >> pub_word >> pub >> sec_word >> sec;
  if (pub_word != "public" || sec_word != "secret")
    throw Error(path + ": expected lines 'public KEY' and 'secret KEY' after the header");
  std::string rest;
  if (in >> rest) throw Error(path + ": unexpected text after the secret key");
  check_z85(path, "public", pub);
  check_z85(path, "secret", sec);
  char derived[41];
  if (zmq_curve_public(derived, sec.c_str()) != 0 || pub != derived)
    throw Error(path + ": the public key does not belong to the secret key (a damaged key file)");
  return CurveKey{pub, sec};
}

}  // namespace ds4::dist
