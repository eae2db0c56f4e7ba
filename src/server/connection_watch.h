// Noticing that the client of a non-streaming request hung up while its
// reply is being generated. cpp-httplib 0.11 (Debian's) gives a handler
// neither the socket nor a "connection closed" query, only the peer's and
// our address; the socket is found among this process's descriptors by
// those addresses (unique while the connection is open, which it is for as
// long as the handler runs) and then watched for the peer's FIN or RST.
#pragma once

#include <optional>
#include <string>

namespace ds4::server {

class ConnectionWatch {
 public:
  // The connection from remote_addr:remote_port to our local_port (as
  // httplib::Request reports them). A watch that found no socket never
  // reports a hang-up.
  ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port);

  // Whether the peer closed its side or the connection failed (a pending
  // request body or pipelined request does not count). Does not block.
  bool peer_gone() const;
  bool found() const { return fd_.has_value(); }

 private:
  std::optional<int> fd_;
};

}  // namespace ds4::server
