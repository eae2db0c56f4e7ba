#include "dist/mpi_transport.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace ds4::dist {

namespace {

using Clock = std::chrono::steady_clock;

// A message is its length (tag kTagLength, one u64) and then its bytes in
// pieces of at most kPiece (tag kTagPiece): MPI counts are ints.
constexpr int kTagLength = 0x4453;
constexpr int kTagPiece = 0x4454;
constexpr size_t kPiece = size_t{1} << 28;
// Between polls of an idle receive: short, a decode step waits on it.
constexpr auto kIdleNap = std::chrono::microseconds(20);

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, static_cast<size_t>(n));
}

// Sends and receives for one rank; the thread that calls receive() makes
// every MPI call (sends queued by other threads go out there).
class MpiEnd {
 protected:
  struct Outgoing {
    int dest;
    Bytes bytes;
    uint64_t length = 0;
    std::vector<MPI_Request> requests;
  };

  void queue(int dest, Bytes bytes) {
    std::lock_guard lock(mutex_);
    Outgoing o;
    o.dest = dest;
    o.bytes = std::move(bytes);
    queued_.push_back(std::move(o));
  }

  // Starts the queued sends and retires the finished ones.
  void pump() {
    std::deque<Outgoing> fresh;
    {
      std::lock_guard lock(mutex_);
      fresh.swap(queued_);
    }
    for (Outgoing& fresh_one : fresh) {
      // In its final place before MPI sees its addresses (a list does not
      // move its elements).
      in_flight_.push_back(std::move(fresh_one));
      Outgoing& o = in_flight_.back();
      o.length = o.bytes.size();
      o.requests.resize(1 + (o.bytes.size() + kPiece - 1) / kPiece);
      MPI_Isend(&o.length, 1, MPI_UINT64_T, o.dest, kTagLength, MPI_COMM_WORLD, &o.requests[0]);
      for (size_t i = 1; i < o.requests.size(); ++i) {
        const size_t at = (i - 1) * kPiece, n = std::min(kPiece, o.bytes.size() - at);
        MPI_Isend(o.bytes.data() + at, static_cast<int>(n), MPI_BYTE, o.dest, kTagPiece, MPI_COMM_WORLD,
                  &o.requests[i]);
      }
    }
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      int done = 0;
      MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE);
      it = done ? in_flight_.erase(it) : std::next(it);
    }
  }

  // The next message from `source` (MPI_ANY_SOURCE for any) within
  // `timeout`: its sender and bytes.
  std::optional<std::pair<int, Bytes>> poll(int source, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      pump();
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(source, kTagLength, MPI_COMM_WORLD, &flag, &st);
      if (flag) {
        uint64_t length = 0;
        MPI_Recv(&length, 1, MPI_UINT64_T, st.MPI_SOURCE, kTagLength, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        Bytes bytes(length);
        for (size_t at = 0; at < length; at += kPiece) {
          const size_t n = std::min(kPiece, static_cast<size_t>(length) - at);
          MPI_Recv(bytes.data() + at, static_cast<int>(n), MPI_BYTE, st.MPI_SOURCE, kTagPiece, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        }
        return std::make_pair(st.MPI_SOURCE, std::move(bytes));
      }
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(kIdleNap);
    }
  }

 private:
  std::mutex mutex_;
  std::deque<Outgoing> queued_;
  std::list<Outgoing> in_flight_;
};

class MpiHub final : public Hub, private MpiEnd {
 public:
  explicit MpiHub(int size) : size_(size) {}
  void send(const PeerId& peer, Bytes bytes) override {
    const int rank = std::stoi(peer.substr(5));  // "rank N"
    queue(rank, std::move(bytes));
  }
  std::optional<Incoming> receive(std::chrono::milliseconds timeout) override {
    auto m = poll(MPI_ANY_SOURCE, timeout);
    if (!m) return std::nullopt;
    Incoming in;
    in.peer = "rank " + std::to_string(m->first);
    in.address = "MPI " + in.peer;
    in.bytes = std::move(m->second);
    return in;
  }
  std::vector<std::string> take_security_events() override { return {}; }
  std::vector<PeerId> take_unreachable() override { return {}; }  // a lost rank ends the MPI job
  std::string describe() const override { return "MPI, " + std::to_string(size_) + " ranks (not encrypted)"; }
  std::string endpoint() const override { return "mpi"; }

 private:
  int size_;
};

// A worker rank's end: rank 0, and the other worker ranks by their names
// ("rank 2" is both the forward address and the hub's peer id).
class MpiLink final : public Link, private MpiEnd {
 public:
  MpiLink(int rank, int size) : rank_(rank), size_(size) {}
  void send(Bytes bytes) override { queue(0, std::move(bytes)); }
  void send_to(const std::string& address, Bytes bytes) override {
    const int rank = rank_of(address);
    if (rank <= 0 || rank >= size_ || rank == rank_) {
      std::lock_guard lock(undelivered_mutex_);
      undelivered_.push_back({address, "no worker rank of this MPI job is called '" + address + "'", std::move(bytes)});
      return;
    }
    queue(rank, std::move(bytes));
  }
  std::string forward_address() const override { return "rank " + std::to_string(rank_); }
  std::optional<Received> receive(std::chrono::milliseconds timeout) override {
    auto m = poll(MPI_ANY_SOURCE, timeout);
    if (!m) return std::nullopt;
    return Received{std::move(m->second), m->first == 0};
  }
  std::vector<std::string> take_security_events() override { return {}; }
  std::string describe() const override { return "MPI rank 0 (not encrypted)"; }

 private:
  static int rank_of(const std::string& address) {
    if (address.rfind("rank ", 0) != 0 || address.size() == 5 || address.size() > 14 ||
        address.find_first_not_of("0123456789", 5) != std::string::npos)
      return -1;
    return std::stoi(address.substr(5));
  }
  int rank_, size_;
};

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) throw Error("MPI_Init_thread: " + mpi_error(rc));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw Error("this MPI library does not allow MPI calls from a thread other than main (MPI_THREAD_SERIALIZED)");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() { MPI_Finalize(); }

std::unique_ptr<Hub> make_mpi_hub(const MpiRuntime& mpi) {
  if (mpi.rank() != 0) throw Error("the MPI coordinator is rank 0, this process is rank " + std::to_string(mpi.rank()));
  return std::make_unique<MpiHub>(mpi.size());
}

std::unique_ptr<Link> make_mpi_link(const MpiRuntime& mpi) {
  if (mpi.rank() == 0) throw Error("rank 0 is the coordinator, not a worker");
  return std::make_unique<MpiLink>(mpi.rank(), mpi.size());
}

}  // namespace ds4::dist
