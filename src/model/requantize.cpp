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

GgmlType planned_type(const SourceTensor& t, const TensorSpec& spec, const RequantizeOptions& o, std::string& why) {
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

uint64_t SourceTensor::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

RequantizeInput gguf_input(const gguf::File& file) {
  RequantizeInput in;
  in.path = file.path();
  in.alignment = static_cast<uint32_t>(file.alignment());
  in.hp = read_metadata(file);
  validate_tensor_directory(file, in.hp);
  in.specs = deepseek4_tensors(in.hp);
  for (const gguf::TensorInfo& t : file.tensors()) {
    SourceTensor s;
    s.name = t.name;
    s.ne = t.ne;
    s.native = t.type;
    s.origin = std::string(ggml_type_name(t.type));
    s.view = t.bytes();
    s.reads = {t.bytes()};
    const gguf::TensorInfo* info = &t;
    s.native_bytes = [info](std::span<uint8_t> dst) { std::memcpy(dst.data(), info->data, dst.size()); };
    if (t.type != GgmlType::I32) {
      s.rows_f32 = [info](uint64_t row0, uint64_t n, float* dst) {
        const uint64_t rb = info->row_bytes(), cols = info->ne[0];
        for (uint64_t r = 0; r < n; ++r)
          quant::dequantize_row(info->type, info->data + (row0 + r) * rb, dst + r * cols, static_cast<int64_t>(cols));
      };
    }
    in.tensors.push_back(std::move(s));
  }
  const gguf::File* f = &file;
  in.write_metadata = [f](gguf::Writer& w) {
    for (const gguf::MetadataEntry& e : f->metadata()) {
      if (e.key == gguf::kSplitNoKey || e.key == gguf::kSplitCountKey || e.key == gguf::kSplitTensorsCountKey ||
          e.key == "general.file_type") {
        continue;
      }
      w.set_value(std::string(e.key), e.value);
    }
  };
  return in;
}

void set_metadata_flavour(RequantizeInput& input, const gguf::File& file, MetadataFlavour flavour) {
  const gguf::File* f = &file;
  input.write_metadata = [f, flavour, hp = input.hp, specs = input.specs](gguf::Writer& w) {
    write_model_metadata(hp, flavour, specs, w);
    for (const gguf::MetadataEntry& e : f->metadata()) {
      const std::string_view k = e.key;
      // What either flavour writes (or must not carry over) is not copied.
      if (k.starts_with(std::string(kDeepseek4Arch) + ".") || k.starts_with("split.") || k == "general.architecture" ||
          k == "general.name" || k == "general.type" || k == "general.size_label" ||
          k == "general.quantization_version" || k == "general.file_type") {
        continue;
      }
      w.set_value(std::string(e.key), e.value);
    }
  };
}

std::vector<TensorPlan> plan_requantize(const RequantizeInput& input, const RequantizeOptions& o) {
  const std::vector<TensorSpec>& specs = input.specs;
  std::vector<TensorPlan> plan;
  for (const SourceTensor& t : input.tensors) {
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == t.name; });
    if (spec == specs.end()) throw Error(input.path + ": tensor " + gguf::quote_name(t.name) + " is not a deepseek4 tensor");
    TensorPlan p{&t, *spec, GgmlType::F32, true, ""};
    p.type = planned_type(t, *spec, o, p.why);
    p.copy = t.native && p.type == *t.native;
    const std::string where = input.path + ": tensor " + gguf::quote_name(t.name) + " (" + p.why + "): ";
    if (!p.copy) {
      if (!quant::quantize_supported(p.type)) throw Error(where + "cannot quantize to " + std::string(ggml_type_name(p.type)));
      if (!t.rows_f32 || p.type == GgmlType::I32) {
        throw Error(where + "an integer tensor (the hash routing table) keeps its type (" + t.origin + "); asked for " +
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
  const SourceTensor& src = *t.source;
  if (t.copy) {
    src.native_bytes(dst);
    return;
  }
  const uint64_t cols = src.ne[0];
  const uint64_t rows = src.n_rows();
  const uint64_t n_matrices = src.n_matrices();
  const uint64_t rows_per_matrix = rows / n_matrices;
  const uint64_t dst_row_bytes = dst.size() / rows;

  // Importance per matrix: the imatrix's, else weight energy where the type needs some.
  std::vector<float> importance;
  if (o.importance) importance = o.importance(src.name, n_matrices, cols);
  // A block of importance per matrix, or per group of rows (a grouped
  // product's imatrix: Imatrix::importance).
  uint64_t rows_per_block = rows_per_matrix;
  if (!importance.empty()) {
    const uint64_t blocks = importance.size() / cols;
    if (importance.size() % cols != 0 || blocks % n_matrices != 0 || rows % blocks != 0) {
      throw Error("importance for " + gguf::quote_name(src.name) + " has " + std::to_string(importance.size()) +
                  " values; the tensor needs " + std::to_string(n_matrices * cols) + " (or a multiple dividing its " +
                  std::to_string(rows) + " rows)");
    }
    rows_per_block = rows / blocks;
  }
  if (importance.empty() && needs_importance(t.type)) {
    importance.resize(n_matrices * cols);
    pool.run(static_cast<int>(n_matrices), [&](int m, int) {
      std::vector<float> w(rows_per_matrix * cols);
      src.rows_f32(static_cast<uint64_t>(m) * rows_per_matrix, rows_per_matrix, w.data());
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
      std::vector<float> x((r1 - r0) * cols);
      src.rows_f32(r0, r1 - r0, x.data());
      for (uint64_t r = r0; r < r1; ++r) {
        const float* imp = importance.empty() ? nullptr : importance.data() + (r / rows_per_block) * cols;
        quant::quantize_row(t.type, x.data() + (r - r0) * cols, dst.data() + r * dst_row_bytes,
                            static_cast<int64_t>(cols), imp);
      }
    });
  }
}

gguf::Writer requantize_writer(const RequantizeInput& input, const std::vector<TensorPlan>& plan,
                               const RequantizeOptions& options, ThreadPool& pool) {
  gguf::Writer w(input.alignment);
  input.write_metadata(w);
  for (const auto& [key, value] : options.extra_metadata) w.set_value(key, value);
  for (const TensorPlan& t : plan) {
    if (t.copy && !t.source->view.empty()) {
      w.add_tensor_view(t.source->name, t.type, t.source->ne, t.source->view);
    } else {
      w.add_tensor(t.source->name, t.type, t.source->ne,
                   [&t, &options, &pool](std::span<uint8_t> dst) { requantize_tensor(t, options, pool, dst); });
    }
  }
  return w;
}

}  // namespace ds4::model
