// The CUDA backend's host side without needing a GPU: the device list says
// why there is none in one line, errors name the call and the device.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cublas_library.h"
#include "backend/cuda/cuda_devices.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/nccl_library.h"
#include "backend/cuda/phase_profile.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

TEST(CudaDevices, ListSaysWhyThereIsNoneOrDescribesEach) {
  const GpuList list = list_gpus();
  if (list.devices.empty()) {
    EXPECT_FALSE(list.unavailable.empty());
    EXPECT_EQ(list.unavailable.find('\n'), std::string::npos) << list.unavailable;
    EXPECT_EQ(list.unavailable.rfind("no CUDA GPU", 0), 0u) << list.unavailable;
    return;
  }
  EXPECT_TRUE(list.unavailable.empty());
  for (const GpuDevice& gpu : list.devices) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.total_bytes, 0u);
    EXPECT_LE(gpu.free_bytes, gpu.total_bytes);
    const std::string line = describe(gpu);
    EXPECT_EQ(line.rfind("GPU " + std::to_string(gpu.index) + ": " + gpu.name, 0), 0u) << line;
  }
}

TEST(CudaDevices, DescribeNamesTheGpuAndWhyItIsNotUsable) {
  GpuDevice gpu;
  gpu.index = 1;
  gpu.name = "Tesla T4";
  gpu.compute_major = 7;
  gpu.compute_minor = 5;
  gpu.sm_count = 40;
  gpu.total_bytes = 16ull << 30;
  gpu.free_bytes = 15ull << 30;
  gpu.unsupported = "compute capability 7.5 is older than Ampere (8.0)";
  EXPECT_EQ(describe(gpu),
            "GPU 1: Tesla T4, compute 7.5, 40 SMs, 15.00 GiB free of 16.00 GiB (not usable: compute capability 7.5 "
            "is older than Ampere (8.0))");
}

// The head-group kernel's group size, from the shape alone: 8, 4 or 2 heads
// dividing the count whose weights fit 48 KiB; else 1.
TEST(CudaAttention, HeadGroupsFitTheirWeightsInSharedMemory) {
  AttentionRows a;
  auto group = [&](int n_head, int max_rows) {
    a.n_head = n_head;
    a.max_rows = max_rows;
    return attention_head_group(a);
  };
  EXPECT_EQ(group(64, 640), 8);
  EXPECT_EQ(group(64, 1536), 8);  // 8 x 1536 floats: 48 KiB exactly
  EXPECT_EQ(group(64, 1537), 4);
  EXPECT_EQ(group(64, 6144), 2);
  EXPECT_EQ(group(64, 6145), 1);
  EXPECT_EQ(group(6, 100), 2);
  EXPECT_EQ(group(12, 100), 4);
  EXPECT_EQ(group(3, 100), 1);
}

// Rows beyond one head's shared memory are refused before any device call.
TEST(CudaAttention, TooManyRowsAreRefusedByName) {
  AttentionRows a;
  a.n_head = 64;
  a.dim = 512;
  a.n_tokens = 1;
  a.max_rows = 12289;
  try {
    attention_with_sink_rows(a, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention: 12289 rows per token exceed the kernel's 12288");
  }
}

TEST(CudaErrors, MessageNamesTheCallAndTheError) {
  EXPECT_EQ(cuda_error_message(cudaErrorMemoryAllocation, "cudaMalloc", -1),
            "cudaMalloc: out of memory (cudaErrorMemoryAllocation)");
  try {
    cuda_check(cudaErrorInvalidValue, "cudaMemcpy", -1);
    FAIL() << "no throw";
  } catch (const ds4::Error& e) {
    EXPECT_STREQ(e.what(), "cudaMemcpy: invalid argument (cudaErrorInvalidValue)");
  }
  EXPECT_NO_THROW(cuda_check(cudaSuccess, "cudaMemcpy", 0));
}

TEST(CudaErrors, AllocationWithoutAGpuIsAnErrorNotACrash) {
  if (!list_gpus().devices.empty()) GTEST_SKIP() << "a GPU is present";
  for (const Allocation how : {Allocation::Plain, Allocation::StreamOrdered}) {
    try {
      DeviceBuffer buffer(1024, how);
      FAIL() << "allocated without a GPU";
    } catch (const ds4::Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("cudaGetDevice: ", 0), 0u) << what;
    }
  }
}

// cuBLAS and NCCL are opened, not linked (cublas_library.h,
// nccl_library.h): both load from the toolkit the build found (no GPU
// needed) with every entry point; NCCL's version is its header's, and its
// errors become one-line ds4::Errors naming the call and NCCL's text.
TEST(CudaNccl, OpensTheToolkitsLibrariesAndNamesNcclErrors) {
  const CublasLibrary& cublas = cublas_library();
  EXPECT_NE(cublas.gemm_ex, nullptr);
  EXPECT_STREQ(cublas.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  const std::string version = nccl_version();
  EXPECT_EQ(version.rfind(std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + ".", 0), 0u) << version;
  EXPECT_NO_THROW(nccl_check(ncclSuccess, "nothing"));
  try {
    nccl_check(ncclInvalidArgument, "ncclBroadcast from GPU 0 and its partner GPU 1");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("ncclBroadcast from GPU 0 and its partner GPU 1: ", 0), 0u) << m;
    EXPECT_NE(m.find("(NCCL result 4)"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// DS4_CUDA_PROFILE's phase times (no GPU: nothing to wait for): each
// phase gets the time since the previous mark, the report puts the largest
// first with its share; unset or "0", nothing is timed.
TEST(CudaPhaseProfile, TimesPhasesBetweenMarksLargestFirst) {
  ::setenv("DS4_CUDA_PROFILE", "0", 1);
  PhaseProfile off;
  EXPECT_FALSE(off.enabled());
  off.start({});
  off.mark("x", {});
  EXPECT_EQ(off.report(), "");
  ::setenv("DS4_CUDA_PROFILE", "1", 1);
  PhaseProfile on;
  ::unsetenv("DS4_CUDA_PROFILE");
  ASSERT_TRUE(on.enabled());
  EXPECT_EQ(on.report(), "");
  on.start({});
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  on.mark("attention", {});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  on.mark("moe", {});
  on.mark("attention", {});
  const std::string r = on.report();
  EXPECT_EQ(r.rfind("attention ", 0), 0u) << r;
  EXPECT_NE(r.find(", moe "), std::string::npos) << r;
  EXPECT_NE(r.find(" ms)"), std::string::npos) << r;
}

}  // namespace
}  // namespace ds4::cuda
