#include "reference_client.h"

#include <unistd.h>

#include <openssl/evp.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gguf.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

#ifndef DS4_REF_RUNNER_PATH
#error "DS4_REF_RUNNER_PATH must be defined"
#endif
#ifndef DS4_REF_CACHE_DIR
#error "DS4_REF_CACHE_DIR must be defined"
#endif
#ifndef DS4_REF_STAMP
#error "DS4_REF_STAMP must be defined"
#endif

namespace ds4::reference {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// ---- SHA-256 over libcrypto's EVP interface ----

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) throw Error("SHA-256 init failed");
  }
  void add(const void* data, size_t size) {
    if (EVP_DigestUpdate(ctx_.get(), data, size) != 1) throw Error("SHA-256 update failed");
  }
  // Length-prefixed, so ("ab","c") and ("a","bc") hash differently.
  void add_field(std::string_view s) {
    const uint64_t n = s.size();
    add(&n, sizeof n);
    add(s.data(), s.size());
  }
  void add_field(std::span<const uint8_t> b) {
    const uint64_t n = b.size();
    add(&n, sizeof n);
    add(b.data(), b.size());
  }
  void add_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("reference: cannot open " + path);
    std::vector<char> buf(1 << 20);
    uint64_t total = 0;
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto got = static_cast<size_t>(in.gcount());
      add(buf.data(), got);
      total += got;
    }
    if (in.bad()) throw Error("reference: cannot read " + path);
    add(&total, sizeof total);
  }
  std::array<uint8_t, 32> digest() {
    std::array<uint8_t, 32> d{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), d.data(), &len) != 1 || len != d.size()) throw Error("SHA-256 final failed");
    return d;
  }
  std::string hex() {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (uint8_t b : digest()) {
      s += kHex[b >> 4];
      s += kHex[b & 15];
    }
    return s;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

std::array<uint8_t, 32> sha256_of(std::span<const uint8_t> b) {
  Sha256 h;
  h.add(b.data(), b.size());
  return h.digest();
}

// ---- small file helpers ----

using test::try_read_bytes;
using test::write_bytes;

template <typename T>
std::span<const uint8_t> as_bytes(std::span<const T> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()};
}

template <typename T>
std::vector<T> from_bytes(const Bytes& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// ---- identity of the reference: runner build, installed libraries, CPU ----

// The CPU model and flags decide which libggml-cpu-<isa>.so ggml loads, and so the
// exact float results; entries made on another machine must not be reused.
std::string cpu_identity() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line) && (model.empty() || flags.empty())) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line;
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  return model + "\n" + flags;
}

const std::string& runner_identity() {
  static const std::string id = [] {
    Sha256 h;
    h.add_field(std::string_view("ds4-ref-runner identity v1"));
    h.add_file(DS4_REF_RUNNER_PATH);
    h.add_file(DS4_REF_STAMP);
    h.add_field(cpu_identity());
    return h.hex();
  }();
  return id;
}

// ---- on-disk cache: magic, u64 size, payload, SHA-256(payload) ----

constexpr char kMagic[8] = {'D', 'S', '4', 'R', 'E', 'F', '0', '1'};

fs::path cache_dir() {
  const char* env = std::getenv("DS4_REFERENCE_CACHE");
  return (env != nullptr && *env != '\0') ? fs::path(env) : fs::path(DS4_REF_CACHE_DIR);
}

std::optional<Bytes> cache_load(const fs::path& path) {
  std::optional<Bytes> raw = try_read_bytes(path);
  if (!raw || raw->size() < sizeof kMagic + 8 + 32) return std::nullopt;
  if (std::memcmp(raw->data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  uint64_t size = 0;
  std::memcpy(&size, raw->data() + sizeof kMagic, 8);
  if (size != raw->size() - sizeof kMagic - 8 - 32) return std::nullopt;
  Bytes payload(raw->begin() + sizeof kMagic + 8, raw->end() - 32);
  if (std::memcmp(sha256_of(payload).data(), raw->data() + raw->size() - 32, 32) != 0) return std::nullopt;
  return payload;
}

// Best effort: a cache that cannot be written only costs time. Temp file + rename,
// so a concurrent reader never sees a half-written entry.
void cache_store(const fs::path& path, const Bytes& payload) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return;
  std::random_device rd;
  const fs::path tmp = path.string() + ".tmp." + std::to_string(getpid()) + "." + std::to_string(rd());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t size = payload.size();
    const auto digest = sha256_of(payload);
    out.write(kMagic, sizeof kMagic);
    out.write(reinterpret_cast<const char*>(&size), sizeof size);
    out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
    out.write(reinterpret_cast<const char*>(digest.data()), static_cast<std::streamsize>(digest.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

// ---- running the runner ----

struct Input {
  std::string option;  // e.g. "--tokens"; the bytes go to a scratch file passed after it
  Bytes bytes;
};

enum class Output { kFile, kStdout };

// Runs `mode` (or returns the cached result). `options` are plain arguments, `model`
// (may be empty) is passed with -m and hashed by content, `inputs` become scratch files.
Bytes run_cached(const std::string& mode, const std::vector<std::string>& options, const std::string& model,
                 const std::vector<Input>& inputs, Output output) {
  Sha256 key;
  key.add_field(runner_identity());
  key.add_field(mode);
  for (const auto& o : options) key.add_field(o);
  key.add_field(std::string_view(model.empty() ? "no-model" : "model"));
  if (!model.empty()) {
    // A shard set's first file stands for the whole set: hash every shard.
    std::vector<std::string> files{model};
    try {
      const gguf::File set = gguf::File::open(model);
      if (set.is_split()) {
        files.clear();
        for (const gguf::Shard& s : set.shards()) files.push_back(s.path);
      }
    } catch (const Error&) {
      // Not a file we can read: the runner will say why; its bytes key the entry.
    }
    for (const std::string& f : files) key.add_file(f);
  }
  for (const auto& in : inputs) {
    key.add_field(in.option);
    key.add_field(in.bytes);
  }
  key.add_field(std::string_view(output == Output::kFile ? "file" : "stdout"));
  const fs::path entry = cache_dir() / (mode + "-" + key.hex() + ".bin");
  if (std::optional<Bytes> hit = cache_load(entry)) return *hit;

  test::TempDir tmp("ds4-ref-");
  std::vector<std::string> args{mode};
  if (!model.empty()) {
    args.push_back("-m");
    args.push_back(fs::absolute(model).string());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const fs::path p = tmp.path() / ("in" + std::to_string(i));
    write_bytes(p, inputs[i].bytes);
    args.push_back(inputs[i].option);
    args.push_back(p.string());
  }
  const fs::path out_file = tmp.path() / "out.bin";
  if (output == Output::kFile) {
    args.push_back("--out");
    args.push_back(out_file.string());
  }
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.begin(), DS4_REF_RUNNER_PATH);
  const test::ProcessResult o = test::run_process(args);
  if (!o.ok()) {
    const std::string err = o.err_text();
    throw Error("reference runner " + mode + " failed (" + o.describe() + ")" + (err.empty() ? "" : ": " + err));
  }

  Bytes result;
  if (output == Output::kFile) {
    std::optional<Bytes> b = try_read_bytes(out_file);
    if (!b) throw Error("reference runner " + mode + " wrote no output file");
    result = std::move(*b);
  } else {
    result.assign(o.out.begin(), o.out.end());
  }
  cache_store(entry, result);
  return result;
}

Bytes tokens_json(const std::vector<int32_t>& tokens) {
  const std::string s = nlohmann::json(tokens).dump();
  return Bytes(s.begin(), s.end());
}

std::vector<int32_t> parse_ids(const Bytes& out, const std::string& mode) {
  nlohmann::json j = nlohmann::json::parse(out.begin(), out.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) throw Error("reference runner " + mode + " printed no JSON array");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer()) throw Error("reference runner " + mode + " printed a non-integer id");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

}  // namespace

std::string runner_path() { return DS4_REF_RUNNER_PATH; }

bool available() { return access(DS4_REF_RUNNER_PATH, X_OK) == 0; }

std::vector<float> logits(const std::string& model, const std::vector<int32_t>& tokens, int threads, int ubatch) {
  if (tokens.empty()) throw Error("reference::logits: no tokens");
  Bytes out = run_cached("logits", {"--threads", std::to_string(threads), "--ubatch", std::to_string(ubatch)}, model,
                         {{"--tokens", tokens_json(tokens)}}, Output::kFile);
  const size_t row_bytes = out.size() / tokens.size();
  if (out.empty() || out.size() % tokens.size() != 0 || row_bytes % sizeof(float) != 0)
    throw Error("reference::logits: output of " + std::to_string(out.size()) + " bytes is not " +
                std::to_string(tokens.size()) + " rows of f32 logits");
  return from_bytes<float>(out);
}

std::vector<int32_t> greedy(const std::string& model, const std::vector<int32_t>& tokens, int n, int threads) {
  std::vector<int32_t> ids = parse_ids(run_cached("greedy", {"-n", std::to_string(n), "--threads", std::to_string(threads)},
                                                  model, {{"--tokens", tokens_json(tokens)}}, Output::kStdout),
                                       "greedy");
  if (ids.size() != static_cast<size_t>(n))
    throw Error("reference::greedy: asked for " + std::to_string(n) + " ids, got " + std::to_string(ids.size()));
  return ids;
}

std::vector<int32_t> tokenize(const std::string& model, const std::string& text) {
  return parse_ids(run_cached("tokenize", {}, model, {{"--text-file", Bytes(text.begin(), text.end())}},
                              Output::kStdout),
                   "tokenize");
}

std::string model_info(const std::string& model, bool load_mtp) {
  std::vector<std::string> args;
  if (load_mtp) args.push_back("--load-mtp");
  const Bytes out = run_cached("model-info", args, model, {}, Output::kStdout);
  return std::string(out.begin(), out.end());
}

std::vector<float> dequantize(GgmlType type, std::span<const uint8_t> blocks, int64_t n) {
  const std::optional<uint64_t> bytes = n >= 0 ? ggml_nbytes(type, static_cast<uint64_t>(n)) : std::nullopt;
  if (!bytes || *bytes != blocks.size())
    throw Error("reference::dequantize: " + std::to_string(blocks.size()) + " bytes do not hold " +
                std::to_string(n) + " " + std::string(ggml_type_name(type)) + " elements");
  Bytes out = run_cached("dequant", {"--type", std::string(ggml_type_name(type))}, "",
                         {{"--in", Bytes(blocks.begin(), blocks.end())}}, Output::kFile);
  if (out.size() != static_cast<size_t>(n) * sizeof(float))
    throw Error("reference::dequantize: runner returned " + std::to_string(out.size()) + " bytes for " +
                std::to_string(n) + " floats");
  return from_bytes<float>(out);
}

std::vector<uint8_t> quantize(GgmlType type, std::span<const float> x, int64_t row, const float* imatrix) {
  if (row <= 0 || x.size() % static_cast<size_t>(row) != 0)
    throw Error("reference::quantize: " + std::to_string(x.size()) + " values are not whole rows of " +
                std::to_string(row));
  const std::optional<uint64_t> bytes = ggml_nbytes(type, x.size());
  if (!bytes) throw Error("reference::quantize: " + std::to_string(x.size()) + " values are not whole blocks");
  const std::span<const uint8_t> xb = as_bytes(x);
  std::vector<Input> inputs{{"--in", Bytes(xb.begin(), xb.end())}};
  if (imatrix != nullptr) {
    const std::span<const uint8_t> ib = as_bytes(std::span<const float>(imatrix, static_cast<size_t>(row)));
    inputs.push_back({"--imatrix", Bytes(ib.begin(), ib.end())});
  }
  Bytes out = run_cached("quantize", {"--type", std::string(ggml_type_name(type)), "--row", std::to_string(row)}, "",
                         inputs, Output::kFile);
  if (out.size() != *bytes)
    throw Error("reference::quantize: runner returned " + std::to_string(out.size()) + " bytes, expected " +
                std::to_string(*bytes));
  return out;
}

void quantize_model(const std::string& model, const std::string& preset, bool imatrix_from_weights,
                    const std::string& out) {
  std::vector<std::string> options{"--ftype", preset, "--threads", "2"};
  if (imatrix_from_weights) options.push_back("--imatrix-from-weights");
  const Bytes gguf = run_cached("model-quantize", options, model, {}, Output::kFile);
  write_bytes(out, gguf);
}

void quantize_model_with_imatrix(const std::string& model, const std::string& preset, const std::string& imatrix,
                                 const std::string& out) {
  const std::vector<std::string> options{"--ftype", preset, "--threads", "2"};
  const Bytes gguf =
      run_cached("model-quantize", options, model, {{"--imatrix-file", test::read_bytes(imatrix)}}, Output::kFile);
  write_bytes(out, gguf);
}

void imatrix(const std::string& model, const std::string& text, int64_t ctx, int64_t chunks, const std::string& out) {
  const std::vector<std::string> options{"--ctx", std::to_string(ctx), "--chunks", std::to_string(chunks), "-t", "2"};
  const Bytes gguf = run_cached("imatrix", options, model, {{"--text", Bytes(text.begin(), text.end())}}, Output::kFile);
  write_bytes(out, gguf);
}

}  // namespace ds4::reference
