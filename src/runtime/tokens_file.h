// The --tokens-file format: one JSON array of token ids, used exactly as
// given (no BOS, nothing added). Every element must be a JSON integer that
// fits in int32; the vocabulary range is checked against the model later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::runtime {

// Parses `text`; `name` (the file name) starts every error message.
// ds4::Error for invalid JSON, a value that is not an array, and an element
// that is not an integer in [INT32_MIN, INT32_MAX] (naming its index).
std::vector<int32_t> parse_tokens_json(std::string_view text, const std::string& name);

// Reads and parses the file; ds4::Error when it cannot be read.
std::vector<int32_t> read_tokens_file(const std::string& path);

// ds4::Error naming the index and value of the first id outside [0, n_vocab).
void check_token_range(const std::vector<int32_t>& tokens, uint32_t n_vocab, const std::string& name);

}  // namespace ds4::runtime
