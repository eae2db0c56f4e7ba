// The lookup tables of the IQ formats, MXFP4 and IQ4_NL on a GPU: copies of
// the host's format data (quant/*_tables.h), made once per device and kept
// for the process. Plain pointers, passed to kernels by value.
#pragma once

#include <cstdint>

namespace ds4::cuda {

struct QuantTables {
  const uint64_t* iq2xxs_grid = nullptr;  // 256 points of 8 bytes
  const uint64_t* iq2xs_grid = nullptr;   // 512
  const uint64_t* iq2s_grid = nullptr;    // 1024
  const uint32_t* iq3xxs_grid = nullptr;  // 256 points of 4 bytes
  const uint32_t* iq3s_grid = nullptr;    // 512
  const uint64_t* iq1_grid = nullptr;     // 2048 points of 8 int8 values -1..1
  const uint8_t* signs = nullptr;         // 128 even-parity sign bytes (kIq2xsSigns)
  const int8_t* iq4nl_values = nullptr;   // 16
  const int8_t* mxfp4_values = nullptr;   // 16, doubled E2M1
};

// The tables on the current device (uploaded on its first use; thread-safe).
// ds4::Error naming the device when they cannot be.
const QuantTables& quant_tables();

}  // namespace ds4::cuda
