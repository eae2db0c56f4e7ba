// ds4-ref-runner: a thin command-line driver over llama.cpp's C API (the prebuilt
// node-llama-cpp libraries), so that tests can compare our engine with llama.cpp's
// `deepseek4` graph and ggml's quant kernels in a separate process.
//
// Reference settings are fixed: flash attention off and an F32 KV cache, because
// llama.cpp's defaults compute Q·K in f16, which is neither accurate to ~1e-6 nor
// batch-invariant. The one exception is `bench`, a speed measurement, which runs
// llama.cpp at its fastest CPU settings (flash attention on, F16 KV). Logging is
// llama.cpp's errors only; every failure then ends with one line
// "ds4-ref-runner: <what>" on stderr and exit status 1.
#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#ifndef DS4_REF_BINS_DIR
#error "DS4_REF_BINS_DIR (the folder of the ggml CPU backend libraries) must be defined"
#endif

namespace {

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Errors only, as they come; continuation chunks of an error message are kept.
void log_errors_only(ggml_log_level level, const char* text, void* /*user*/) {
  static bool in_error = false;
  if (level != GGML_LOG_LEVEL_CONT) in_error = level == GGML_LOG_LEVEL_ERROR;
  if (in_error) std::fputs(text, stderr);
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Failure("cannot read " + path);
  return bytes;
}

void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Failure("cannot create " + path);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) throw Failure("cannot write " + path);
}

template <typename T>
std::vector<T> read_array(const std::string& path, const char* what) {
  std::vector<char> bytes = read_file(path);
  if (bytes.size() % sizeof(T) != 0)
    throw Failure(path + ": size " + std::to_string(bytes.size()) + " is not a whole number of " + what);
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

std::vector<llama_token> read_tokens(const std::string& path) {
  std::vector<char> text = read_file(path);
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) throw Failure(path + ": expected a JSON array of token ids");
  std::vector<llama_token> tokens;
  for (const auto& v : j) {
    if (!v.is_number_integer()) throw Failure(path + ": token ids must be integers");
    int64_t id = v.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<llama_token>::max())
      throw Failure(path + ": token id " + std::to_string(id) + " out of range");
    tokens.push_back(static_cast<llama_token>(id));
  }
  if (tokens.empty()) throw Failure(path + ": no tokens");
  return tokens;
}

ggml_type type_from_name(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* tn = ggml_type_name(static_cast<ggml_type>(t));
    if (tn == nullptr || ggml_blck_size(static_cast<ggml_type>(t)) == 0) continue;  // removed ids
    if (strcasecmp(tn, name.c_str()) == 0) return static_cast<ggml_type>(t);
  }
  throw Failure("unknown ggml type '" + name + "'");
}

struct ModelDeleter {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct ContextDeleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelDeleter>;
using ContextPtr = std::unique_ptr<llama_context, ContextDeleter>;

struct GgufDeleter {
  void operator()(gguf_context* g) const { gguf_free(g); }
};
struct GgmlContextDeleter {
  void operator()(ggml_context* c) const { ggml_free(c); }
};

struct BatchOwner {
  llama_batch batch;
  explicit BatchOwner(int32_t n) : batch(llama_batch_init(n, 0, 1)) {}
  ~BatchOwner() { llama_batch_free(batch); }
  BatchOwner(const BatchOwner&) = delete;
  BatchOwner& operator=(const BatchOwner&) = delete;
  void set(int32_t i, llama_token token, llama_pos pos, bool output) {
    batch.token[i] = token;
    batch.pos[i] = pos;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = output ? 1 : 0;
  }
};

// --gpu-backend: every layer on the GPU (0: all on the CPU).
int32_t g_gpu_layers = 0;

ModelPtr load_model(const std::string& path, bool vocab_only, bool load_mtp = false) {
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = g_gpu_layers;
  mp.vocab_only = vocab_only;
  mp.load_mtp = load_mtp;
  llama_model* model = llama_model_load_from_file(path.c_str(), mp);
  if (model == nullptr) throw Failure("llama.cpp could not load model " + path);
  return ModelPtr(model);
}

// What llama.cpp makes of a file it loads (every tensor created with its
// shape checked; with load_mtp the MTP block's too), one JSON line.
void run_model_info(const std::string& path, bool load_mtp) {
  const ModelPtr model = load_model(path, false, load_mtp);
  std::printf("{\"n_layer\":%d,\"n_layer_nextn\":%d,\"n_vocab\":%d,\"n_embd\":%d,\"n_params\":%llu}\n",
              llama_model_n_layer(model.get()), llama_model_n_layer_nextn(model.get()),
              llama_vocab_n_tokens(llama_model_get_vocab(model.get())), llama_model_n_embd(model.get()),
              static_cast<unsigned long long>(llama_model_n_params(model.get())));
}

// Debugging aid (--dump-tensors DIR): every F32 graph tensor whose name
// contains one of the filter substrings is written to DIR/<name>.<k>.f32 (k
// counts repeats of a name across ubatches), with one line per file in
// DIR/index.txt: "file ne0 ne1 ne2 ne3".
struct TensorDump {
  std::string dir;
  std::vector<std::string> filters;
  std::map<std::string, int> seen;
  std::ofstream index;
};

bool dump_tensor_cb(ggml_tensor* t, bool ask, void* user) {
  auto* d = static_cast<TensorDump*>(user);
  const std::string name = ggml_get_name(t);
  bool wanted = t->type == GGML_TYPE_F32 && d->filters.empty();
  for (const auto& f : d->filters) wanted |= t->type == GGML_TYPE_F32 && name.find(f) != std::string::npos;
  if (ask) return wanted;
  if (!wanted || !ggml_is_contiguous(t)) return true;
  const int k = d->seen[name]++;
  const std::string file = name + "." + std::to_string(k) + ".f32";
  std::ofstream out(d->dir + "/" + file, std::ios::binary);
  out.write(static_cast<const char*>(t->data), static_cast<std::streamsize>(ggml_nbytes(t)));
  d->index << file << " " << t->ne[0] << " " << t->ne[1] << " " << t->ne[2] << " " << t->ne[3] << "\n";
  return true;
}

TensorDump* g_dump = nullptr;  // set by --dump-tensors

// llama-imatrix's activation statistics (tools/imatrix/imatrix.cpp,
// IMatrixCollector::collect_imatrix), gathered through cb_eval: per weight
// matrix, the sum over tokens of x^2 per input column (ne0 values per expert or
// per 2D slice) and how many tokens went in.
struct ImatrixStats {
  std::vector<float> values;
  std::vector<int64_t> counts;  // one per expert; one per dense tensor
};

struct ImatrixCollector {
  bool process_output = false;  // also output.weight
  bool verbose = false;         // log skipped MUL_MATs to stderr
  int64_t chunk_size = 0;
  int32_t last_chunk = 0;  // llama-imatrix's m_last_chunk: the largest count / chunk_size
  std::map<std::string, ImatrixStats> stats;
  std::string error;  // set in the callback (nothing may throw through ggml), thrown after llama_decode
  std::vector<char> src1_copy, ids_copy;
  std::set<std::string> logged;
};

// The weight's name without a backend's decoration ("CUDA0#blk.0.attn_k.weight#0"),
// as llama-imatrix's filter_tensor_name.
std::string imatrix_weight_name(const char* name) {
  const char* p = std::strchr(name, '#');
  if (p == nullptr) return name;
  const char* q = std::strchr(p + 1, '#');
  return q ? std::string(p + 1, q) : std::string(p + 1);
}

void imatrix_log_skip(ImatrixCollector& c, const std::string& wname, const ggml_tensor* src1, const char* why) {
  if (!c.verbose) return;
  const std::string line = "imatrix: skipped MUL_MAT " + wname + " src1 [" + std::to_string(src1->ne[0]) + "," +
                           std::to_string(src1->ne[1]) + "," + std::to_string(src1->ne[2]) + "," +
                           std::to_string(src1->ne[3]) + "] " + ggml_type_name(src1->type) + ": " + why;
  if (c.logged.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

// The ask half of the callback: llama-imatrix's choice of matrix products.
bool imatrix_wanted(ImatrixCollector& c, const ggml_tensor* t) {
  if (t->op == GGML_OP_MUL_MAT_ID) return true;
  if (t->op != GGML_OP_MUL_MAT) return false;
  const ggml_tensor* src1 = t->src[1];
  const std::string wname = imatrix_weight_name(t->src[0]->name);
  const bool name_ok = wname.rfind("blk.", 0) == 0 || (c.process_output && wname == "output.weight");
  if (src1->ne[1] < 16) {
    if (name_ok) imatrix_log_skip(c, wname, src1, "fewer than 16 rows");
    return false;
  }
  if (src1->type != GGML_TYPE_F32) {
    if (name_ok) imatrix_log_skip(c, wname, src1, "src1 not F32");
    return false;
  }
  if (!name_ok) imatrix_log_skip(c, wname, src1, "name not blk.*");
  return name_ok;
}

bool imatrix_fail(ImatrixCollector& c, const std::string& what) {
  if (c.error.empty()) c.error = what;
  return false;  // stops this graph split; run_imatrix throws after llama_decode
}

bool all_finite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

void imatrix_note_count(ImatrixCollector& c, int64_t count) {
  c.last_chunk = std::max(c.last_chunk, static_cast<int32_t>(count / c.chunk_size));
}

// src1 of a product, from host memory or copied off its backend.
const char* imatrix_src1(ImatrixCollector& c, const ggml_tensor* src1) {
  if (ggml_backend_buffer_is_host(src1->buffer)) return static_cast<const char*>(src1->data);
  c.src1_copy.resize(ggml_nbytes(src1));
  ggml_backend_tensor_get(src1, c.src1_copy.data(), 0, c.src1_copy.size());
  return c.src1_copy.data();
}

// MUL_MAT_ID: ids [n_used, n_tokens], src1 [ne0, n_used or 1, n_tokens]; each
// (slot, token) adds the token's row to the chosen expert. Loop order (slot
// outer, token inner) is llama-imatrix's, so float sums round the same way.
bool imatrix_collect_experts(ImatrixCollector& c, const ggml_tensor* t, const std::string& wname, const char* data) {
  const ggml_tensor* src1 = t->src[1];
  const ggml_tensor* ids = t->src[2];
  const int64_t n_as = t->src[0]->ne[2], ne0 = src1->ne[0], n_tokens = src1->ne[2];
  if (ids->ne[1] != n_tokens || ggml_nrows(src1) != src1->ne[1] * n_tokens)
    return imatrix_fail(c, "imatrix: unexpected MUL_MAT_ID shapes for " + wname);
  c.ids_copy.resize(ggml_nbytes(ids));
  ggml_backend_tensor_get(ids, c.ids_copy.data(), 0, c.ids_copy.size());
  ImatrixStats& e = c.stats[wname];
  if (e.values.empty()) {
    e.values.assign(static_cast<size_t>(ne0 * n_as), 0.0f);
    e.counts.assign(static_cast<size_t>(n_as), 0);
  } else if (e.values.size() != static_cast<size_t>(ne0 * n_as) || e.counts.size() != static_cast<size_t>(n_as)) {
    return imatrix_fail(c, "imatrix: inconsistent size for " + wname);
  }
  std::vector<uint8_t> touched(static_cast<size_t>(n_as), 0);
  for (int64_t idx = 0; idx < ids->ne[0]; ++idx)
    for (int64_t row = 0; row < n_tokens; ++row) {
      int32_t ex = 0;
      std::memcpy(&ex, c.ids_copy.data() + row * ids->nb[1] + idx * ids->nb[0], sizeof ex);
      if (ex < 0 || ex >= n_as) return imatrix_fail(c, "imatrix: expert id out of range in " + wname);
      const auto* x = reinterpret_cast<const float*>(data + (idx % src1->ne[1]) * src1->nb[1] + row * src1->nb[2]);
      float* acc = e.values.data() + ex * ne0;
      e.counts[static_cast<size_t>(ex)]++;
      touched[static_cast<size_t>(ex)] = 1;
      for (int64_t j = 0; j < ne0; ++j) acc[j] += x[j] * x[j];
    }
  for (int64_t ex = 0; ex < n_as; ++ex)
    if (touched[static_cast<size_t>(ex)] && !all_finite(e.values.data() + ex * ne0, static_cast<size_t>(ne0)))
      return imatrix_fail(c, "imatrix: non-finite values in " + wname);
  for (int64_t n : e.counts) imatrix_note_count(c, n);
  return true;
}

// MUL_MAT: src0 [ne0, rows, ne2, ne3] is n_mat = ne2*ne3 matrices; src1's
// 2D slices map onto them by broadcast, as llama-imatrix maps them.
bool imatrix_collect_dense(ImatrixCollector& c, const ggml_tensor* t, const std::string& wname, const char* data) {
  const ggml_tensor* src0 = t->src[0];
  const ggml_tensor* src1 = t->src[1];
  const int64_t n_mat = src0->ne[2] * src0->ne[3], ne0 = src1->ne[0];
  ImatrixStats& e = c.stats[wname];
  // One count per dense tensor (llama-imatrix folds equal per-matrix counts into one).
  if (e.counts.size() > 1 && std::all_of(e.counts.begin(), e.counts.end(), [&](int64_t n) { return n == e.counts[0]; }))
    e.counts.resize(1);
  if (e.values.empty()) {
    e.values.assign(static_cast<size_t>(ne0 * n_mat), 0.0f);
    e.counts.assign(1, 0);
  } else if (e.values.size() != static_cast<size_t>(ne0 * n_mat)) {
    return imatrix_fail(c, "imatrix: inconsistent size for " + wname);
  }
  for (int64_t i3 = 0; i3 < src1->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < src1->ne[2]; ++i2) {
      const int64_t mat_id = (i3 % src0->ne[3]) * src0->ne[2] + (i2 % src0->ne[2]);
      float* acc = e.values.data() + mat_id * ne0;
      for (int64_t row = 0; row < src1->ne[1]; ++row) {
        const auto* x = reinterpret_cast<const float*>(data + row * src1->nb[1] + i2 * src1->nb[2] + i3 * src1->nb[3]);
        for (int64_t j = 0; j < ne0; ++j) acc[j] += x[j] * x[j];
      }
    }
  if (!all_finite(e.values.data(), e.values.size())) return imatrix_fail(c, "imatrix: non-finite values in " + wname);
  for (int64_t& n : e.counts) {
    n += ggml_nrows(src1) / n_mat;
    imatrix_note_count(c, n);
  }
  return true;
}

bool imatrix_cb(ggml_tensor* t, bool ask, void* user) {
  auto* c = static_cast<ImatrixCollector*>(user);
  if (ask) return imatrix_wanted(*c, t);
  if (!c->error.empty()) return false;
  const ggml_tensor* src1 = t->src[1];
  const std::string wname = imatrix_weight_name(t->src[0]->name);
  // llama-imatrix reads src1 as rows of floats (its MUL_MAT_ID case does not check the type).
  if (src1->type != GGML_TYPE_F32 || src1->nb[0] != ggml_element_size(src1))
    return imatrix_fail(*c, "imatrix: src1 of " + wname + " is not F32 rows");
  const char* data = imatrix_src1(*c, src1);
  return t->op == GGML_OP_MUL_MAT_ID ? imatrix_collect_experts(*c, t, wname, data)
                                     : imatrix_collect_dense(*c, t, wname, data);
}

// Attention and KV cache of a context: the reference settings (parity with our engine)
// or llama.cpp's fastest on CPU (what a speed comparison must measure against).
enum class Settings { reference, fastest };

// One sequence; reference: flash attention off, F32 K and V; fastest: flash attention on, F16 K and V.
// cb_eval, when given, replaces the --dump-tensors callback.
ContextPtr make_context(llama_model* model, uint32_t n_ctx, uint32_t n_batch, uint32_t n_ubatch, int threads,
                        Settings settings = Settings::reference, ggml_backend_sched_eval_callback cb_eval = nullptr,
                        void* cb_user = nullptr) {
  llama_context_params cp = llama_context_default_params();
  if (cb_eval) {
    cp.cb_eval = cb_eval;
    cp.cb_eval_user_data = cb_user;
  } else if (g_dump) {
    cp.cb_eval = dump_tensor_cb;
    cp.cb_eval_user_data = g_dump;
  }
  cp.n_ctx = n_ctx;
  cp.n_batch = n_batch;
  cp.n_ubatch = n_ubatch;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  const bool fastest = settings == Settings::fastest;
  // On a GPU llama.cpp decides itself (auto: on wherever its CUDA kernels
  // take the graph's attention; they have head size 512), so that a graph
  // its kernels do not take falls back instead of running the op on the CPU.
  cp.flash_attn_type = !fastest           ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                       : g_gpu_layers > 0 ? LLAMA_FLASH_ATTN_TYPE_AUTO
                                          : LLAMA_FLASH_ATTN_TYPE_ENABLED;
  cp.type_k = fastest ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.type_v = fastest ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) throw Failure("llama.cpp could not create a context");
  return ContextPtr(ctx);
}

void check_tokens(const llama_model* model, const std::vector<llama_token>& tokens) {
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= n_vocab)
      throw Failure("token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                    " is not below the vocabulary size " + std::to_string(n_vocab));
}

void decode(llama_context* ctx, llama_batch batch) {
  int32_t rc = llama_decode(ctx, batch);
  if (rc != 0) throw Failure("llama_decode failed with status " + std::to_string(rc));
}

int32_t argmax(const float* row, int32_t n) {
  // First maximum wins, so ties resolve the same way in every implementation.
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_logits(const std::string& model_path, const std::string& tokens_path, const std::string& out_path,
                int threads, int ubatch, bool timings) {
  std::vector<llama_token> tokens = read_tokens(tokens_path);
  const auto t_load = std::chrono::steady_clock::now();
  ModelPtr model = load_model(model_path, false);
  const double load_s = seconds_since(t_load);
  check_tokens(model.get(), tokens);
  const auto n = static_cast<uint32_t>(tokens.size());
  const uint32_t n_ubatch = ubatch > 0 ? static_cast<uint32_t>(ubatch) : n;
  ContextPtr ctx = make_context(model.get(), n, n, n_ubatch, threads);

  BatchOwner b(static_cast<int32_t>(n));
  for (uint32_t i = 0; i < n; ++i) b.set(static_cast<int32_t>(i), tokens[i], static_cast<llama_pos>(i), true);
  b.batch.n_tokens = static_cast<int32_t>(n);
  const auto t_decode = std::chrono::steady_clock::now();
  decode(ctx.get(), b.batch);
  const double decode_s = seconds_since(t_decode);

  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model.get()));
  std::vector<float> all(static_cast<size_t>(n) * static_cast<size_t>(n_vocab));
  for (uint32_t i = 0; i < n; ++i) {
    const float* row = llama_get_logits_ith(ctx.get(), static_cast<int32_t>(i));
    if (row == nullptr) throw Failure("llama.cpp returned no logits for position " + std::to_string(i));
    std::memcpy(all.data() + static_cast<size_t>(i) * n_vocab, row, sizeof(float) * n_vocab);
  }
  write_file(out_path, all.data(), all.size() * sizeof(float));
  if (timings) std::cout << nlohmann::json{{"load_s", load_s}, {"decode_s", decode_s}, {"n_tokens", n}}.dump() << '\n';
}

void run_greedy(const std::string& model_path, const std::string& tokens_path, int n_generate, int threads) {
  if (n_generate < 1) throw Failure("-n must be at least 1");
  std::vector<llama_token> prompt = read_tokens(tokens_path);
  ModelPtr model = load_model(model_path, false);
  check_tokens(model.get(), prompt);
  const auto n_prompt = static_cast<uint32_t>(prompt.size());
  ContextPtr ctx = make_context(model.get(), n_prompt + static_cast<uint32_t>(n_generate), n_prompt, n_prompt, threads);
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model.get()));

  {
    BatchOwner b(static_cast<int32_t>(n_prompt));
    for (uint32_t i = 0; i < n_prompt; ++i)
      b.set(static_cast<int32_t>(i), prompt[i], static_cast<llama_pos>(i), i + 1 == n_prompt);
    b.batch.n_tokens = static_cast<int32_t>(n_prompt);
    decode(ctx.get(), b.batch);
  }
  nlohmann::json out = nlohmann::json::array();
  BatchOwner step(1);
  for (int k = 0; k < n_generate; ++k) {
    const float* row = llama_get_logits_ith(ctx.get(), -1);
    if (row == nullptr) throw Failure("llama.cpp returned no logits at generation step " + std::to_string(k));
    const llama_token next = argmax(row, n_vocab);
    out.push_back(next);
    if (k + 1 == n_generate) break;
    step.set(0, next, static_cast<llama_pos>(n_prompt + static_cast<uint32_t>(k)), true);
    step.batch.n_tokens = 1;
    decode(ctx.get(), step.batch);
  }
  std::cout << out.dump() << '\n';
}

void check_finite(const float* row, int32_t n, const std::string& what) {
  for (int32_t i = 0; i < n; ++i)
    if (!std::isfinite(row[i])) throw Failure(what + ": logit " + std::to_string(i) + " is not finite");
}

// Speed at llama.cpp's fastest CPU settings: the prompt in one llama_decode (ubatches of
// `ubatch`), only the last position's logits; then `n_generate` greedy single-token
// decodes. Timed with the wall clock: prefill = that one llama_decode; generation = each
// step's llama_decode plus its argmax. Prints one JSON line. `warmup`: the prompt is
// decoded once untimed first and the KV cache cleared.
void run_bench(const std::string& model_path, const std::string& tokens_path, int n_generate, int threads,
               int ubatch, bool warmup) {
  std::vector<llama_token> prompt = read_tokens(tokens_path);
  const auto t_load = std::chrono::steady_clock::now();
  ModelPtr model = load_model(model_path, false);
  const double load_s = seconds_since(t_load);
  check_tokens(model.get(), prompt);
  const auto n_prompt = static_cast<uint32_t>(prompt.size());
  const auto n_gen = static_cast<uint32_t>(n_generate);
  const uint32_t n_ubatch = std::min(static_cast<uint32_t>(ubatch), n_prompt);
  ContextPtr ctx = make_context(model.get(), n_prompt + n_gen + 16, n_prompt, n_ubatch, threads, Settings::fastest);
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model.get()));

  BatchOwner b(static_cast<int32_t>(n_prompt));
  for (uint32_t i = 0; i < n_prompt; ++i)
    b.set(static_cast<int32_t>(i), prompt[i], static_cast<llama_pos>(i), i + 1 == n_prompt);
  b.batch.n_tokens = static_cast<int32_t>(n_prompt);
  if (warmup) {
    // As llama-bench's warm-up run: the same prompt once, untimed, then the
    // KV cache cleared.
    decode(ctx.get(), b.batch);
    llama_memory_clear(llama_get_memory(ctx.get()), true);
  }
  const auto t_prefill = std::chrono::steady_clock::now();
  decode(ctx.get(), b.batch);
  const float* row = llama_get_logits_ith(ctx.get(), -1);
  if (row == nullptr) throw Failure("llama.cpp returned no logits after the prompt");
  llama_token next = argmax(row, n_vocab);
  const double prefill_s = seconds_since(t_prefill);
  check_finite(row, n_vocab, "prefill");

  BatchOwner step(1);
  double gen_s = 0;
  for (uint32_t k = 0; k < n_gen; ++k) {
    step.set(0, next, static_cast<llama_pos>(n_prompt + k), true);
    step.batch.n_tokens = 1;
    const auto t_step = std::chrono::steady_clock::now();
    decode(ctx.get(), step.batch);
    row = llama_get_logits_ith(ctx.get(), -1);
    if (row == nullptr) throw Failure("llama.cpp returned no logits at generation step " + std::to_string(k));
    next = argmax(row, n_vocab);
    gen_s += seconds_since(t_step);
  }
  if (n_gen > 0) check_finite(row, n_vocab, "last generation step");

  nlohmann::ordered_json out = {{"prefill_tokens", n_prompt},
                                {"prefill_s", prefill_s},
                                {"prefill_tps", n_prompt / prefill_s},
                                {"gen_tokens", n_gen},
                                {"gen_s", gen_s},
                                {"gen_tps", n_gen > 0 ? n_gen / gen_s : 0.0},
                                {"load_s", load_s}};
  std::cout << out.dump() << '\n';
}

void run_tokenize(const std::string& model_path, const std::string& text_path) {
  std::vector<char> text = read_file(text_path);
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) throw Failure(text_path + " is too large");
  ModelPtr model = load_model(model_path, true);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());
  const auto len = static_cast<int32_t>(text.size());
  std::vector<llama_token> ids(text.size() + 16);
  int32_t n = llama_tokenize(vocab, text.data(), len, ids.data(), static_cast<int32_t>(ids.size()), false, true);
  if (n < 0 && n != std::numeric_limits<int32_t>::min()) {
    ids.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), len, ids.data(), static_cast<int32_t>(ids.size()), false, true);
  }
  if (n < 0) throw Failure("llama_tokenize failed on " + text_path);
  ids.resize(static_cast<size_t>(n));
  std::cout << nlohmann::json(ids).dump() << '\n';
}

// common_tokenize(ctx, text, add_special = true, parse_special = false), llama-imatrix's call.
std::vector<llama_token> tokenize_with_bos(const llama_vocab* vocab, const std::string& text) {
  const auto len = static_cast<int32_t>(text.size());
  std::vector<llama_token> ids(text.size() + 2);
  int32_t n = llama_tokenize(vocab, text.data(), len, ids.data(), static_cast<int32_t>(ids.size()), true, false);
  if (n < 0 && n != std::numeric_limits<int32_t>::min()) {
    ids.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), len, ids.data(), static_cast<int32_t>(ids.size()), true, false);
  }
  if (n < 0) throw Failure("llama_tokenize failed");
  ids.resize(static_cast<size_t>(n));
  return ids;
}

struct ImatrixOptions {
  std::string model, text, out;
  int ctx = 512, batch = 2048, ubatch = 512, chunks = -1, threads = 2;
  bool process_output = false, verbose = false;
};

// llama-imatrix's compute_imatrix with one sequence: per chunk of ctx tokens a
// cleared KV cache, batches of n_batch tokens at positions 0.., all outputs on
// (so the last layer's FFN and output.weight see every token), and the chunk's
// first token replaced by BOS when the vocabulary adds one.
void imatrix_decode_chunks(llama_context* ctx, const std::vector<llama_token>& tokens, int n_chunk, int n_ctx,
                           int n_batch, const ImatrixCollector& c) {
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  const bool add_bos = llama_vocab_get_add_bos(vocab);
  BatchOwner b(n_batch);
  for (int i = 0; i < n_chunk; ++i) {
    llama_memory_clear(llama_get_memory(ctx), true);
    for (int start = 0; start < n_ctx; start += n_batch) {
      const int size = std::min(n_ctx - start, n_batch);
      for (int k = 0; k < size; ++k) {
        const int pos = start + k;
        const llama_token tok = add_bos && pos == 0 ? llama_vocab_bos(vocab) : tokens[static_cast<size_t>(i * n_ctx + pos)];
        b.set(k, tok, pos, true);
      }
      b.batch.n_tokens = size;
      decode(ctx, b.batch);
      if (!c.error.empty()) throw Failure(c.error);
    }
  }
}

// llama-imatrix's save_imatrix (GGUF form): entries in name order, NAME.in_sum2
// [ne0, n_mat] and NAME.counts [1, n_mat], both F32.
void write_imatrix_gguf(const ImatrixCollector& c, const std::string& dataset, const std::string& path) {
  size_t data_size = 0;
  for (const auto& [name, e] : c.stats) {
    data_size += GGML_PAD(ggml_tensor_overhead() + sizeof(float) * e.values.size(), GGML_MEM_ALIGN);
    data_size += GGML_PAD(ggml_tensor_overhead() + sizeof(float) * e.counts.size(), GGML_MEM_ALIGN);
  }
  const ggml_init_params ip{std::max<size_t>(data_size, GGML_MEM_ALIGN), nullptr, /*no_alloc=*/false};
  std::unique_ptr<ggml_context, GgmlContextDeleter> ctx(ggml_init(ip));
  std::unique_ptr<gguf_context, GgufDeleter> g(gguf_init_empty());
  if (!ctx || !g) throw Failure("cannot allocate the imatrix GGUF");
  const char* datasets[] = {dataset.c_str()};
  gguf_set_val_str(g.get(), "general.type", "imatrix");
  gguf_set_arr_str(g.get(), "imatrix.datasets", datasets, 1);
  gguf_set_val_u32(g.get(), "imatrix.chunk_count", static_cast<uint32_t>(c.last_chunk));
  gguf_set_val_u32(g.get(), "imatrix.chunk_size", static_cast<uint32_t>(c.chunk_size));
  for (const auto& [name, e] : c.stats) {  // std::map: the order of llama-imatrix's std::sort
    const auto nval = static_cast<int64_t>(e.values.size()), nmat = static_cast<int64_t>(e.counts.size());
    if (nval == 0 || nmat == 0) continue;
    ggml_tensor* sums = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, nval / nmat, nmat);
    ggml_tensor* counts = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 1, nmat);
    ggml_format_name(sums, "%s.in_sum2", name.c_str());
    ggml_format_name(counts, "%s.counts", name.c_str());
    std::memcpy(sums->data, e.values.data(), sizeof(float) * e.values.size());
    for (int64_t j = 0; j < nmat; ++j) static_cast<float*>(counts->data)[j] = static_cast<float>(e.counts[static_cast<size_t>(j)]);
    gguf_add_tensor(g.get(), sums);
    gguf_add_tensor(g.get(), counts);
  }
  if (!gguf_write_to_file(g.get(), path.c_str(), false)) throw Failure("cannot write " + path);
}

void run_imatrix(const ImatrixOptions& o) {
  std::vector<char> bytes = read_file(o.text);
  std::string text(bytes.begin(), bytes.end());
  if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama.cpp's -f reads a prompt file
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) throw Failure(o.text + " is too large");
  ModelPtr model = load_model(o.model, false);
  const std::vector<llama_token> tokens = tokenize_with_bos(llama_model_get_vocab(model.get()), text);
  if (tokens.size() < 2 * static_cast<size_t>(o.ctx))
    throw Failure(o.text + " tokenizes to " + std::to_string(tokens.size()) + " tokens; a context of " +
                  std::to_string(o.ctx) + " needs at least " + std::to_string(2 * o.ctx));
  const int n_chunk_max = static_cast<int>(tokens.size() / static_cast<size_t>(o.ctx));
  const int n_chunk = o.chunks < 0 ? n_chunk_max : std::min(o.chunks, n_chunk_max);
  const int n_batch = std::min(o.batch, o.ctx);
  ImatrixCollector c;
  c.process_output = o.process_output;
  c.verbose = o.verbose;
  c.chunk_size = o.ctx;
  ContextPtr ctx = make_context(model.get(), static_cast<uint32_t>(o.ctx), static_cast<uint32_t>(n_batch),
                                static_cast<uint32_t>(std::min(o.ubatch, o.ctx)), o.threads, Settings::reference,
                                imatrix_cb, &c);
  imatrix_decode_chunks(ctx.get(), tokens, n_chunk, o.ctx, n_batch, c);
  write_imatrix_gguf(c, o.text, o.out);
  std::cout << nlohmann::json{{"n_tokens", tokens.size()}, {"n_chunks", n_chunk}, {"entries", c.stats.size()}}.dump()
            << '\n';
}

void run_dequant(const std::string& type_name, const std::string& in_path, const std::string& out_path) {
  const ggml_type type = type_from_name(type_name);
  const ggml_type_traits* traits = ggml_get_type_traits(type);
  if (traits->to_float == nullptr) throw Failure(std::string("ggml has no to_float for ") + traits->type_name);
  std::vector<char> blocks = read_file(in_path);
  if (blocks.size() % traits->type_size != 0)
    throw Failure(in_path + ": size " + std::to_string(blocks.size()) + " is not a whole number of " +
                  traits->type_name + " blocks (" + std::to_string(traits->type_size) + " bytes)");
  const int64_t n = static_cast<int64_t>(blocks.size() / traits->type_size) * traits->blck_size;
  std::vector<float> out(static_cast<size_t>(n));
  traits->to_float(blocks.data(), out.data(), n);
  write_file(out_path, out.data(), out.size() * sizeof(float));
}

void run_quantize(const std::string& type_name, const std::string& in_path, const std::string& out_path, int64_t row,
                  const std::string& imatrix_path) {
  const ggml_type type = type_from_name(type_name);
  const ggml_type_traits* traits = ggml_get_type_traits(type);
  std::vector<float> x = read_array<float>(in_path, "f32 values");
  if (row <= 0 || row % traits->blck_size != 0)
    throw Failure("--row " + std::to_string(row) + " is not a positive multiple of the " + traits->type_name +
                  " block size " + std::to_string(traits->blck_size));
  if (x.empty() || static_cast<int64_t>(x.size()) % row != 0)
    throw Failure(in_path + ": " + std::to_string(x.size()) + " values are not a whole number of rows of " +
                  std::to_string(row));
  std::vector<float> imatrix;
  if (!imatrix_path.empty()) {
    imatrix = read_array<float>(imatrix_path, "f32 values");
    if (static_cast<int64_t>(imatrix.size()) != row)
      throw Failure(imatrix_path + ": expected " + std::to_string(row) + " importance values, got " +
                    std::to_string(imatrix.size()));
  }
  // ggml aborts instead of failing when an imatrix-only type gets none; say so first.
  if (imatrix.empty() && ggml_quantize_requires_imatrix(type))
    throw Failure(std::string("ggml cannot quantize ") + traits->type_name + " without --imatrix");
  const int64_t nrows = static_cast<int64_t>(x.size()) / row;
  std::vector<uint8_t> out(ggml_row_size(type, row) * static_cast<size_t>(nrows));
  ggml_quantize_init(type);
  const size_t written = ggml_quantize_chunk(type, x.data(), out.data(), 0, nrows, row,
                                             imatrix.empty() ? nullptr : imatrix.data());
  if (written != out.size())
    throw Failure("ggml_quantize_chunk wrote " + std::to_string(written) + " bytes, expected " +
                  std::to_string(out.size()));
  write_file(out_path, out.data(), out.size());
}


// ---- model-quantize: llama.cpp's own llama_model_quantize, as llama-quantize runs it ----

// llama-quantize's preset names (tools/quantize: the QUANT_OPTIONS table).
llama_ftype ftype_from_name(const std::string& name) {
  static const std::map<std::string, llama_ftype> kPresets = {
      {"F32", LLAMA_FTYPE_ALL_F32},          {"F16", LLAMA_FTYPE_MOSTLY_F16},
      {"BF16", LLAMA_FTYPE_MOSTLY_BF16},     {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
      {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},     {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
      {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},     {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
      {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},     {"Q2_K_S", LLAMA_FTYPE_MOSTLY_Q2_K_S},
      {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S}, {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
      {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L}, {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
      {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
      {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
      {"IQ1_S", LLAMA_FTYPE_MOSTLY_IQ1_S},   {"IQ1_M", LLAMA_FTYPE_MOSTLY_IQ1_M},
      {"IQ2_XXS", LLAMA_FTYPE_MOSTLY_IQ2_XXS}, {"IQ2_XS", LLAMA_FTYPE_MOSTLY_IQ2_XS},
      {"IQ2_S", LLAMA_FTYPE_MOSTLY_IQ2_S},   {"IQ2_M", LLAMA_FTYPE_MOSTLY_IQ2_M},
      {"IQ3_XXS", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"IQ3_XS", LLAMA_FTYPE_MOSTLY_IQ3_XS},
      {"IQ3_S", LLAMA_FTYPE_MOSTLY_IQ3_S},   {"IQ3_M", LLAMA_FTYPE_MOSTLY_IQ3_M},
      {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
      {"MXFP4_MOE", LLAMA_FTYPE_MOSTLY_MXFP4_MOE},
  };
  std::string upper = name;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const auto it = kPresets.find(upper);
  if (it == kPresets.end()) {
    std::string known;
    for (const auto& [n, f] : kPresets) known += (known.empty() ? "" : ", ") + n;
    throw Failure("unknown quantization preset '" + name + "'; known: " + known);
  }
  return it->second;
}

// An importance matrix in llama.cpp's in-memory form (one entry per weight
// matrix, ne[0] values per expert), taken from the weights themselves: the sum
// over rows of w^2 per column. llama-imatrix measures activations instead;
// this stands in for one where llama.cpp requires an imatrix (IQ1/IQ2 presets),
// deterministic and tied to the file.
struct WeightImportance {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  std::vector<llama_model_imatrix_data> entries;  // null-terminated, points into the above
};

WeightImportance importance_from_weights(const std::string& path) {
  ggml_context* raw_ctx = nullptr;
  const gguf_init_params gp{/*no_alloc=*/false, &raw_ctx};
  std::unique_ptr<gguf_context, GgufDeleter> g(gguf_init_from_file(path.c_str(), gp));
  std::unique_ptr<ggml_context, GgmlContextDeleter> ctx(raw_ctx);
  if (!g || !ctx) throw Failure("cannot read GGUF " + path);
  WeightImportance imp;
  for (int64_t i = 0; i < gguf_get_n_tensors(g.get()); ++i) {
    const char* name = gguf_get_tensor_name(g.get(), i);
    const ggml_tensor* t = ggml_get_tensor(ctx.get(), name);
    const std::string n(name);
    if (t == nullptr || ggml_n_dims(t) < 2 || n.size() < 7 || n.compare(n.size() - 7, 7, ".weight") != 0) continue;
    const ggml_type_traits* traits = ggml_get_type_traits(t->type);
    // F32 has no to_float (nothing to convert); integer tables (hash routing) have none either.
    if (t->type != GGML_TYPE_F32 && traits->to_float == nullptr) continue;
    const int64_t cols = t->ne[0], rows = t->ne[1], experts = t->ne[2] * t->ne[3];
    std::vector<float> sums(static_cast<size_t>(cols * experts), 0.0f), row(static_cast<size_t>(cols));
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t r = 0; r < rows; ++r) {
        const char* src = static_cast<const char*>(t->data) + e * t->nb[2] + r * t->nb[1];
        if (t->type == GGML_TYPE_F32) {
          std::memcpy(row.data(), src, row.size() * sizeof(float));
        } else {
          traits->to_float(src, row.data(), cols);
        }
        float* s = sums.data() + e * cols;
        for (int64_t c = 0; c < cols; ++c) s[c] += row[static_cast<size_t>(c)] * row[static_cast<size_t>(c)];
      }
    imp.names.push_back(n);
    imp.values.push_back(std::move(sums));
  }
  for (size_t i = 0; i < imp.names.size(); ++i)
    imp.entries.push_back({imp.names[i].c_str(), imp.values[i].data(), imp.values[i].size()});
  imp.entries.push_back({nullptr, nullptr, 0});
  return imp;
}

// An imatrix file read as llama-quantize reads it (common_imatrix_load, then
// load_imatrix): GGUF NAME.in_sum2 / NAME.counts, the values sums / count per
// matrix (1 where the count is 0; counts rounded to integers); a legacy .dat
// (entries of name, ncall, nval, sums), the values sums / ncall.
WeightImportance importance_from_file(const std::string& path) {
  WeightImportance imp;
  ggml_context* raw_ctx = nullptr;
  const gguf_init_params gp{/*no_alloc=*/false, &raw_ctx};
  std::unique_ptr<gguf_context, GgufDeleter> g(gguf_init_from_file(path.c_str(), gp));
  std::unique_ptr<ggml_context, GgmlContextDeleter> ctx(raw_ctx);
  if (g) {
    std::map<std::string, std::pair<const ggml_tensor*, const ggml_tensor*>> found;
    for (int64_t i = 0; i < gguf_get_n_tensors(g.get()); ++i) {
      std::string n = gguf_get_tensor_name(g.get(), i);
      const ggml_tensor* t = ggml_get_tensor(ctx.get(), n.c_str());
      if (n.size() > 8 && n.compare(n.size() - 8, 8, ".in_sum2") == 0) found[n.substr(0, n.size() - 8)].first = t;
      if (n.size() > 7 && n.compare(n.size() - 7, 7, ".counts") == 0) found[n.substr(0, n.size() - 7)].second = t;
    }
    for (const auto& [name, st] : found) {
      if (!st.first || !st.second || st.first->type != GGML_TYPE_F32 || st.second->type != GGML_TYPE_F32)
        throw Failure(path + ": bad imatrix entry " + name);
      const float* sums = static_cast<const float*>(st.first->data);
      const float* counts = static_cast<const float*>(st.second->data);
      const int64_t nsums = ggml_nelements(st.first), ncounts = ggml_nelements(st.second), ne0 = nsums / ncounts;
      std::vector<float> v(static_cast<size_t>(nsums));
      for (int64_t j = 0; j < ncounts; ++j) {
        const auto count = static_cast<float>(std::lround(counts[j]));
        for (int64_t i = 0; i < ne0; ++i) v[static_cast<size_t>(j * ne0 + i)] = count > 0.0f ? sums[j * ne0 + i] / count : 1.0f;
      }
      imp.names.push_back(name);
      imp.values.push_back(std::move(v));
    }
  } else {
    std::ifstream in(path, std::ios::binary);
    int32_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&n), 4) || n < 1) throw Failure(path + ": not an imatrix file");
    for (int32_t i = 0; i < n; ++i) {
      int32_t len = 0, ncall = 0, nval = 0;
      in.read(reinterpret_cast<char*>(&len), 4);
      std::string name(static_cast<size_t>(std::max(0, len)), '\0');
      in.read(name.data(), len);
      in.read(reinterpret_cast<char*>(&ncall), 4);
      in.read(reinterpret_cast<char*>(&nval), 4);
      std::vector<float> v(static_cast<size_t>(std::max(0, nval)));
      in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
      if (!in) throw Failure(path + ": truncated legacy imatrix");
      if (ncall > 0)
        for (float& x : v) x = x / static_cast<float>(static_cast<int64_t>(ncall));
      imp.names.push_back(name);
      imp.values.push_back(std::move(v));
    }
  }
  for (size_t i = 0; i < imp.names.size(); ++i)
    imp.entries.push_back({imp.names[i].c_str(), imp.values[i].data(), imp.values[i].size()});
  imp.entries.push_back({nullptr, nullptr, 0});
  return imp;
}

void run_model_quantize(const std::string& in_path, const std::string& out_path, const std::string& preset,
                        bool imatrix_from_weights, const std::string& imatrix_file, bool allow_requantize,
                        int threads) {
  llama_model_quantize_params params = llama_model_quantize_default_params();
  params.ftype = ftype_from_name(preset);
  params.nthread = threads;
  params.allow_requantize = allow_requantize;
  WeightImportance imp;
  if (imatrix_from_weights) {
    imp = importance_from_weights(in_path);
    params.imatrix = imp.entries.data();
  } else if (!imatrix_file.empty()) {
    imp = importance_from_file(imatrix_file);
    params.imatrix = imp.entries.data();
  }
  // llama_model_quantize reports most problems by throwing inside and
  // returning non-zero after logging them as errors (printed above).
  if (llama_model_quantize(in_path.c_str(), out_path.c_str(), &params) != 0)
    throw Failure("llama_model_quantize " + preset + " of " + in_path + " failed");
}

// The folder of the prebuilt libraries: the one this build was configured
// with, or DS4_REF_BINS where they were carried elsewhere (a GPU machine;
// LD_LIBRARY_PATH then finds libllama there too).
std::string bins_dir() {
  const char* env = std::getenv("DS4_REF_BINS");
  return env != nullptr && *env != '\0' ? env : DS4_REF_BINS_DIR;
}

// The CPU library ggml's own choice would load (the best ggml_backend_score
// of the libggml-cpu-*.so files), but for its sapphirerapids build: that
// one registers AMX buffers, and on DeepSeek V4 graphs the scheduler then
// aborts (ggml-backend.cpp: GGML_ASSERT(*cur_backend_id != -1), seen on an
// AMX Xeon, 2026-12-07). The next best runs the same AVX-512 kernels.
std::string best_cpu_library() {
  std::string best;
  int best_score = 0;
  for (const auto& entry : std::filesystem::directory_iterator(bins_dir())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libggml-cpu-", 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".so") != 0) continue;
    if (name == "libggml-cpu-sapphirerapids.so") continue;
    void* handle = dlopen(entry.path().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) continue;
    using Score = int (*)();
    const auto score = reinterpret_cast<Score>(dlsym(handle, "ggml_backend_score"));
    const int s = score != nullptr ? score() : 0;
    dlclose(handle);
    if (s > best_score) {
      best_score = s;
      best = entry.path().string();
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"llama.cpp reference runner (flash attention off, F32 KV cache; bench: fastest settings)",
               "ds4-ref-runner"};
  app.require_subcommand(1);

  std::string model, tokens, out, text_file, type_name, in, imatrix, cpu_variant;
  int threads = 2, ubatch = 0, n_generate = 0;
  int64_t row = 0;
  // ggml loads the CPU library built for the best level this CPU runs; naming
  // one (haswell = AVX2, FMA, F16C) runs llama.cpp at that level on any CPU
  // that has it, for side-by-side runs at one ISA level.
  app.add_option("--cpu-variant", cpu_variant,
                 "load only libggml-cpu-NAME.so (haswell: the AVX2 build; default: the best for this CPU but the "
                 "AMX build, sapphirerapids, which aborts on these graphs)");
  // llama.cpp on a GPU: its CUDA backend built from the same source
  // (scripts/build-llama-cuda.sh), every layer offloaded.
  std::string gpu_backend;
  app.add_option("--gpu-backend", gpu_backend,
                 "load this ggml GPU backend (libggml-cuda.so from scripts/build-llama-cuda.sh) and put every layer "
                 "on its first GPU");

  auto* logits = app.add_subcommand("logits", "all-position logits, f32 [n_tokens][n_vocab]");
  logits->add_option("-m,--model", model, "GGUF model")->required();
  logits->add_option("--tokens", tokens, "JSON array of token ids, used as given")->required();
  logits->add_option("--out", out, "output file")->required();
  logits->add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);
  logits->add_option("--ubatch", ubatch, "physical batch size (0 = all tokens at once)")->check(CLI::NonNegativeNumber);
  std::string dump_dir, dump_filter;
  logits->add_option("--dump-tensors", dump_dir, "debug: write F32 graph tensors to this existing folder");
  logits->add_option("--dump-filter", dump_filter, "debug: comma-separated name substrings to dump (default all)");
  bool timings = false;
  logits->add_flag("--timings", timings, "print load and decode seconds as JSON on stdout");

  auto* greedy = app.add_subcommand("greedy", "greedy continuation, printed as a JSON array of ids");
  greedy->add_option("-m,--model", model, "GGUF model")->required();
  greedy->add_option("--tokens", tokens, "JSON array of prompt token ids")->required();
  greedy->add_option("-n", n_generate, "tokens to generate")->required()->check(CLI::PositiveNumber);
  greedy->add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);

  auto* bench = app.add_subcommand("bench", "prefill and decode speed at llama.cpp's fastest CPU settings "
                                               "(flash attention on, F16 KV), one JSON line");
  bench->add_option("-m,--model", model, "GGUF model")->required();
  bench->add_option("--tokens", tokens, "JSON array of prompt token ids, prefilled in one llama_decode")->required();
  bench->add_option("--gen", n_generate, "tokens to decode one at a time, greedily")
      ->required()
      ->check(CLI::NonNegativeNumber);
  bench->add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);
  int bench_ubatch = 512;
  bench->add_option("--ubatch", bench_ubatch, "physical batch size of the prefill")->check(CLI::PositiveNumber);
  bool bench_warmup = false;
  bench->add_flag("--warmup", bench_warmup, "decode the prompt once untimed and clear the KV cache first (llama-bench's warm-up)");

  auto* tokenize = app.add_subcommand("tokenize", "tokenize text (no BOS, special tokens parsed)");
  tokenize->add_option("-m,--model", model, "GGUF model")->required();
  tokenize->add_option("--text-file", text_file, "UTF-8 text")->required();

  auto* dequant = app.add_subcommand("dequant", "ggml to_float over raw blocks");
  dequant->add_option("--type", type_name, "ggml type name")->required();
  dequant->add_option("--in", in, "raw blocks")->required();
  dequant->add_option("--out", out, "f32 output")->required();

  auto* quantize = app.add_subcommand("quantize", "ggml_quantize_chunk over f32 rows");
  quantize->add_option("--type", type_name, "ggml type name")->required();
  quantize->add_option("--in", in, "f32 input")->required();
  quantize->add_option("--out", out, "raw blocks output")->required();
  quantize->add_option("--row", row, "elements per row")->required();
  quantize->add_option("--imatrix", imatrix, "f32 importance per column");

  auto* model_quantize = app.add_subcommand(
      "model-quantize", "llama_model_quantize with one of llama-quantize's presets (Q4_K_M, IQ2_XXS, ...)");
  model_quantize->add_option("-m,--model", model, "GGUF model to quantize (F32/F16/BF16 tensors)")->required();
  bool allow_requantize = false;
  model_quantize->add_flag("--allow-requantize", allow_requantize,
                           "accept already quantized tensors (Q8_0, ...) as the source, as llama-quantize's flag");
  model_quantize->add_option("--out", out, "output GGUF")->required();
  std::string preset;
  model_quantize->add_option("--ftype", preset, "preset name, as llama-quantize spells it")->required();
  bool imatrix_from_weights = false;
  model_quantize->add_flag("--imatrix-from-weights", imatrix_from_weights,
                           "importance = per-column sum of squared weights (stands in for llama-imatrix's)");
  std::string imatrix_file;
  model_quantize->add_option("--imatrix-file", imatrix_file,
                             "importance from an imatrix file (GGUF or legacy .dat), read as llama-quantize reads it");
  model_quantize->add_option("--threads", threads, "threads")->check(CLI::PositiveNumber);

  auto* model_info = app.add_subcommand("model-info", "load a model; print its layer counts as JSON");
  model_info->add_option("-m,--model", model, "GGUF model")->required();
  bool load_mtp = false;
  model_info->add_flag("--load-mtp", load_mtp, "also load the MTP (nextn) block, as a draft model does");

  auto* imatrix_cmd = app.add_subcommand("imatrix", "llama-imatrix over a text file, written as its GGUF imatrix");
  ImatrixOptions im;
  imatrix_cmd->add_option("-m,--model", im.model, "GGUF model")->required();
  imatrix_cmd->add_option("--text", im.text, "text file (llama-imatrix -f)")->required();
  imatrix_cmd->add_option("-o,--out", im.out, "output imatrix GGUF")->required();
  imatrix_cmd->add_option("--ctx", im.ctx, "tokens per chunk (llama-imatrix -c)")->check(CLI::PositiveNumber);
  imatrix_cmd->add_option("--batch", im.batch, "logical batch size, at most --ctx is used")->check(CLI::PositiveNumber);
  imatrix_cmd->add_option("--ubatch", im.ubatch, "physical batch size, at most --ctx is used")->check(CLI::PositiveNumber);
  imatrix_cmd->add_option("--chunks", im.chunks, "chunks to evaluate (default all)")->check(CLI::PositiveNumber);
  imatrix_cmd->add_flag("--process-output", im.process_output, "also collect output.weight");
  imatrix_cmd->add_flag("--verbose", im.verbose, "log the matrix products left out to stderr");
  imatrix_cmd->add_option("-t,--threads", im.threads, "threads")->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::fprintf(stderr, "ds4-ref-runner: %s\n", msg.c_str());
    return 1;
  }

  llama_log_set(log_errors_only, nullptr);
  ggml_log_set(log_errors_only, nullptr);
  try {
    if (*dequant) {
      run_dequant(type_name, in, out);
    } else if (*quantize) {
      run_quantize(type_name, in, out, row, imatrix);
    } else if (*model_quantize) {
      llama_backend_init();
      run_model_quantize(model, out, preset, imatrix_from_weights, imatrix_file, allow_requantize, threads);
      llama_backend_free();
    } else {
      if (cpu_variant.empty()) {
        const std::string lib = best_cpu_library();
        if (lib.empty() || ggml_backend_load(lib.c_str()) == nullptr)
          throw Failure("no libggml-cpu-*.so in " + bins_dir() + " loads on this CPU");
      } else {
        const std::string lib = bins_dir() + "/libggml-cpu-" + cpu_variant + ".so";
        if (!std::filesystem::exists(lib)) throw Failure("--cpu-variant " + cpu_variant + ": no " + lib);
        // Refused (null) when this CPU lacks the variant's instructions.
        if (ggml_backend_load(lib.c_str()) == nullptr) {
          throw Failure("--cpu-variant " + cpu_variant + ": " + lib + " does not load on this CPU");
        }
      }
      if (ggml_backend_dev_count() == 0) throw Failure("no ggml backend found in " + bins_dir());
      if (!gpu_backend.empty()) {
        if (!std::filesystem::exists(gpu_backend)) throw Failure("--gpu-backend: no " + gpu_backend);
        if (ggml_backend_load(gpu_backend.c_str()) == nullptr)
          throw Failure("--gpu-backend: " + gpu_backend +
                        " does not load (it needs the GPU driver's libcuda.so.1, and its CUDA runtime and cuBLAS on LD_LIBRARY_PATH)");
        bool gpu = false;
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i)
          gpu |= ggml_backend_dev_type(ggml_backend_dev_get(i)) == GGML_BACKEND_DEVICE_TYPE_GPU;
        if (!gpu) throw Failure("--gpu-backend: " + gpu_backend + " loaded but found no GPU");
        g_gpu_layers = 999;
      }
      llama_backend_init();
      TensorDump dump;
      if (*logits && !dump_dir.empty()) {
        dump.dir = dump_dir;
        for (size_t at = 0; at <= dump_filter.size() && !dump_filter.empty();) {
          const size_t comma = std::min(dump_filter.find(',', at), dump_filter.size());
          if (comma > at) dump.filters.push_back(dump_filter.substr(at, comma - at));
          at = comma + 1;
        }
        dump.index.open(dump_dir + "/index.txt");
        if (!dump.index) throw Failure("cannot write " + dump_dir + "/index.txt");
        g_dump = &dump;
      }
      if (*logits) run_logits(model, tokens, out, threads, ubatch, timings);
      if (*greedy) run_greedy(model, tokens, n_generate, threads);
      if (*bench) run_bench(model, tokens, n_generate, threads, bench_ubatch, bench_warmup);
      if (*tokenize) run_tokenize(model, text_file);
      if (*imatrix_cmd) run_imatrix(im);
      if (*model_info) run_model_info(model, load_mtp);
      llama_backend_free();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-ref-runner: %s\n", e.what());
    return 1;
  }
  return 0;
}
