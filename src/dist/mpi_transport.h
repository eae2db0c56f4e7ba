// The MPI transport (dist/transport.h) for clusters that already run MPI:
// `mpirun -n K ds4-server --dist mpi --layers 0:A,A:B,...,X:output`, rank 0
// the coordinator (it serves HTTP), rank r > 0 the worker of the r-th range.
// Messages are point-to-point sends between rank 0 and each worker, and
// from each worker to the next stage's rank (Open MPI picks TCP, shared
// memory, or UCX/RDMA where the cluster has it).
//
// MPI's data plane is neither authenticated nor encrypted: for trusted
// networks only (docs/distributed.md). Open MPI 4.1 has no fault tolerance:
// a rank that dies takes the job down (mpirun ends every rank), so MPI runs
// need a supervisor to restart them; the handshake still refuses another
// build or model, and heartbeats still notice a rank that hangs.
#pragma once

#include <memory>

#include "dist/transport.h"

namespace ds4::dist {

// MPI for the whole process: initialised (threads serialized: only the
// transport's I/O thread calls MPI after start-up) on construction,
// finalised on destruction. ds4::Error when MPI cannot start.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// Rank 0's end: every other rank is a peer ("rank N").
std::unique_ptr<Hub> make_mpi_hub(const MpiRuntime& mpi);
// A worker rank's end: rank 0.
std::unique_ptr<Link> make_mpi_link(const MpiRuntime& mpi);

}  // namespace ds4::dist
