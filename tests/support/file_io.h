// Whole-file reads and writes for tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::test {

// The file's bytes; nullopt when it cannot be opened or read.
std::optional<std::vector<uint8_t>> try_read_bytes(const std::filesystem::path& path);
// The file's bytes, or its text; empty when it cannot be read.
std::vector<uint8_t> read_bytes(const std::filesystem::path& path);
std::string read_text(const std::filesystem::path& path);

// Creates or replaces the file; throws ds4::Error when it cannot be written.
void write_bytes(const std::filesystem::path& path, std::span<const uint8_t> data);
void write_text(const std::filesystem::path& path, std::string_view text);

}  // namespace ds4::test
