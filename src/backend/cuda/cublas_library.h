// cuBLAS, opened when the first GEMM runner is made (dlopen of
// libcublas.so.13) rather than linked: cuBLAS and cuBLASLt map about 600 MB
// of libraries, which every program of a CUDA build would otherwise carry
// whether or not it touches a GPU (and which a memory-limited cgroup then
// charges).
#pragma once

#include <cublas_v2.h>

namespace ds4::cuda {

// The cuBLAS entry points the backend calls.
struct CublasLibrary {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  // cublasGemmEx's C entry point (C++ also sees an overload taking the
  // older cudaDataType compute argument).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasGetStatusString) status_string;
  decltype(&cublasGetStatusName) status_name;
};

// Opens it once (thread-safe): the dynamic linker's search first, then the
// toolkit's library folder this build was configured with. ds4::Error
// naming the library and dlopen's reason when it cannot be had.
const CublasLibrary& cublas_library();

}  // namespace ds4::cuda
