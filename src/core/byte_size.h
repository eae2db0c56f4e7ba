// Human-readable byte counts for reports and error messages.
#pragma once

#include <cstdint>
#include <string>

namespace ds4 {

// "1.25 GiB", "812.40 MiB"; whole bytes below 1 KiB ("512 bytes").
std::string format_size(uint64_t bytes);

// "12345 bytes (12.06 KiB)"; below 1 KiB as format_size.
std::string format_bytes(uint64_t bytes);

}  // namespace ds4
