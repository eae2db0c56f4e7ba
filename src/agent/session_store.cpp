#include "agent/session_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "version/version.h"

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace ds4::agent {

namespace {

constexpr const char* kPrefix = "agent-";
constexpr const char* kKvSuffix = ".session";
constexpr const char* kJsonSuffix = ".json";
constexpr int kTranscriptVersion = 1;

std::string build_id() { return std::string(version()) + " " + std::string(git_commit()); }

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string title_of(const Json& messages) {
  for (const auto& m : messages) {
    if (m.value("role", "") == "user" && m.contains("content") && m["content"].is_string()) {
      std::string t = m["content"].get<std::string>();
      for (char& c : t) {
        if (c == '\n' || c == '\t') c = ' ';
      }
      if (t.size() > 60) {
        size_t cut = 57;
        while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;  // a whole character
        t = t.substr(0, cut) + "...";
      }
      return t;
    }
  }
  return "";
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw Error("cannot write " + path + " (disk full?)");
  }
  out.close();
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error("cannot write " + path + ": " + ec.message());
  }
}

}  // namespace

std::string default_session_dir() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return "";
  return std::string(home) + "/.ds4/kvcache";
}

SessionStore::SessionStore(std::string dir, engine::Engine& engine) : dir_(std::move(dir)), engine_(engine) {
  if (dir_.empty()) throw Error("no session folder: HOME is unset; give --session-dir");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) throw Error("cannot create the session folder " + dir_ + ": " + ec.message());
}

void SessionStore::check_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                           c == '_' || c == '-';
                  });
  if (!ok) throw Error("bad session name '" + name + "': use 1-64 letters, digits, '.', '_' or '-', not starting with '.'");
}

std::string SessionStore::kv_path(const std::string& name) const {
  return (fs::path(dir_) / (kPrefix + name + kKvSuffix)).string();
}
std::string SessionStore::json_path(const std::string& name) const {
  return (fs::path(dir_) / (kPrefix + name + kJsonSuffix)).string();
}

void SessionStore::save(const std::string& name, const Conversation& conversation) {
  check_name(name);
  if (!conversation.started()) throw Error("nothing to save yet: the conversation is empty");
  const Conversation::State st = conversation.state();
  Json t = {{"format", "ds4-agent-session"},
            {"version", kTranscriptVersion},
            {"build", build_id()},
            {"n_ctx", conversation.n_ctx()},
            {"tokens", conversation.used()},
            {"saved_at", now_seconds()},
            {"title", title_of(st.messages)},
            {"rendered", st.rendered},
            {"pending", st.pending},
            {"messages", st.messages}};
  // The KV first: a transcript never names a KV file that is not there.
  engine_.backend().save_session_file(kv_path(name), conversation.session());
  // Generated text may hold invalid UTF-8 (a random or cut-off reply): the
  // transcript gets U+FFFD there; the KV keeps the exact tokens.
  write_text_file(json_path(name), t.dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Json SessionStore::read_transcript(const std::string& name) const {
  const std::string path = json_path(name);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("no saved session named '" + name + "' (" + path + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  Json t = Json::parse(ss.str(), nullptr, false);
  if (t.is_discarded() || !t.is_object() || t.value("format", "") != "ds4-agent-session")
    throw Error(path + ": damaged (not a ds4-agent transcript)");
  if (t.value("version", 0) != kTranscriptVersion)
    throw Error(path + ": transcript version " + t["version"].dump() + ", this build reads " +
                std::to_string(kTranscriptVersion));
  const std::string build = t.value("build", "");
  if (build != build_id())
    throw Error("session '" + name + "' was saved by ds4 " + build + ", this is " + build_id() +
                "; sessions load only in the build that saved them");
  if (!t.contains("messages") || !t["messages"].is_array() || !t.contains("rendered") ||
      !t["rendered"].is_number_unsigned() || !t.contains("pending") || !t["pending"].is_array() ||
      !t.contains("n_ctx") || !t["n_ctx"].is_number_integer())
    throw Error(path + ": damaged (a field is missing or of the wrong type)");
  return t;
}

std::vector<SavedSessionInfo> SessionStore::list() const {
  std::vector<SavedSessionInfo> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.rfind(kPrefix, 0) != 0 || it->path().extension() != kJsonSuffix) continue;
    SavedSessionInfo info;
    info.name = file.substr(std::string(kPrefix).size(), file.size() - std::string(kPrefix).size() -
                                                             std::string(kJsonSuffix).size());
    std::error_code e2;
    info.bytes = fs::file_size(it->path(), e2);
    const uint64_t kv_bytes = fs::file_size(kv_path(info.name), e2);
    if (e2) {
      info.problem = "its KV file is missing";
    } else {
      info.bytes += kv_bytes;
    }
    try {
      const Json t = read_transcript(info.name);
      info.tokens = t.value("tokens", int64_t{0});
      info.n_ctx = t.value("n_ctx", int64_t{0});
      info.saved_at = t.value("saved_at", int64_t{0});
      info.title = t.value("title", "");
    } catch (const Error& e) {
      if (info.problem.empty()) info.problem = e.what();
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const SavedSessionInfo& a, const SavedSessionInfo& b) {
    return a.saved_at != b.saved_at ? a.saved_at > b.saved_at : a.name < b.name;
  });
  return out;
}

void SessionStore::load(const std::string& name, Conversation& conversation) const {
  check_name(name);
  const Json t = read_transcript(name);
  const int64_t saved_ctx = t["n_ctx"].get<int64_t>();
  if (saved_ctx > conversation.n_ctx())
    throw Error("session '" + name + "' was saved with a context of " + std::to_string(saved_ctx) +
                " tokens, more than this agent's " + std::to_string(conversation.n_ctx()) + " (-c)");
  Conversation::State st;
  st.messages = t["messages"];
  st.rendered = t["rendered"].get<size_t>();
  try {
    st.pending = t["pending"].get<std::vector<int32_t>>();
  } catch (const std::exception&) {
    throw Error(json_path(name) + ": damaged (pending tokens)");
  }
  std::unique_ptr<backend::Session> session = engine_.new_session(conversation.n_ctx());
  engine_.backend().load_session_file(kv_path(name), *session);
  conversation.restore(std::move(st), std::move(session));
}

void SessionStore::remove(const std::string& name) {
  check_name(name);
  std::error_code ec;
  const bool had_json = fs::remove(json_path(name), ec);
  const bool had_kv = fs::remove(kv_path(name), ec);
  if (!had_json && !had_kv) throw Error("no saved session named '" + name + "'");
}

}  // namespace ds4::agent
