// NCCL, opened when tensor parallel starts (dlopen of libnccl.so.2) rather
// than linked, as cuBLAS is (cublas_library.h): most runs never use it, and
// a linked NCCL would be mapped by every program of a CUDA build.
#pragma once

#include <nccl.h>

#include <string>

namespace ds4::cuda {

// The NCCL entry points the backend calls.
struct NcclLibrary {
  decltype(&ncclGetVersion) get_version;
  decltype(&ncclCommInitAll) comm_init_all;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclReduce) reduce;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclGetLastError) last_error;
};

// Opens it once (thread-safe): the dynamic linker's search first, then the
// CUDA toolkit's library folder this build was configured with. ds4::Error
// naming the library and dlopen's reason when it cannot be had.
const NcclLibrary& nccl_library();

// "2.28.3": the version of the NCCL opened.
std::string nccl_version();

// ds4::Error "what: NCCL's text (the result's number)" unless ok; comm's
// last error is added when there is one.
void nccl_check(ncclResult_t result, const char* what, ncclComm_t comm = nullptr);

}  // namespace ds4::cuda
