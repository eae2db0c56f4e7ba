#include "runtime/tokens_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace ds4::runtime {

namespace {

std::string type_of(const nlohmann::json& v) {
  if (v.is_number_float()) return "a non-integer number " + v.dump();
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "not an integer";
}

}  // namespace

std::vector<int32_t> parse_tokens_json(std::string_view text, const std::string& name) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(name + ": not valid JSON (" + e.what() + ")");
  }
  if (!doc.is_array()) throw Error(name + ": expected a JSON array of token ids, found " + type_of(doc));
  std::vector<int32_t> tokens;
  tokens.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& v = doc[i];
    const std::string where = name + ": element " + std::to_string(i);
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        throw Error(where + " (" + std::to_string(u) + ") does not fit a 32-bit token id");
      tokens.push_back(static_cast<int32_t>(u));
    } else if (v.is_number_integer()) {
      const int64_t s = v.get<int64_t>();
      if (s < std::numeric_limits<int32_t>::min() || s > std::numeric_limits<int32_t>::max())
        throw Error(where + " (" + std::to_string(s) + ") does not fit a 32-bit token id");
      tokens.push_back(static_cast<int32_t>(s));
    } else {
      throw Error(where + " is " + type_of(v) + ", not an integer token id");
    }
  }
  return tokens;
}

std::vector<int32_t> read_tokens_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open tokens file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read tokens file " + path);
  return parse_tokens_json(text.str(), path);
}

void check_token_range(const std::vector<int32_t>& tokens, uint32_t n_vocab, const std::string& name) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab)
      throw Error(name + ": token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                  ", outside the model's vocabulary [0, " + std::to_string(n_vocab) + ")");
  }
}

}  // namespace ds4::runtime
