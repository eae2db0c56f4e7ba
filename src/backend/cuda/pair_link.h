// The exchange between the two GPUs of a tensor-parallel pair (--gpu-tensor-
// parallel: the home holds a layer range less its odd routed experts, the
// partner those experts): per MoE sublayer, the home's routed inputs go to
// the partner, and the partner's part of the output comes back added onto
// the home's. Between two GPUs it goes through NCCL (one communicator of
// two ranks per pair, home rank 0; a sum of two is the same bits whichever
// way it is added, so runs are bit-stable). A pair on one GPU (tests' stand-in
// where one GPU is all there is) exchanges by device copies and an add.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

namespace ds4::cuda {

class PairLink {
 public:
  // ds4::Error naming the GPUs and NCCL's reason when the communicator
  // cannot be made (NCCL missing, no peer access, ...).
  PairLink(int home, int partner);
  ~PairLink();
  PairLink(const PairLink&) = delete;
  PairLink& operator=(const PairLink&) = delete;

  int home() const { return home_; }
  int partner() const { return partner_; }

  // bytes at home_src (home's memory) into partner_dst (partner's), queued
  // on each GPU's stream.
  void to_partner(const void* home_src, void* partner_dst, size_t bytes, cudaStream_t home_stream,
                  cudaStream_t partner_stream);
  // home_io (n floats on the home) += partner_part (n floats on the
  // partner), queued on each GPU's stream.
  void add_partner_part(float* home_io, const float* partner_part, size_t n, cudaStream_t home_stream,
                        cudaStream_t partner_stream);

 private:
  int home_, partner_;
  ncclComm_t comms_[2] = {nullptr, nullptr};  // NCCL between two GPUs; none on one
};

}  // namespace ds4::cuda
