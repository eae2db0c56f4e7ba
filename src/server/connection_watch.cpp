#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace ds4::server {

namespace {

// The numeric host and port of an address, as httplib formats the peer's.
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool is_connection(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  std::string host;
  int port = -1;
  if (!host_and_port(peer, peer_len, &host, &port) || port != remote_port || host != remote_addr) return false;
  sockaddr_storage self{};
  socklen_t self_len = sizeof self;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) return false;
  return host_and_port(self, self_len, &host, &port) && port == local_port;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dirfd(dir)) continue;
    if (is_connection(fd, remote_addr, remote_port, local_port)) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
}

bool ConnectionWatch::peer_gone() const {
  if (!fd_) return false;
  pollfd p{*fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace ds4::server
