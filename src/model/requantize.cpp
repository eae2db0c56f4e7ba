#include "model/requantize.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/deepseek4_hparams.h"
#include "quant/quant.h"

namespace ds4::model {

namespace {

// Types ggml's tools refuse to make without an importance matrix.
bool needs_importance(GgmlType t) {
  return t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ1_S || t == GgmlType::IQ1_M;
}

// Rows converted per task: enough to amortize the dispatch, few enough that
// every thread gets work on the smaller matrices.
constexpr uint64_t kRowsPerTask = 16;

GgmlType planned_type(const gguf::TensorInfo& t, const TensorSpec& spec, const RequantizeOptions& o,
                      std::string& why) {
  for (const TypeOverride& ov : o.overrides) {
    if (std::regex_search(t.name, ov.regex)) {
      why = "--tensor-type " + ov.pattern + "=" + std::string(ggml_type_name(ov.type));
      return ov.type;
    }
  }
  if (o.types_from != nullptr) {
    const gguf::TensorInfo* other = o.types_from->find_tensor(t.name);
    if (other == nullptr) throw Error(o.types_from->path() + ": has no tensor " + gguf::quote_name(t.name) + " to take its type from");
    if (without_trailing_ones(other->ne) != without_trailing_ones(t.ne)) {
      throw Error(o.types_from->path() + ": tensor " + gguf::quote_name(t.name) + " has shape " +
                  format_shape(other->ne) + ", the source " + format_shape(t.ne));
    }
    why = "layout of " + o.types_from->path();
    return other->type;
  }
  why = "mix " + std::string(quant_mix_name(o.mix));
  return tensor_type(o.mix, spec);
}

// Per column, the sum over the rows of w^2, in double and in row order (the
// same for any thread count).
std::vector<float> weight_energy(const float* w, uint64_t rows, uint64_t cols) {
  std::vector<double> sum(cols, 0.0);
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    for (uint64_t c = 0; c < cols; ++c) sum[c] += static_cast<double>(row[c]) * row[c];
  }
  return std::vector<float>(sum.begin(), sum.end());
}

}  // namespace

TypeOverride parse_type_override(const std::string& arg) {
  const size_t eq = arg.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    throw Error("--tensor-type " + arg + ": expected REGEX=TYPE, e.g. ffn_down_exps=q4_K");
  }
  const std::string pattern = arg.substr(0, eq), name = arg.substr(eq + 1);
  const std::optional<GgmlType> type = ggml_type_from_name(name);
  if (!type) throw Error("--tensor-type " + arg + ": '" + name + "' is not a ggml type name");
  if (!quant::quantize_supported(*type) && *type != GgmlType::I32) {
    throw Error("--tensor-type " + arg + ": cannot quantize to " + std::string(ggml_type_name(*type)));
  }
  try {
    return TypeOverride{pattern, std::regex(pattern), *type};
  } catch (const std::regex_error& e) {
    throw Error("--tensor-type " + arg + ": bad regular expression: " + e.what());
  }
}

std::vector<TensorPlan> plan_requantize(const gguf::File& source, const RequantizeOptions& o) {
  const Deepseek4HParams hp = read_metadata(source);
  validate_tensor_directory(source, hp);
  std::vector<TensorSpec> specs = deepseek4_tensors(hp);
  std::vector<TensorPlan> plan;
  for (const gguf::TensorInfo& t : source.tensors()) {
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == t.name; });
    if (spec == specs.end()) throw Error(source.path() + ": tensor " + gguf::quote_name(t.name) + " is not a deepseek4 tensor");
    TensorPlan p{&t, *spec, t.type, true, ""};
    p.type = planned_type(t, *spec, o, p.why);
    p.copy = p.type == t.type;
    const std::string where = source.path() + ": tensor " + gguf::quote_name(t.name) + " (" + p.why + "): ";
    if (!p.copy) {
      if (!quant::quantize_supported(p.type)) throw Error(where + "cannot quantize to " + std::string(ggml_type_name(p.type)));
      if (t.type == GgmlType::I32 || p.type == GgmlType::I32) {
        throw Error(where + "an I32 tensor (the hash routing table) keeps its type; asked for " +
                    std::string(ggml_type_name(p.type)));
      }
      const uint32_t block = ggml_type_traits(p.type).block_elems;
      if (t.ne[0] % block != 0) {
        throw Error(where + "rows of " + std::to_string(t.ne[0]) + " are not a whole number of " +
                    std::string(ggml_type_name(p.type)) + " blocks (" + std::to_string(block) + ")");
      }
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

void requantize_tensor(const TensorPlan& t, const RequantizeOptions& o, ThreadPool& pool, std::span<uint8_t> dst) {
  const gguf::TensorInfo& src = *t.source;
  if (t.copy) {
    std::memcpy(dst.data(), src.data, dst.size());
    return;
  }
  const uint64_t cols = src.ne[0];
  const uint64_t rows = src.n_rows();
  const uint64_t n_matrices = src.dim(2) * src.dim(3);
  const uint64_t rows_per_matrix = rows / n_matrices;
  const uint64_t src_row_bytes = src.row_bytes();
  const uint64_t dst_row_bytes = dst.size() / rows;

  // Importance per matrix: the imatrix's, else weight energy where the type needs some.
  std::vector<float> importance;
  if (o.importance) importance = o.importance(src.name, n_matrices, cols);
  if (!importance.empty() && importance.size() != n_matrices * cols) {
    throw Error("importance for " + gguf::quote_name(src.name) + " has " + std::to_string(importance.size()) +
                " values; the tensor needs " + std::to_string(n_matrices * cols));
  }
  if (importance.empty() && needs_importance(t.type)) {
    importance.resize(n_matrices * cols);
    pool.run(static_cast<int>(n_matrices), [&](int m, int) {
      std::vector<float> w(rows_per_matrix * cols);
      for (uint64_t r = 0; r < rows_per_matrix; ++r) {
        const uint64_t row = static_cast<uint64_t>(m) * rows_per_matrix + r;
        quant::dequantize_row(src.type, src.data + row * src_row_bytes, w.data() + r * cols, static_cast<int64_t>(cols));
      }
      const std::vector<float> e = weight_energy(w.data(), rows_per_matrix, cols);
      std::copy(e.begin(), e.end(), importance.begin() + static_cast<ptrdiff_t>(static_cast<uint64_t>(m) * cols));
    });
  }

  const uint64_t n_tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  // ThreadPool takes at most 65535 tasks a run: go in rounds.
  constexpr uint64_t kTasksPerRun = 4096;
  for (uint64_t first = 0; first < n_tasks; first += kTasksPerRun) {
    const uint64_t count = std::min(kTasksPerRun, n_tasks - first);
    pool.run(static_cast<int>(count), [&](int task, int) {
      const uint64_t r0 = (first + static_cast<uint64_t>(task)) * kRowsPerTask;
      const uint64_t r1 = std::min(rows, r0 + kRowsPerTask);
      std::vector<float> x(cols);
      for (uint64_t r = r0; r < r1; ++r) {
        quant::dequantize_row(src.type, src.data + r * src_row_bytes, x.data(), static_cast<int64_t>(cols));
        const float* imp = importance.empty() ? nullptr : importance.data() + (r / rows_per_matrix) * cols;
        quant::quantize_row(t.type, x.data(), dst.data() + r * dst_row_bytes, static_cast<int64_t>(cols), imp);
      }
    });
  }
}

gguf::Writer requantize_writer(const gguf::File& source, const std::vector<TensorPlan>& plan,
                               const RequantizeOptions& options, ThreadPool& pool) {
  gguf::Writer w(static_cast<uint32_t>(source.alignment()));
  for (const gguf::MetadataEntry& e : source.metadata()) {
    if (e.key == gguf::kSplitNoKey || e.key == gguf::kSplitCountKey || e.key == gguf::kSplitTensorsCountKey ||
        e.key == "general.file_type") {
      continue;
    }
    w.set_value(std::string(e.key), e.value);
  }
  for (const auto& [key, value] : options.extra_metadata) w.set_value(key, value);
  for (const TensorPlan& t : plan) {
    if (t.copy) {
      w.add_tensor_view(t.source->name, t.type, t.source->ne, t.source->bytes());
    } else {
      w.add_tensor(t.source->name, t.type, t.source->ne,
                   [&t, &options, &pool](std::span<uint8_t> dst) { requantize_tensor(t, options, pool, dst); });
    }
  }
  return w;
}

}  // namespace ds4::model
