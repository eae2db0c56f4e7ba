#include "dist/mpi_collective.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace ds4::dist {

namespace {

// MPI counts are ints: a call moves at most this many elements at once.
constexpr size_t kPieceFloats = size_t{1} << 24;
constexpr size_t kPieceBytes = size_t{1} << 30;
// A rank waiting for rank 0's next command spins for kSpin (a decode step's
// next command comes within microseconds), then polls every kNap, and after
// kIdle every kIdleNap (an idle server's ranks should cost next to nothing;
// the first request after a quiet spell waits up to kIdleNap more).
constexpr auto kSpin = std::chrono::microseconds(500);
constexpr auto kNap = std::chrono::microseconds(20);
constexpr auto kIdle = std::chrono::milliseconds(50);
constexpr auto kIdleNap = std::chrono::milliseconds(2);

class MpiCollective final : public backend::Collective {
 public:
  explicit MpiCollective(const MpiRuntime& mpi) : rank_(mpi.rank()), size_(mpi.size()) {
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm_) != MPI_SUCCESS) throw Error("tensor parallel: MPI_Comm_dup failed");
  }
  ~MpiCollective() override { MPI_Comm_free(&comm_); }
  MpiCollective(const MpiCollective&) = delete;
  MpiCollective& operator=(const MpiCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void sum(float* data, size_t n) override {
    count_call();
    const size_t ranks = static_cast<size_t>(size_);
    for (size_t at = 0; at < n; at += kPieceFloats) {
      const size_t m = std::min(kPieceFloats, n - at);
      parts_.resize(m * ranks);
      check(MPI_Allgather(data + at, static_cast<int>(m), MPI_FLOAT, parts_.data(), static_cast<int>(m), MPI_FLOAT,
                          comm_),
            "MPI_Allgather");
      float* out = data + at;
      for (size_t i = 0; i < m; ++i) {
        float acc = parts_[i];
        for (size_t r = 1; r < ranks; ++r) acc += parts_[r * m + i];
        out[i] = acc;
      }
    }
  }

  void gather(const float* mine, std::span<const size_t> counts, float* all) override {
    count_call();
    if (counts.size() != static_cast<size_t>(size_)) throw Error("tensor parallel: gather counts for another group");
    std::vector<int> n(counts.size()), at(counts.size());
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > INT_MAX || offset > INT_MAX)
        throw Error("tensor parallel: gathering " + std::to_string(offset + counts[r]) + " floats (MPI counts are ints)");
      n[r] = static_cast<int>(counts[r]);
      at[r] = static_cast<int>(offset);
      offset += counts[r];
    }
    check(MPI_Allgatherv(mine, n[static_cast<size_t>(rank_)], MPI_FLOAT, all, n.data(), at.data(), MPI_FLOAT, comm_),
          "MPI_Allgatherv");
  }

  void broadcast(std::vector<uint8_t>& bytes) override {
    count_call();
    uint64_t length = bytes.size();
    // The length without spinning: rank 0's next command may be far off.
    MPI_Request request;
    check(MPI_Ibcast(&length, 1, MPI_UINT64_T, 0, comm_, &request), "MPI_Ibcast");
    const auto start = std::chrono::steady_clock::now();
    for (int done = 0;;) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) break;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > kIdle) {
        std::this_thread::sleep_for(kIdleNap);
      } else if (waited > kSpin) {
        std::this_thread::sleep_for(kNap);
      }
    }
    if (rank_ != 0) bytes.resize(static_cast<size_t>(length));
    for (size_t at = 0; at < length; at += kPieceBytes) {
      const size_t m = std::min(kPieceBytes, static_cast<size_t>(length) - at);
      check(MPI_Bcast(bytes.data() + at, static_cast<int>(m), MPI_BYTE, 0, comm_), "MPI_Bcast");
    }
  }

  bool agree(bool rank0_value) override {
    count_call();
    uint8_t v = rank0_value ? 1 : 0;
    check(MPI_Bcast(&v, 1, MPI_BYTE, 0, comm_), "MPI_Bcast");
    return v != 0;
  }

  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "MPI rank %d: %s; ending the job\n", rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(comm_, 1);
    std::_Exit(1);  // MPI_Abort does not return; if it did, the ranks must still not wait on
  }

 private:
  void check(int code, const char* call) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(code, text, &n);
    throw Error(std::string("tensor parallel: ") + call + ": " + std::string(text, static_cast<size_t>(n)));
  }

  int rank_, size_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<float> parts_;
};

}  // namespace

std::unique_ptr<backend::Collective> make_mpi_collective(const MpiRuntime& mpi) {
  return std::make_unique<MpiCollective>(mpi);
}

}  // namespace ds4::dist
