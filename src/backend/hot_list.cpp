#include "backend/hot_list.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ds4::backend {

std::vector<ExpertUse> rank_expert_usage(const std::vector<std::vector<uint64_t>>& usage) {
  std::vector<ExpertUse> out;
  for (size_t l = 0; l < usage.size(); ++l) {
    for (size_t e = 0; e < usage[l].size(); ++e) {
      if (usage[l][e] > 0) out.push_back({static_cast<uint32_t>(l), static_cast<uint32_t>(e), usage[l][e]});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const ExpertUse& a, const ExpertUse& b) { return a.count > b.count; });
  return out;
}

void write_hot_list(const std::string& path, std::span<const ExpertUse> entries) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw Error(path + ": cannot write the expert usage file");
    out << "# ds4 expert usage: layer expert selections (most selected first)\n";
    for (const ExpertUse& u : entries) out << u.layer << ' ' << u.expert << ' ' << u.count << '\n';
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(path + ": writing the expert usage file failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename the expert usage file into place");
  }
}

std::vector<ExpertUse> read_hot_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the hot list");
  std::vector<ExpertUse> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::istringstream fields(line);
    long long layer = -1, expert = -1, count = -1;
    std::string extra;
    if (!(fields >> layer >> expert >> count) || (fields >> extra) || layer < 0 || expert < 0 || count < 0 ||
        layer > 0xffff || expert > 0xffffff) {
      throw Error(path + ":" + std::to_string(n) + ": expected 'layer expert selections' (three numbers), got '" +
                  line + "'");
    }
    out.push_back({static_cast<uint32_t>(layer), static_cast<uint32_t>(expert), static_cast<uint64_t>(count)});
  }
  return out;
}

}  // namespace ds4::backend
