// Tensor parallel's collective calls (backend/collective.h) over Open MPI,
// on a communicator of its own (a duplicate of MPI_COMM_WORLD, so nothing
// else's messages meet its calls). The sums gather every rank's part
// (MPI_Allgather) and add them in rank order on each rank, rather than
// MPI_Allreduce, whose grouping of the float additions is the library's and
// may differ between ranks; the bits are then the same everywhere. A rank
// waiting for rank 0's next command polls instead of spinning in a blocking
// broadcast. For trusted networks only: MPI neither authenticates nor
// encrypts (docs/distributed.md).
#pragma once

#include <memory>

#include "backend/collective.h"
#include "dist/mpi_transport.h"

namespace ds4::dist {

// Every rank of `mpi` makes one (a collective call itself); it must be gone
// before `mpi` is.
std::unique_ptr<backend::Collective> make_mpi_collective(const MpiRuntime& mpi);

}  // namespace ds4::dist
