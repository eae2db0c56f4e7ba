// The agent's saved conversations (/save, /list, /switch, /del), in a folder
// (--session-dir, default ~/.ds4/kvcache). A session NAME is two files:
//   agent-NAME.session  the KV state, in the session file format
//                       (docs/session-files.md: model fingerprint, checksum)
//   agent-NAME.json     the transcript: messages, how many the KV holds, the
//                       tokens still to evaluate, the build and context size
// Both are written beside and renamed, the KV first. A session made by
// another build or for another model is refused naming why; a damaged one
// is listed as such and never loaded. The names never clash with the disk
// KV cache's `<sha1>.kv` files, so the server can share the folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/conversation.h"

namespace ds4::engine {
class Engine;
}

namespace ds4::agent {

struct SavedSessionInfo {
  std::string name;
  int64_t tokens = 0;
  int64_t n_ctx = 0;
  uint64_t bytes = 0;         // both files
  int64_t saved_at = 0;       // unix seconds
  std::string title;          // the first user message, cut short
  std::string problem;        // non-empty: cannot be loaded, and why
};

class SessionStore {
 public:
  // Creates the folder when missing (ds4::Error naming it when it cannot).
  SessionStore(std::string dir, engine::Engine& engine);

  const std::string& dir() const { return dir_; }

  // ds4::Error for a name other than 1-64 of [A-Za-z0-9._-] not starting
  // with '.'.
  static void check_name(const std::string& name);

  // Saves (or replaces) NAME; ds4::Error naming the file on failure (a full
  // disk leaves the previous save of NAME intact).
  void save(const std::string& name, const Conversation& conversation);
  // Every saved session, most recent first; damaged ones carry a problem.
  std::vector<SavedSessionInfo> list() const;
  // Loads NAME into `conversation` (its KV replaced); ds4::Error naming the
  // problem, the conversation unchanged.
  void load(const std::string& name, Conversation& conversation) const;
  // ds4::Error when there is no such session.
  void remove(const std::string& name);

 private:
  std::string kv_path(const std::string& name) const;
  std::string json_path(const std::string& name) const;
  // The transcript file, checked against this build; ds4::Error naming the problem.
  nlohmann::ordered_json read_transcript(const std::string& name) const;

  std::string dir_;
  engine::Engine& engine_;
};

// The default folder: $HOME/.ds4/kvcache ("" when HOME is unset).
std::string default_session_dir();

}  // namespace ds4::agent
