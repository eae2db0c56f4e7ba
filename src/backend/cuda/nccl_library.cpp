#include "backend/cuda/nccl_library.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";

void* open_library() {
  if (void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first = dlerror();
#ifdef DS4_CUDA_LIB_DIR
  const std::string configured = std::string(DS4_CUDA_LIB_DIR) + "/" + kLibrary;
  if (void* handle = dlopen(configured.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
#endif
  throw Error(std::string("NCCL: cannot load ") + kLibrary + " (" + first +
              "); GPU tensor parallel needs it (the CUDA toolkit's NCCL or the nvidia-nccl wheel): add its folder to "
              "LD_LIBRARY_PATH");
}

template <typename F>
F symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (p == nullptr) throw Error(std::string("NCCL: ") + kLibrary + " lacks " + name);
  return reinterpret_cast<F>(p);
}

NcclLibrary load() {
  void* handle = open_library();  // kept open for the process's life
  NcclLibrary l;
  l.get_version = symbol<decltype(l.get_version)>(handle, "ncclGetVersion");
  l.comm_init_all = symbol<decltype(l.comm_init_all)>(handle, "ncclCommInitAll");
  l.comm_destroy = symbol<decltype(l.comm_destroy)>(handle, "ncclCommDestroy");
  l.group_start = symbol<decltype(l.group_start)>(handle, "ncclGroupStart");
  l.group_end = symbol<decltype(l.group_end)>(handle, "ncclGroupEnd");
  l.broadcast = symbol<decltype(l.broadcast)>(handle, "ncclBroadcast");
  l.reduce = symbol<decltype(l.reduce)>(handle, "ncclReduce");
  l.error_string = symbol<decltype(l.error_string)>(handle, "ncclGetErrorString");
  l.last_error = symbol<decltype(l.last_error)>(handle, "ncclGetLastError");
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
