// Human-readable byte counts for reports and error messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ds4 {

// "1.25 GiB", "812.40 MiB"; whole bytes below 1 KiB ("512 bytes").
std::string format_size(uint64_t bytes);

// "12345 bytes (12.06 KiB)"; below 1 KiB as format_size.
std::string format_bytes(uint64_t bytes);

// A byte count as given on a command line: whole digits, then an optional
// binary suffix k, m or g (either case): "512", "64k", "2g". nullopt for
// anything else (empty, signs, fractions, other suffixes) and for counts
// beyond uint64_t.
std::optional<uint64_t> parse_size(std::string_view text);

}  // namespace ds4
