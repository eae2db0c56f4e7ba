// The main() of a fuzz target's replay build (DS4_FUZZ_REPLAY): runs every
// file of the given corpus folders (or files) through LLVMFuzzerTestOneInput
// once, so builds without libFuzzer (ASan+UBSan, plain) still exercise the
// target. Include it at the end of the target's source.
#pragma once

#ifdef DS4_FUZZ_REPLAY
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> files;
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::directory_iterator(argv[i])) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.emplace_back(argv[i]);
    }
    for (const fs::path& p : files) {
      std::ifstream in(p, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", p.c_str());
        return 1;
      }
      const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++n;
    }
  }
  if (n == 0) {
    std::fprintf(stderr, "no inputs found\n");
    return 1;
  }
  std::printf("replayed %zu inputs\n", n);
  return 0;
}
#endif
