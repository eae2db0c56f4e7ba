#include "backend/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr const char* kLibrary = "libcublas.so.13";

void* open_library() {
  if (void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first = dlerror();
#ifdef DS4_CUDA_LIB_DIR
  const std::string configured = std::string(DS4_CUDA_LIB_DIR) + "/" + kLibrary;
  if (void* handle = dlopen(configured.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
#endif
  throw Error(std::string("cuBLAS: cannot load ") + kLibrary + " (" + first +
              "); it comes with the CUDA 13 toolkit or the nvidia-cublas wheel: add its folder to LD_LIBRARY_PATH");
}

template <typename F>
F symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (p == nullptr) throw Error(std::string("cuBLAS: ") + kLibrary + " lacks " + name);
  return reinterpret_cast<F>(p);
}

CublasLibrary load() {
  void* handle = open_library();  // kept open for the process's life
  CublasLibrary l;
  l.create = symbol<decltype(l.create)>(handle, "cublasCreate_v2");
  l.destroy = symbol<decltype(l.destroy)>(handle, "cublasDestroy_v2");
  l.set_stream = symbol<decltype(l.set_stream)>(handle, "cublasSetStream_v2");
  l.set_math_mode = symbol<decltype(l.set_math_mode)>(handle, "cublasSetMathMode");
  l.sgemm = symbol<decltype(l.sgemm)>(handle, "cublasSgemm_v2");
  l.gemm_ex = symbol<decltype(l.gemm_ex)>(handle, "cublasGemmEx");
  l.status_string = symbol<decltype(l.status_string)>(handle, "cublasGetStatusString");
  l.status_name = symbol<decltype(l.status_name)>(handle, "cublasGetStatusName");
  return l;
}

}  // namespace

const CublasLibrary& cublas_library() {
  static const CublasLibrary library = load();
  return library;
}

}  // namespace ds4::cuda
