// ds4-gguf: inspect GGUF files.
//   ds4-gguf info FILE   header, every metadata key, the tensor table, totals
// A file that fails validation prints one line "ds4-gguf: <error>" on stderr
// and exits 1; a usage error exits 2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
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
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& t = f.tensors()[i];
    rows.push_back({std::to_string(i), t.name, std::string(ds4::ggml_type_name(t.type)), shape_string(t.ne),
                    std::to_string(t.nbytes), std::to_string(t.offset)});
  }
  print_table(out, rows, {true, false, false, false, true, true});

  out += "\ntotals:       " + std::to_string(f.tensors().size()) + " tensors, " + std::to_string(f.tensor_data_bytes()) +
         " bytes of tensor data (" + human_bytes(f.tensor_data_bytes()) + "), " +
         std::to_string(f.parameter_count()) + " parameters (" + human_count(f.parameter_count()) + ")\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect GGUF files", "ds4-gguf"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ds4::version_line("ds4-gguf"), "Print the version and git commit and exit");
  std::string path;
  Limits lim;
  CLI::App* info_cmd = app.add_subcommand("info", "Print the header, metadata and tensor table of a GGUF file");
  info_cmd->add_option("file", path, "GGUF file")->required();
  info_cmd->add_option("--max-elements", lim.max_elements, "Array elements shown per key")->capture_default_str();
  info_cmd->add_option("--max-string", lim.max_string, "String bytes shown per value")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "ds4-gguf: " << e.what() << " (see ds4-gguf --help)\n";
    return 2;
  }

  try {
    if (info_cmd->parsed()) {
      const File f = File::open(path);
      std::cout << info(f, lim) << std::flush;
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
