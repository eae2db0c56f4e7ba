#include "backend/cuda/nccl_library.h"

#include <string>

#include "backend/cuda/toolkit_library.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";

NcclLibrary load() {
  void* handle =
      open_toolkit_library(kLibrary, "NCCL",
                           "GPU tensor parallel needs it (the CUDA toolkit's NCCL or the nvidia-nccl wheel): "
                           "add its folder to LD_LIBRARY_PATH");
  const auto fn = [&]<typename F>(F& f, const char* symbol) {
    f = toolkit_function<F>(handle, kLibrary, "NCCL", symbol);
  };
  NcclLibrary l;
  fn(l.get_version, "ncclGetVersion");
  fn(l.comm_init_all, "ncclCommInitAll");
  fn(l.comm_destroy, "ncclCommDestroy");
  fn(l.group_start, "ncclGroupStart");
  fn(l.group_end, "ncclGroupEnd");
  fn(l.broadcast, "ncclBroadcast");
  fn(l.reduce, "ncclReduce");
  fn(l.error_string, "ncclGetErrorString");
  fn(l.last_error, "ncclGetLastError");
  return l;
}

}  // namespace

const NcclLibrary& nccl_library() {
  static const NcclLibrary library = load();
  return library;
}

std::string nccl_version() {
  int v = 0;
  nccl_check(nccl_library().get_version(&v), "ncclGetVersion");
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z from 2.9 on.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void nccl_check(ncclResult_t result, const char* what, ncclComm_t comm) {
  if (result == ncclSuccess) return;
  const NcclLibrary& nccl = nccl_library();
  std::string message = std::string(what) + ": " + nccl.error_string(result) + " (NCCL result " +
                        std::to_string(static_cast<int>(result)) + ")";
  if (const char* last = nccl.last_error(comm); last != nullptr && *last != '\0') message += ": " + std::string(last);
  throw Error(message);
}

}  // namespace ds4::cuda
