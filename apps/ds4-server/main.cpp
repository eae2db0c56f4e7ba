// ds4-server: DeepSeek V4 Flash over HTTP (PROTOCOL.md §5–6).
//   ds4-server [-m MODEL] [--host H] [--port P] [--kv-disk-dir DIR] …
// Serves OpenAI chat completions, legacy completions and Responses, and
// Anthropic Messages, with SSE streaming, tool calls, KV prefix reuse and the
// disk KV cache. One line per request on stderr. SIGINT/SIGTERM shut down
// cleanly (queued requests get 503, the live sessions are saved to the disk
// cache); a second signal exits at once.
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/mpi_pipeline.h"
#include "common/run_worker.h"
#include "core/error.h"
#include "dist/mpi_transport.h"
#include "engine/engine.h"
#include "runtime/kv_disk_cache.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/trace_log.h"
#include "server_options.h"
#include "text/chat_render.h"
#include "text/tokenizer.h"

namespace {

using ds4::Error;

// One server per machine by default (two would fight over memory and the
// cache folder): an exclusive lock on ds4.lock in the temp folder, or on
// $DS4_LOCK_FILE.
int take_instance_lock() {
  std::string path;
  if (const char* p = std::getenv("DS4_LOCK_FILE"); p && *p) {
    path = p;
  } else {
    std::error_code ec;
    path = (std::filesystem::temp_directory_path(ec) / "ds4.lock").string();
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("lock file " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    throw Error("another ds4-server is running (lock " + path + " held" +
                (n > 0 ? std::string(" by pid ") + std::string(pid, static_cast<size_t>(n)) : std::string()) +
                "); stop it, or set DS4_LOCK_FILE to run a second one");
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0) (void)::pwrite(fd, me.data(), me.size(), 0);
  return fd;  // held until exit
}

// The connection threads (up to --http-threads) each get a glibc malloc
// arena of their own by default and keep what they freed in it, so RSS grows
// with the number of threads that ever served a request (under a 32-client
// load: ~20 % after warm-up). A few shared arenas keep it flat;
// MALLOC_ARENA_MAX in the environment still decides.
constexpr int kMallocArenas = 4;

int run(int argc, char** argv) {
  if (!std::getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, kMallocArenas);
  bool exit_now = false;
  int exit_code = 0;
  ds4::app::ServerOptions o = ds4::app::parse_server_options(argc, argv, &exit_now, &exit_code);
  if (exit_now) return exit_code;
  if (!o.chdir.empty()) {
    std::error_code ec;
    std::filesystem::current_path(o.chdir, ec);
    if (ec) throw Error("--chdir " + o.chdir + ": " + ec.message());
  }
  if (!o.kv_disk_dir.empty()) o.kv.validate();
  {
    std::error_code ec;
    if (!std::filesystem::exists(o.load.model_path, ec)) {
      if (o.model_given) throw Error(o.load.model_path + ": no such file");
      throw Error("no model: ./" + o.load.model_path +
                  " does not exist. Give one with -m/--model FILE, or download DeepSeek V4 Flash with "
                  "./download_model.sh q2-imatrix (96-128 GB RAM) or ./download_model.sh q4-imatrix (256 GB RAM "
                  "or more)");
    }
  }

  // Signals go to one thread (sigwait), never to the workers.
  const sigset_t signals = ds4::app::block_stop_signals();
  ::signal(SIGPIPE, SIG_IGN);

  // --dist mpi: every rank runs this program; rank 0 serves, the others are
  // the pipeline's workers, or with --tensor-parallel its followers.
  std::optional<ds4::dist::MpiRuntime> mpi;
  if (o.dist_mpi && o.load.dist_tensor_parallel) {
    mpi.emplace(&argc, &argv);
    if (mpi->size() < 2) throw Error("--tensor-parallel needs 2 or more MPI ranks (mpirun -n 2 ...)");
    o.load.dist_mpi = &*mpi;
    if (mpi->rank() > 0) {
      ds4::engine::Engine follower(o.load);
      std::fprintf(stderr, "ds4-server rank %d: tensor parallel, %d ranks; following rank 0\n", mpi->rank(),
                   mpi->size());
      std::fflush(stderr);
      follower.follow_tensor_parallel();
      std::fprintf(stderr, "ds4-server rank %d: stopped\n", mpi->rank());
      return 0;
    }
  } else if (o.dist_mpi) {
    mpi.emplace(&argc, &argv);
    if (ds4::app::serve_mpi_stage("ds4-server", *mpi, o.mpi_layers, o.load, o.ctx, signals)) return 0;
    o.load.dist_mpi = &*mpi;
  }

  const int lock_fd = take_instance_lock();
  (void)lock_fd;

  ds4::engine::Engine model(o.load);
  const ds4::text::Tokenizer& tokenizer = model.tokenizer();
  if (o.load.dist_tensor_parallel)
    std::fprintf(stderr, "ds4-server: tensor parallel over %d MPI ranks (MPI is not encrypted: trusted networks only)\n",
                 mpi->size());

  std::unique_ptr<ds4::server::TraceLog> trace;
  if (!o.trace.empty()) trace = std::make_unique<ds4::server::TraceLog>(o.trace);
  std::unique_ptr<ds4::runtime::KvDiskCache> disk;
  if (!o.kv_disk_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.kv_disk_dir, ec);
    if (ec) throw Error("--kv-disk-dir " + o.kv_disk_dir + ": " + ec.message());
    disk = std::make_unique<ds4::runtime::KvDiskCache>(
        o.kv, model.backend(), o.ctx,
        [](const std::string& w) { std::fprintf(stderr, "ds4-server: warning: %s\n", w.c_str()); });
  }
  std::string warning;
  ds4::text::effective_thinking_mode(ds4::text::ThinkingMode::Max, o.ctx, &warning);
  if (!warning.empty()) std::fprintf(stderr, "ds4-server: note: %s\n", warning.c_str());

  if (model.route()) o.http.route = [&model] { return *model.route(); };
  ds4::server::Metrics metrics;
  if (o.load.ssd_streaming) o.engine.streaming_stats = [&model] { return model.streaming_stats(); };
  ds4::server::Engine engine(tokenizer, model.backend(), o.engine, std::move(disk), metrics, trace.get());
  ds4::server::HttpServer http(engine, metrics, o.http);
  http.bind();
  const std::string host = o.http.host.find(':') != std::string::npos ? "[" + o.http.host + "]" : o.http.host;
  if (model.facts().locked_bytes > 0)
    std::fprintf(stderr, "ds4-server: %llu bytes of weights locked in RAM (--mlock)\n",
                 static_cast<unsigned long long>(model.facts().locked_bytes));
  if (o.load.huge_pages)
    std::fprintf(stderr, "ds4-server: %llu of %llu bytes of weights in 2 MiB pages (--huge-pages)\n",
                 static_cast<unsigned long long>(model.facts().huge_page_bytes),
                 static_cast<unsigned long long>(model.facts().file_bytes));
  std::fprintf(stderr,
               "ds4-server: %s, context %lld, %d thread%s; listening on http://%s:%d\n"
               "ds4-server: try: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' "
               "-d '{\"model\":\"deepseek-v4-flash\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n",
               o.load.model_path.c_str(), static_cast<long long>(o.ctx), o.load.threads, o.load.threads == 1 ? "" : "s",
               host.c_str(),
               http.port(), host.c_str(), http.port());
  std::fflush(stderr);

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "ds4-server: %s: shutting down (again to exit at once)\n", strsignal(sig));
    // Drain first (queued requests get 503, the running one finishes on its
    // open connection, live sessions are saved), then close the listener.
    engine.shutdown();
    http.stop();
    sigwait(&signals, &sig);
    std::_Exit(130);
  });
  signal_thread.detach();

  http.serve();
  engine.shutdown();
  std::fprintf(stderr, "ds4-server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-server: %s\n", e.what());
    return 1;
  }
}
