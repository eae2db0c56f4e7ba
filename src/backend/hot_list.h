// Expert usage and hot lists (--ssd-streaming): how often each routed expert
// was selected, written by `ds4-bench --record-expert-usage FILE` from real
// traffic and read back by `--ssd-streaming-hotlist FILE` to fill the expert
// cache at start. A text file, one expert a line, most selected first:
//   # ds4 expert usage: layer expert selections
//   3 117 4410
// Lines starting with '#' and blank lines are comments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ds4::backend {

struct ExpertUse {
  uint32_t layer = 0, expert = 0;
  uint64_t count = 0;
};

// usage[layer][expert] selections -> entries of count > 0, most selected
// first (ties: lower layer, then lower expert).
std::vector<ExpertUse> rank_expert_usage(const std::vector<std::vector<uint64_t>>& usage);

// Written to a temporary file and renamed; ds4::Error naming the path.
void write_hot_list(const std::string& path, std::span<const ExpertUse> entries);

// ds4::Error naming the file and line for anything but three unsigned numbers
// a line (and for a file that cannot be read).
std::vector<ExpertUse> read_hot_list(const std::string& path);

}  // namespace ds4::backend
