// The CUDA weight kernels as memory streams and matrix products, on GPU 0:
// first the device's read bandwidth (a plain read-and-sum kernel is not
// available to host code, so a device-to-device copy stands in: bytes read
// per second, the copy also writing as much), then for each weight type
//   - decode: the fast matrix-vector product over one matrix far beyond the
//     L2 cache (default 1 GiB of weight bytes, 7168 columns), median GB/s of
//     weight bytes over R repeats and its share of the copy's read rate;
//   - prefill: the cuBLAS product of --tokens activations with a 4096 x 7168
//     matrix, dequantization included, median TFLOP/s; for the quantized
//     types the int8 tensor-core product too (activation quantization
//     included) and its speed over cuBLAS's.
// One JSON line each. Run: ds4-bench-cuda [--bytes N[k|m|g]] [--cols C]
// [--repeats R] [--tokens T] [--types q8_0,iq2_xxs,...]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_devices.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/quant_kernels.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "quant/quant.h"
#include "version/version.h"

namespace ds4::bench {
namespace {

using cuda::DeviceBuffer;

// `rows` rows: 64 distinct rows quantized from normal floats on the host,
// repeated down the matrix on the device.
DeviceBuffer make_weights(GgmlType type, int64_t cols, uint64_t rows, uint64_t row_bytes) {
  constexpr uint64_t kDistinct = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const uint64_t distinct = std::min(kDistinct, rows);
  std::vector<float> values(static_cast<size_t>(distinct * static_cast<uint64_t>(cols)));
  for (float& v : values) v = normal(rng) * 0.02f;
  std::vector<uint8_t> host(distinct * row_bytes);
  quant::quantize_rows(type, values.data(), host.data(), static_cast<int64_t>(distinct), cols);
  DeviceBuffer w(rows * row_bytes);
  w.upload(host.data(), host.size());
  for (uint64_t done = distinct; done < rows;) {
    const uint64_t n = std::min(done, rows - done);
    cuda::cuda_check(cudaMemcpy(w.as<uint8_t>() + done * row_bytes, w.data(), n * row_bytes, cudaMemcpyDeviceToDevice),
                     "cudaMemcpy", w.device());
    done += n;
  }
  return w;
}

// Median seconds of `repeats` runs of f, timed with events after a warm-up.
template <typename F>
double median_seconds(int repeats, F&& f) {
  cudaEvent_t start, stop;
  cuda::cuda_check(cudaEventCreate(&start), "cudaEventCreate", 0);
  cuda::cuda_check(cudaEventCreate(&stop), "cudaEventCreate", 0);
  f();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    cudaEventRecord(start);
    f();
    cudaEventRecord(stop);
    cuda::cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize", 0);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    seconds.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace
}  // namespace ds4::bench

int main(int argc, char** argv) {
  using namespace ds4;
  using namespace ds4::bench;
  CLI::App app{"the CUDA weight kernels: decode GB/s and prefill TFLOP/s per weight type", "ds4-bench-cuda"};
  app.set_version_flag("--version", version_line("ds4-bench-cuda"), "print the version and git commit and exit");
  std::string bytes_arg = "1g",
              types_arg = "q8_0,mxfp4,iq2_xxs,q2_k,q4_k,q6_k,iq4_xs,q3_k,q5_k,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m,"
                          "iq4_nl,q4_0,q4_1,q5_0,q5_1,f16,bf16,f32";
  int64_t cols = 7168, tokens = 512;
  int repeats = 9;
  app.add_option("--bytes", bytes_arg, "weight bytes of the decode matrix, k/m/g suffix allowed (default 1g)");
  app.add_option("--cols", cols, "row length (default 7168)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed runs per figure (default 9)")->check(CLI::PositiveNumber);
  app.add_option("--tokens", tokens, "activations per prefill product (default 512; 0: no prefill figures)");
  app.add_option("--types", types_arg, "comma-separated weight types");
  CLI11_PARSE(app, argc, argv);
  try {
    const cuda::GpuList gpus = cuda::list_gpus();
    if (gpus.devices.empty()) throw Error(gpus.unavailable);
    cuda::cuda_check(cudaSetDevice(0), "cudaSetDevice", 0);
    const std::optional<uint64_t> want = parse_size(bytes_arg);
    if (!want) throw Error("--bytes '" + bytes_arg + "' is not a byte count (digits, then k, m or g)");
    std::printf("%s\n", nlohmann::json{{"gpu", cuda::describe(gpus.devices[0])}}.dump().c_str());

    // The read rate a weight stream can hope for.
    double copy_read_gbps = 0;
    {
      DeviceBuffer a(*want), b(*want);
      cudaMemset(a.data(), 1, *want);
      const double s = median_seconds(repeats, [&] { cudaMemcpyAsync(b.data(), a.data(), *want, cudaMemcpyDeviceToDevice); });
      copy_read_gbps = static_cast<double>(*want) / s / 1e9;
      std::printf("%s\n", nlohmann::json{{"copy_bytes", *want}, {"copy_read_gbps", copy_read_gbps},
                                         {"copy_read_plus_write_gbps", 2 * copy_read_gbps}}
                              .dump()
                              .c_str());
    }

    cuda::GemmRunner gemm(nullptr), int8(nullptr);
    int8.use_int8_tensor_cores(backend::Numerics::Default);
    std::stringstream list(types_arg);
    for (std::string name; std::getline(list, name, ',');) {
      const std::optional<GgmlType> type = ggml_type_from_name(name);
      if (!type) throw Error("--types: unknown type " + name);
      const std::optional<uint64_t> row_bytes = ggml_nbytes(*type, static_cast<uint64_t>(cols));
      if (!row_bytes) throw Error("--cols is not a whole number of " + name + " blocks");
      const uint64_t rows = std::max<uint64_t>(64, *want / *row_bytes / 64 * 64);
      nlohmann::json line{{"type", name}, {"cols", cols}};
      {
        const DeviceBuffer w = make_weights(*type, cols, rows, *row_bytes);
        std::vector<float> x(static_cast<size_t>(cols));
        std::mt19937 rng(1);
        std::normal_distribution<float> normal;
        for (float& v : x) v = normal(rng);
        DeviceBuffer dx(x.size() * 4), y(rows * 4);
        dx.upload(x.data(), x.size() * 4);
        cuda::ActQuant form;
        const bool quantized = cuda::activation_quant(*type, backend::Numerics::Default, form);
        DeviceBuffer act(quantized ? static_cast<size_t>(cuda::activation_row_bytes(form, cols)) : 0);
        if (quantized) cuda::quantize_activations(form, dx.as<float>(), act.data(), 1, cols, nullptr);
        const void* a = quantized ? act.data() : dx.data();
        const double s = median_seconds(repeats, [&] {
          cuda::matvec(*type, w.data(), static_cast<int64_t>(rows), cols, a, y.as<float>(), cuda::MatvecOrder::Fast, nullptr);
        });
        const double gbps = static_cast<double>(w.size()) / s / 1e9;
        line["decode_rows"] = rows;
        line["decode_bytes"] = w.size();
        line["decode_gbps"] = gbps;
        line["decode_share_of_copy_read"] = gbps / copy_read_gbps;
      }
      if (tokens > 0) {
        const int64_t gemm_rows = 4096;
        const DeviceBuffer w = make_weights(*type, cols, gemm_rows, *row_bytes);
        DeviceBuffer x(static_cast<size_t>(tokens * cols) * 4), y(static_cast<size_t>(tokens * gemm_rows) * 4);
        cudaMemset(x.data(), 0, x.size());
        const double s = median_seconds(repeats, [&] {
          gemm.matmul(*type, w.data(), gemm_rows, cols, x.as<float>(), tokens, y.as<float>(), gemm_rows);
        });
        line["prefill_tokens"] = tokens;
        line["prefill_rows"] = gemm_rows;
        line["prefill_tflops"] = 2.0 * static_cast<double>(tokens * gemm_rows * cols) / s / 1e12;
        line["prefill_ms"] = s * 1e3;
        if (int8.int8_for(*type)) {
          const double s8 = median_seconds(repeats, [&] {
            int8.matmul(*type, w.data(), gemm_rows, cols, x.as<float>(), tokens, y.as<float>(), gemm_rows);
          });
          line["prefill_int8_tflops"] = 2.0 * static_cast<double>(tokens * gemm_rows * cols) / s8 / 1e12;
          line["prefill_int8_ms"] = s8 * 1e3;
          line["prefill_int8_over_cublas"] = s / s8;
        }
      }
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-bench-cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
