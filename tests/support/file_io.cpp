#include "file_io.h"

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace ds4::test {

std::optional<std::vector<uint8_t>> try_read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return b;
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  return try_read_bytes(path).value_or(std::vector<uint8_t>{});
}

std::string read_text(const std::filesystem::path& path) {
  const std::vector<uint8_t> b = read_bytes(path);
  return std::string(b.begin(), b.end());
}

void write_bytes(const std::filesystem::path& path, std::span<const uint8_t> data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) throw Error("cannot write " + path.string());
}

void write_text(const std::filesystem::path& path, std::string_view text) {
  write_bytes(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace ds4::test
