#include "backend/cuda/quant_tables.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/iq4_values.h"
#include "quant/mxfp4.h"

namespace ds4::cuda {

namespace {

struct DeviceTables {
  DeviceBuffer memory;
  QuantTables tables;
};

// Appends `table` to `bytes` (8-byte aligned) and returns its offset.
template <typename Table>
size_t append(std::vector<uint8_t>& bytes, const Table& table) {
  const size_t offset = (bytes.size() + 7) & ~size_t{7};
  bytes.resize(offset + sizeof(table[0]) * table.size());
  std::memcpy(bytes.data() + offset, table.data(), sizeof(table[0]) * table.size());
  return offset;
}

DeviceTables upload_tables() {
  std::vector<uint8_t> bytes;
  const size_t iq2xxs = append(bytes, quant::kIq2xxsGrid);
  const size_t iq2xs = append(bytes, quant::kIq2xsGrid);
  const size_t iq2s = append(bytes, quant::kIq2sGrid);
  const size_t iq3xxs = append(bytes, quant::kIq3xxsGrid);
  const size_t iq3s = append(bytes, quant::kIq3sGrid);
  const size_t iq1 = append(bytes, quant::kIq1Grid);
  const size_t signs = append(bytes, quant::kIq2xsSigns);
  const size_t iq4nl = append(bytes, quant::kIq4nlValues);
  const size_t mxfp4 = append(bytes, quant::kMxfp4DoubledValues);

  DeviceTables out;
  out.memory = DeviceBuffer(bytes.size());
  out.memory.upload(bytes.data(), bytes.size());
  const uint8_t* base = out.memory.as<const uint8_t>();
  out.tables.iq2xxs_grid = reinterpret_cast<const uint64_t*>(base + iq2xxs);
  out.tables.iq2xs_grid = reinterpret_cast<const uint64_t*>(base + iq2xs);
  out.tables.iq2s_grid = reinterpret_cast<const uint64_t*>(base + iq2s);
  out.tables.iq3xxs_grid = reinterpret_cast<const uint32_t*>(base + iq3xxs);
  out.tables.iq3s_grid = reinterpret_cast<const uint32_t*>(base + iq3s);
  out.tables.iq1_grid = reinterpret_cast<const uint64_t*>(base + iq1);
  out.tables.signs = base + signs;
  out.tables.iq4nl_values = reinterpret_cast<const int8_t*>(base + iq4nl);
  out.tables.mxfp4_values = reinterpret_cast<const int8_t*>(base + mxfp4);
  return out;
}

}  // namespace

const QuantTables& quant_tables() {
  static std::mutex mutex;
  static std::map<int, DeviceTables> per_device;
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice", -1);
  std::lock_guard lock(mutex);
  auto it = per_device.find(device);
  if (it == per_device.end()) it = per_device.emplace(device, upload_tables()).first;
  return it->second.tables;
}

}  // namespace ds4::cuda
