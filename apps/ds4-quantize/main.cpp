// ds4-quantize: write a deepseek4 GGUF again in another quant mix.
//   ds4-quantize [--mix M] [--tensor-type REGEX=TYPE]... [--types-from FILE] [--imatrix F]
//                [--flavour ds4|llama] [--mtp] IN OUT
// IN is a GGUF (or a shard set's first file), or an official safetensors
// checkpoint: its folder (config.json, model.safetensors.index.json,
// tokenizer.json), index or single .safetensors file. OUT is written as OUT.part and renamed;
// a run that was interrupted goes on after the last whole tensor when started
// again with the same arguments (--restart ignores what is there). Errors: one
// line "ds4-quantize: <error>" and exit 1; usage errors exit 2.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/file_map.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "model/hf_checkpoint.h"
#include "model/imatrix.h"
#include "model/safetensors.h"
#include "model/quant_mix.h"
#include "model/requantize.h"
#include "version/version.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string duration_text(double s) {
  const auto t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t / 60 % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  }
  return buf;
}

// A bar on a terminal (redrawn in place), else a line every 10 % of the bytes.
class Progress {
 public:
  Progress(const std::vector<ds4::model::TensorPlan>& plan, uint64_t total, bool quiet)
      : plan_(plan), total_(total), quiet_(quiet), tty_(::isatty(STDERR_FILENO) == 1) {}

  void operator()(size_t tensors, uint64_t bytes) {
    if (quiet_) return;
    const auto now = Clock::now();
    if (first_) {
      first_ = false;
      start_ = now;
      start_bytes_ = bytes;
      if (tensors > 0) std::fprintf(stderr, "ds4-quantize: resuming after %zu tensors already written\n", tensors);
    }
    const double frac = total_ == 0 ? 1.0 : static_cast<double>(bytes) / static_cast<double>(total_);
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? static_cast<double>(bytes - start_bytes_) / secs : 0.0;
    const std::string eta = rate > 0 ? duration_text(static_cast<double>(total_ - bytes) / rate) : "?";
    const std::string next = tensors < plan_.size() ? plan_[tensors].source->name : "done";
    const int decile = static_cast<int>(frac * 10);
    if (!tty_ && decile == last_decile_ && tensors < plan_.size()) return;
    last_decile_ = decile;
    char bar[41];
    const int fill = static_cast<int>(frac * 40);
    for (int i = 0; i < 40; ++i) bar[i] = i < fill ? '#' : '.';
    bar[40] = 0;
    std::fprintf(stderr, "%s[%s] %3d%% %s / %s  tensor %zu/%zu %s  %s elapsed, ETA %s%s", tty_ ? "\r\033[K" : "", bar,
                 static_cast<int>(frac * 100), ds4::format_size(bytes).c_str(), ds4::format_size(total_).c_str(),
                 tensors, plan_.size(), next.c_str(), duration_text(secs).c_str(), eta.c_str(),
                 tty_ && tensors < plan_.size() ? "" : "\n");
  }

 private:
  const std::vector<ds4::model::TensorPlan>& plan_;
  uint64_t total_;
  bool quiet_, tty_;
  bool first_ = true;
  Clock::time_point start_;
  uint64_t start_bytes_ = 0;
  int last_decile_ = -1;
};

bool is_checkpoint(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  return std::filesystem::is_directory(p, ec) || p.extension() == ".json" || p.extension() == ".safetensors";
}

void print_plan(const std::vector<ds4::model::TensorPlan>& plan) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // tensors, bytes
  for (const auto& t : plan) {
    const uint64_t bytes = *ds4::ggml_nbytes(t.type, t.source->n_elements());
    std::printf("%-40s %-8s -> %-8s %s%s\n", t.source->name.c_str(), t.source->origin.c_str(),
                std::string(ds4::ggml_type_name(t.type)).c_str(), t.copy ? "copied, " : "", t.why.c_str());
    auto& [n, b] = by_type[std::string(ds4::ggml_type_name(t.type))];
    ++n;
    b += bytes;
  }
  uint64_t total = 0;
  for (const auto& [type, nb] : by_type) {
    std::printf("%-8s %5lu tensors %s\n", type.c_str(), static_cast<unsigned long>(nb.first),
                ds4::format_size(nb.second).c_str());
    total += nb.second;
  }
  std::printf("total    %5zu tensors %s of tensor data\n", plan.size(), ds4::format_size(total).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a deepseek4 GGUF in a quant mix from a GGUF or the official safetensors checkpoint", "ds4-quantize"};
  app.set_version_flag("--version", ds4::version_line("ds4-quantize"), "Print the version and git commit and exit");
  std::string in, out, mix_name = "ds4-q2", types_from, imatrix_path, flavour_name;
  std::vector<std::string> overrides;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool restart = false, dry_run = false, quiet = false, mtp = false;
  app.add_option("input", in,
                 "Source: a GGUF (or a shard set's first file) in any type, or an official safetensors checkpoint "
                 "folder (FP8 / FP4 / BF16)")
      ->required();
  app.add_option("output", out, "GGUF to write (as OUTPUT.part, then renamed)")->required();
  app.add_option("--mix", mix_name, std::string("Quant mix: ") + std::string(ds4::model::quant_mix_names()))
      ->capture_default_str();
  app.add_option("--tensor-type", overrides,
                 "REGEX=TYPE: tensors whose name matches REGEX get TYPE (the first match wins; as llama-quantize)");
  app.add_option("--types-from", types_from, "Give each tensor the type it has in this GGUF (copy a layout)");
  app.add_option("--imatrix", imatrix_path,
                 "Importance matrix (llama-imatrix's GGUF or legacy .dat, or ds4-imatrix's) for the quantizers");
  app.add_option("--flavour", flavour_name,
                 "Metadata as ds4 writes it (ds4; the default for a checkpoint) or as llama.cpp's converter does "
                 "(llama); with --mtp also the layout: ds4's sidecar or llama.cpp's MTP-only file. A GGUF source "
                 "keeps its own metadata unless this is given")
      ->check(CLI::IsMember({"ds4", "llama"}));
  app.add_flag("--mtp", mtp,
               "From a checkpoint: write its MTP draft block (mtp.0.*) instead of the model, as ds4's sidecar "
               "(deepseek4_mtp_support) or, with --flavour llama, as llama.cpp's MTP-only file");
  app.add_option("-t,--threads", threads, "Threads")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_flag("--restart", restart, "Start over even when OUTPUT.part holds an interrupted run of the same output");
  app.add_flag("--dry-run", dry_run, "Print what each tensor becomes; write nothing");
  app.add_flag("-q,--quiet", quiet, "No progress on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "ds4-quantize: " << e.what() << " (see ds4-quantize --help)\n";
    return 2;
  }

  try {
    ds4::model::RequantizeOptions o;
    const std::optional<ds4::model::QuantMix> mix = ds4::model::quant_mix_from_name(mix_name);
    if (!mix) throw ds4::Error("--mix " + mix_name + ": not a mix; one of " + std::string(ds4::model::quant_mix_names()));
    o.mix = *mix;
    for (const std::string& s : overrides) o.overrides.push_back(ds4::model::parse_type_override(s));
    // The source: a checkpoint folder (or its index / .safetensors file), else a GGUF.
    std::optional<ds4::gguf::File> gguf_source;
    std::optional<ds4::model::SafetensorsSet> checkpoint;
    ds4::model::RequantizeInput source;
    using ds4::model::MetadataFlavour;
    const std::optional<MetadataFlavour> flavour = ds4::model::metadata_flavour_from_name(flavour_name);
    if (is_checkpoint(in)) {
      checkpoint.emplace(ds4::model::SafetensorsSet::open(in));
      const std::string config = (std::filesystem::path(checkpoint->folder()) / "config.json").string();
      const ds4::model::Deepseek4HParams hp = ds4::model::hparams_from_config(config);
      const MetadataFlavour f = flavour.value_or(MetadataFlavour::Ds4);
      if (mtp) {
        using ds4::model::MtpLayout;
        source = ds4::model::checkpoint_mtp_input(
            *checkpoint, hp, f == MetadataFlavour::Llama ? MtpLayout::LlamaNextn : MtpLayout::Ds4Sidecar, f);
      } else {
        source = ds4::model::checkpoint_input(*checkpoint, hp, f);
      }
    } else {
      if (mtp) throw ds4::Error("--mtp: the MTP block is read from an official checkpoint folder, not from a GGUF");
      gguf_source.emplace(ds4::gguf::File::open(in));
      source = ds4::model::gguf_input(*gguf_source);
      if (flavour) ds4::model::set_metadata_flavour(source, *gguf_source, *flavour);
    }
    std::optional<ds4::gguf::File> layout;
    if (!types_from.empty()) {
      layout.emplace(ds4::gguf::File::open(types_from));
      o.types_from = &*layout;
    }
    std::optional<ds4::model::Imatrix> imatrix;
    if (!imatrix_path.empty()) {
      imatrix.emplace(ds4::model::Imatrix::load(imatrix_path));
      o.importance = [&imatrix](const std::string& name, uint64_t n_matrices, uint64_t cols) {
        return imatrix->importance(name, n_matrices, cols).value_or(std::vector<float>{});
      };
      // Provenance, under llama-quantize's keys.
      using ds4::gguf::MetaValue;
      o.extra_metadata.emplace_back("quantize.imatrix.file", MetaValue::string(imatrix_path));
      if (!imatrix->datasets.empty())
        o.extra_metadata.emplace_back("quantize.imatrix.dataset", MetaValue::string(imatrix->datasets.front()));
      o.extra_metadata.emplace_back("quantize.imatrix.entries_count",
                                    MetaValue::i32(static_cast<int32_t>(imatrix->entries.size())));
      o.extra_metadata.emplace_back("quantize.imatrix.chunks_count",
                                    MetaValue::i32(static_cast<int32_t>(imatrix->chunk_count)));
    }
    const std::vector<ds4::model::TensorPlan> plan = ds4::model::plan_requantize(source, o);
    if (imatrix) {
      // Say which quantized tensors the imatrix does not cover (they get no
      // importance, or weight energy where the type needs some).
      std::vector<std::string> missing;
      for (const auto& t : plan) {
        if (t.copy) continue;
        if (!imatrix->entries.count(t.source->name)) missing.push_back(t.source->name);
        // An entry of the wrong size is refused now, before anything is written.
        (void)imatrix->importance(t.source->name, t.source->n_matrices(), t.source->ne[0]);
      }
      if (!missing.empty() && !quiet) {
        std::fprintf(stderr, "ds4-quantize: warning: %zu quantized tensors have no entry in %s (first: %s)\n",
                     missing.size(), imatrix_path.c_str(), missing.front().c_str());
      }
    }
    if (dry_run) {
      print_plan(plan);
      return 0;
    }
    ds4::ThreadPool pool(threads);
    const ds4::gguf::Writer writer = ds4::model::requantize_writer(source, plan, o, pool);
    Progress progress(plan, writer.tensor_data_bytes(), quiet);
    ds4::gguf::Writer::WriteOptions wo;
    wo.temp_suffix = ".part";
    wo.resume = !restart;
    wo.durable = true;
    wo.progress = [&progress, &plan](size_t n, uint64_t bytes) {
      // A source tensor is read once: its pages leave our RSS when it is done.
      if (n > 0)
        for (const auto& r : plan[n - 1].source->reads) ds4::release_pages(r);
      progress(n, bytes);
    };
    const auto began = Clock::now();
    writer.write(out, wo);
    if (!quiet) {
      std::fprintf(stderr, "ds4-quantize: wrote %s (%zu tensors) in %s\n", out.c_str(), plan.size(),
                   duration_text(std::chrono::duration<double>(Clock::now() - began).count()).c_str());
    }
  } catch (const ds4::Error& e) {
    std::cerr << "ds4-quantize: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ds4-quantize: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
