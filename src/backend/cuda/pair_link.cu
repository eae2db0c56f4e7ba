#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_library.h"
#include "backend/cuda/pair_link.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(float* io, const float* part, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x;
  if (i < n) io[i] += part[i];
}

std::string pair_name(int home, int partner) {
  return "GPU " + std::to_string(home) + " and its partner GPU " + std::to_string(partner);
}

}  // namespace

PairLink::PairLink(int home, int partner) : home_(home), partner_(partner) {
  if (home == partner) return;
  const NcclLibrary& nccl = nccl_library();
  const int devices[2] = {home, partner};
  try {
    nccl_check(nccl.comm_init_all(comms_, 2, devices), ("ncclCommInitAll for " + pair_name(home, partner)).c_str());
  } catch (const Error&) {
    comms_[0] = comms_[1] = nullptr;
    throw;
  }
}

PairLink::~PairLink() {
  if (comms_[0] == nullptr) return;
  const NcclLibrary& nccl = nccl_library();
  for (ncclComm_t comm : comms_) (void)nccl.comm_destroy(comm);
}

void PairLink::to_partner(const void* home_src, void* partner_dst, size_t bytes, cudaStream_t home_stream,
                          cudaStream_t partner_stream) {
  if (bytes == 0) return;
  if (comms_[0] == nullptr) {
    if (home_stream != partner_stream) throw Error("pair link on one GPU: the two parts must share a stream");
    cuda_check(cudaMemcpyAsync(partner_dst, home_src, bytes, cudaMemcpyDeviceToDevice, home_stream), "cudaMemcpyAsync",
               home_);
    return;
  }
  const NcclLibrary& nccl = nccl_library();
  const std::string what = "ncclBroadcast from " + pair_name(home_, partner_);
  nccl_check(nccl.group_start(), "ncclGroupStart");
  const ncclResult_t a = nccl.broadcast(home_src, const_cast<void*>(home_src), bytes, ncclUint8, 0, comms_[0], home_stream);
  const ncclResult_t b = nccl.broadcast(partner_dst, partner_dst, bytes, ncclUint8, 0, comms_[1], partner_stream);
  const ncclResult_t end = nccl.group_end();
  nccl_check(a, what.c_str(), comms_[0]);
  nccl_check(b, what.c_str(), comms_[1]);
  nccl_check(end, what.c_str());
}

void PairLink::add_partner_part(float* home_io, const float* partner_part, size_t n, cudaStream_t home_stream,
                                cudaStream_t partner_stream) {
  if (n == 0) return;
  if (comms_[0] == nullptr) {
    if (home_stream != partner_stream) throw Error("pair link on one GPU: the two parts must share a stream");
    add_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, home_stream>>>(home_io,
                                                                                                  partner_part, n);
    cuda_check_launch("pair add", home_);
    return;
  }
  const NcclLibrary& nccl = nccl_library();
  const std::string what = "ncclReduce onto " + pair_name(home_, partner_);
  nccl_check(nccl.group_start(), "ncclGroupStart");
  // The root (home) sums in place; the partner's receive buffer is unused.
  const ncclResult_t a = nccl.reduce(home_io, home_io, n, ncclFloat32, ncclSum, 0, comms_[0], home_stream);
  const ncclResult_t b =
      nccl.reduce(partner_part, const_cast<float*>(partner_part), n, ncclFloat32, ncclSum, 0, comms_[1], partner_stream);
  const ncclResult_t end = nccl.group_end();
  nccl_check(a, what.c_str(), comms_[0]);
  nccl_check(b, what.c_str(), comms_[1]);
  nccl_check(end, what.c_str());
}

}  // namespace ds4::cuda
