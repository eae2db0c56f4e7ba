#include "server/reply_channel.h"

namespace ds4::server {

void ReplyChannel::write(std::string bytes) {
  if (bytes.empty()) return;
  {
    std::lock_guard lock(mutex_);
    chunks_.push_back(std::move(bytes));
  }
  cv_.notify_all();
}

void ReplyChannel::set_reply(Reply reply) {
  std::lock_guard lock(mutex_);
  reply_ = std::move(reply);
}

void ReplyChannel::set_error(RequestError error) {
  std::lock_guard lock(mutex_);
  error_ = std::move(error);
}

void ReplyChannel::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  cv_.notify_all();
}

std::vector<std::string> ReplyChannel::wait(std::chrono::milliseconds timeout, bool* closed) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [this] { return closed_ || !chunks_.empty(); });
  std::vector<std::string> out(std::make_move_iterator(chunks_.begin()), std::make_move_iterator(chunks_.end()));
  chunks_.clear();
  *closed = closed_;
  return out;
}

void ReplyChannel::wait_closed() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return closed_; });
}

bool ReplyChannel::wait_closed_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, timeout, [this] { return closed_; });
}

}  // namespace ds4::server
