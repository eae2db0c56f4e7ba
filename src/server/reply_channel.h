// The hand-over between the engine worker (which runs a request) and the
// HTTP thread that owns the client connection: SSE bytes for streams, the
// final reply or an error for the rest, and the client's cancellation.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_request.h"
#include "server/reply.h"

namespace ds4::server {

class ReplyChannel {
 public:
  // Worker side.
  void write(std::string bytes);
  void set_reply(Reply reply);
  void set_error(RequestError error);
  void close();  // no more output
  void mark_generating() { generating_ = true; }

  // HTTP side: waits until output is there, the channel closes or `timeout`
  // passes; returns the bytes written since the last call.
  std::vector<std::string> wait(std::chrono::milliseconds timeout, bool* closed);
  // Waits for close(); then reply() or error() says how it ended.
  void wait_closed();
  // The same, for at most `timeout`: whether the channel is closed.
  bool wait_closed_for(std::chrono::milliseconds timeout);
  const std::optional<Reply>& reply() const { return reply_; }
  const std::optional<RequestError>& error() const { return error_; }

  // The client went away (or the server is stopping): the worker stops.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Prefill is over and tokens are being generated (no keep-alive needed).
  bool generating() const { return generating_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  bool closed_ = false;
  std::optional<Reply> reply_;
  std::optional<RequestError> error_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> generating_{false};
};

}  // namespace ds4::server
