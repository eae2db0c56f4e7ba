// ds4-gguf: inspect, split and merge GGUF files.
//   ds4-gguf info FILE             header, every metadata key, the tensor table, totals
//                                  (of the whole set when FILE is a shard set's first file)
//   ds4-gguf split [how] IN PREFIX shards PREFIX-0000k-of-0000N.gguf, as llama.cpp's gguf-split
//   ds4-gguf merge FIRST OUT       one file from a shard set
// A file that fails validation prints one line "ds4-gguf: <error>" on stderr
// and exits 1; a usage error exits 2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_split.h"
#include "version/version.h"

namespace {

using ds4::gguf::File;
using ds4::gguf::Value;
using ds4::gguf::ValueType;

struct Limits {
  size_t max_elements = 8;  // array elements shown
  size_t max_string = 60;   // string bytes shown
};

template <typename T>
std::string shortest(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// A string value on one line: quoted, escaped, cut after about max bytes.
// Bytes >= 0x80 are shown as they are in UTF-8 text and escaped otherwise.
std::string show_string(std::string_view s, size_t max) {
  const bool utf8 = ds4::gguf::is_valid_utf8(s);
  std::string out = "\"";
  size_t n = std::min(s.size(), max);
  // Do not cut a UTF-8 sequence in half.
  while (utf8 && n < s.size() && n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  if (s.size() > max) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string show_value(const Value& v, const Limits& lim) {
  switch (v.type()) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64: return std::to_string(v.as_u64());
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: return std::to_string(v.as_i64());
    case ValueType::F32: return shortest(v.as_f32());
    case ValueType::F64: return shortest(v.as_f64());
    case ValueType::BOOL: return v.as_bool() ? "true" : "false";
    case ValueType::STRING: return show_string(v.as_string(), lim.max_string);
    case ValueType::ARRAY: {
      std::string out = "[";
      uint64_t shown = 0;
      const uint64_t n = v.size();
      // Walked in order and stopped early: a long string array costs only what is shown.
      v.for_each_element([&](const Value& e) {
        if (shown == lim.max_elements) return false;
        if (shown) out += ", ";
        out += show_value(e, lim);
        ++shown;
        return true;
      });
      if (shown < n) out += ", ... " + std::to_string(n - shown) + " more";
      return out + "]";
    }
  }
  return "?";
}

// A key as quote_name escapes it (one printable line), without the quotes.
std::string show_name(std::string_view key) {
  const std::string q = ds4::gguf::quote_name(key);
  return q.substr(1, q.size() - 2);
}

std::string type_column(const Value& v) {
  if (!v.is_array()) return std::string(ds4::gguf::value_type_name(v.type()));
  return "[" + std::string(ds4::gguf::value_type_name(v.array_type())) + "]";
}

std::string shape_string(const std::vector<uint64_t>& ne) {
  std::string s;
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? " x " : "") + std::to_string(ne[i]);
  return s;
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string human_count(uint64_t n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
  return buf;
}

// Rows of cells printed with each column padded to its widest cell; columns
// flagged in `right` are right-aligned (numbers).
void print_table(std::string& out, const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right) {
  std::vector<size_t> width(right.size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line = " ";
    for (size_t c = 0; c < r.size(); ++c) {
      const bool last = c + 1 == r.size();
      const std::string pad(width[c] - r[c].size(), ' ');
      line += " ";
      if (right[c]) {
        line += pad + r[c];
      } else {
        line += r[c];
        if (!last) line += pad;
      }
      if (!last) line += " ";
    }
    out += line + "\n";
  }
}

std::string info(const File& f, const Limits& lim) {
  std::string out;
  out += "file:         " + f.path() + "\n";
  out += "version:      " + std::to_string(f.version()) + "\n";
  out += "alignment:    " + std::to_string(f.alignment()) + "\n";
  out += "data offset:  " + std::to_string(f.data_offset()) + "\n";
  out += "file size:    " + std::to_string(f.file_size()) + " bytes (" + human_bytes(f.file_size()) + ")\n";
  out += "metadata:     " + std::to_string(f.metadata().size()) + " keys\n";
  out += "tensors:      " + std::to_string(f.tensors().size()) + "\n";
  if (f.is_split()) {
    out += "shards:       " + std::to_string(f.shards().size()) + "\n";
    for (size_t i = 0; i < f.shards().size(); ++i) {
      const ds4::gguf::Shard& s = f.shards()[i];
      out += "  " + std::to_string(i + 1) + ": " + s.path + ", " + std::to_string(s.tensor_count) + " tensors, " +
             std::to_string(s.bytes.size()) + " bytes (" + human_bytes(s.bytes.size()) + ")\n";
    }
    for (const std::string& p : f.missing_shards()) out += "  absent: " + p + "\n";
  }

  out += "\nmetadata:\n";
  std::vector<std::vector<std::string>> rows{{"#", "type", "n", "key", "value"}};
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    const auto& e = f.metadata()[i];
    rows.push_back({std::to_string(i), type_column(e.value), std::to_string(e.value.is_array() ? e.value.size() : 1),
                    show_name(e.key), show_value(e.value, lim)});
  }
  print_table(out, rows, {true, false, true, false, false});

  out += "\ntensors:\n";
  rows = {{"#", "name", "type", "shape", "bytes", "offset"}};
  if (f.is_split()) rows[0].push_back("shard");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& t = f.tensors()[i];
    rows.push_back({std::to_string(i), t.name, std::string(ds4::ggml_type_name(t.type)), shape_string(t.ne),
                    std::to_string(t.nbytes), std::to_string(t.offset)});
    if (f.is_split()) rows.back().push_back(std::to_string(t.shard + 1));
  }
  print_table(out, rows, {true, false, false, false, true, true, true});

  out += "\ntotals:       " + std::to_string(f.tensors().size()) + " tensors, " + std::to_string(f.tensor_data_bytes()) +
         " bytes of tensor data (" + human_bytes(f.tensor_data_bytes()) + "), " +
         std::to_string(f.parameter_count()) + " parameters (" + human_count(f.parameter_count()) + ")\n";
  return out;
}

// "128M" / "4G": decimal megabytes and gigabytes, as gguf-split --split-max-size.
uint64_t split_size(const std::string& s) {
  uint64_t n = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), n);
  const bool unit_ok = r.ptr + 1 == s.data() + s.size() && (*r.ptr == 'M' || *r.ptr == 'G');
  if (r.ec != std::errc() || r.ptr == s.data() || !unit_ok || n == 0) {
    throw ds4::Error("--split-max-size " + s + ": expected a positive whole number followed by M or G (10^6, 10^9 bytes)");
  }
  const uint64_t unit = *r.ptr == 'M' ? 1000ull * 1000 : 1000ull * 1000 * 1000;
  if (n > std::numeric_limits<uint64_t>::max() / unit) throw ds4::Error("--split-max-size " + s + ": too large");
  return n * unit;
}

// "22" or "22,43": the layers that start a shard.
std::vector<uint32_t> layer_list(const std::string& s) {
  std::vector<uint32_t> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    uint32_t n = 0;
    const auto r = std::from_chars(s.data() + at, s.data() + comma, n);
    if (r.ec != std::errc() || r.ptr != s.data() + comma || comma == at) {
      throw ds4::Error("--split-layers " + s + ": expected layer numbers separated by commas, e.g. 22 or 15,30");
    }
    out.push_back(n);
    at = comma + 1;
  }
  return out;
}

struct SplitArgs {
  std::string input, output;
  uint32_t max_tensors = 0;
  std::string max_size, layers;
  bool no_tensor_first_split = false, dry_run = false;
};

int split(const SplitArgs& a) {
  const File f = File::open(a.input);
  ds4::gguf::SplitOptions o;
  if (!a.max_size.empty()) {
    o.by = ds4::gguf::SplitOptions::By::Size;
    o.max_bytes = split_size(a.max_size);
  } else if (!a.layers.empty()) {
    o.by = ds4::gguf::SplitOptions::By::Layers;
    o.layer_starts = layer_list(a.layers);
  } else if (a.max_tensors > 0) {
    o.max_tensors = a.max_tensors;
  }
  o.no_tensor_first_split = a.no_tensor_first_split;
  const auto plan = ds4::gguf::plan_split(f, o);
  std::cout << "n_split: " << plan.size() << "\n";
  for (size_t k = 0; k < plan.size(); ++k) {
    uint64_t bytes = 0;
    for (size_t i : plan[k]) bytes += f.tensors()[i].nbytes;
    std::string first, last;
    if (!plan[k].empty()) {
      first = f.tensors()[plan[k].front()].name;
      last = f.tensors()[plan[k].back()].name;
    }
    std::cout << ds4::gguf::shard_path(a.output, static_cast<uint32_t>(k), static_cast<uint32_t>(plan.size()))
              << ": " << plan[k].size() << " tensors, " << human_bytes(bytes)
              << (plan[k].empty() ? std::string() : ", " + first + " .. " + last) << "\n";
  }
  if (a.dry_run) return 0;
  // A split by layers is for pipeline stages, whose hosts may keep only their
  // own shards: the first records the whole set's identity for them.
  const bool by_layers = o.by == ds4::gguf::SplitOptions::By::Layers;
  for (const std::string& p : ds4::gguf::write_split(f, plan, a.output, by_layers)) std::cout << "wrote " << p << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect, split and merge GGUF files", "ds4-gguf"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ds4::version_line("ds4-gguf"), "Print the version and git commit and exit");
  std::string path;
  Limits lim;
  CLI::App* info_cmd = app.add_subcommand("info", "Print the header, metadata and tensor table of a GGUF file");
  info_cmd->add_option("file", path, "GGUF file")->required();
  info_cmd->add_option("--max-elements", lim.max_elements, "Array elements shown per key")->capture_default_str();
  info_cmd->add_option("--max-string", lim.max_string, "String bytes shown per value")->capture_default_str();
  bool this_file = false;
  info_cmd->add_flag("--this-file", this_file, "Only FILE, not the rest of its shard set");
  bool partial = false;
  info_cmd->add_flag("--partial", partial,
                     "A shard set with shards absent (a pipeline stage's host): what is here, and the absent files");

  SplitArgs sa;
  CLI::App* split_cmd = app.add_subcommand(
      "split", "Split a GGUF into PREFIX-00001-of-0000N.gguf ... (llama.cpp's gguf-split layout; both engines load it)");
  split_cmd->add_option("input", sa.input, "GGUF file (or a shard set's first file)")->required();
  split_cmd->add_option("prefix", sa.output, "Output prefix: shards are PREFIX-0000k-of-0000N.gguf")->required();
  auto* by_tensors =
      split_cmd->add_option("--split-max-tensors", sa.max_tensors, "Tensors per shard (the default way: 128)");
  auto* by_size = split_cmd->add_option("--split-max-size", sa.max_size,
                                        "Tensor bytes per shard, N followed by M or G (10^6 / 10^9, as gguf-split)");
  auto* by_layers = split_cmd->add_option(
      "--split-layers", sa.layers,
      "Layers that start a shard, e.g. 22 for stages 0:21 and 22:output (pipeline hosts)");
  by_tensors->excludes(by_size)->excludes(by_layers);
  by_size->excludes(by_layers);
  split_cmd->add_flag("--no-tensor-first-split", sa.no_tensor_first_split,
                      "The first shard holds only the metadata");
  split_cmd->add_flag("--dry-run", sa.dry_run, "Print the plan; write nothing");

  std::string merge_in, merge_out;
  CLI::App* merge_cmd = app.add_subcommand("merge", "Merge a shard set into one GGUF file");
  merge_cmd->add_option("first", merge_in, "The set's first file, PREFIX-00001-of-0000N.gguf")->required();
  merge_cmd->add_option("output", merge_out, "The GGUF file to write (must not exist)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "ds4-gguf: " << e.what() << " (see ds4-gguf --help)\n";
    return 2;
  }

  try {
    if (info_cmd->parsed()) {
      const File f = this_file ? File::open_one(path) : partial ? File::open_partial(path) : File::open(path);
      std::cout << info(f, lim) << std::flush;
    } else if (split_cmd->parsed()) {
      return split(sa);
    } else if (merge_cmd->parsed()) {
      const File f = File::open(merge_in);
      ds4::gguf::write_merged(f, merge_out);
      std::cout << "wrote " << merge_out << ": " << f.tensors().size() << " tensors from " << f.shards().size()
                << (f.shards().size() == 1 ? " file\n" : " shards\n");
    }
  } catch (const ds4::Error& e) {
    std::cerr << "ds4-gguf: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ds4-gguf: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
