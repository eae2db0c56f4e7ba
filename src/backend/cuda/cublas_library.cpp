#include "backend/cuda/cublas_library.h"

#include "backend/cuda/toolkit_library.h"

namespace ds4::cuda {
namespace {

constexpr const char* kLibrary = "libcublas.so.13";

CublasLibrary load() {
  void* handle = open_toolkit_library(
      kLibrary, "cuBLAS",
      "it comes with the CUDA 13 toolkit or the nvidia-cublas wheel: add its folder to LD_LIBRARY_PATH");
  const auto fn = [&]<typename F>(F& f, const char* symbol) {
    f = toolkit_function<F>(handle, kLibrary, "cuBLAS", symbol);
  };
  CublasLibrary l;
  fn(l.create, "cublasCreate_v2");
  fn(l.destroy, "cublasDestroy_v2");
  fn(l.set_stream, "cublasSetStream_v2");
  fn(l.set_math_mode, "cublasSetMathMode");
  fn(l.sgemm, "cublasSgemm_v2");
  fn(l.gemm_ex, "cublasGemmEx");
  fn(l.status_string, "cublasGetStatusString");
  fn(l.status_name, "cublasGetStatusName");
  return l;
}

}  // namespace

const CublasLibrary& cublas_library() {
  static const CublasLibrary library = load();
  return library;
}

}  // namespace ds4::cuda
