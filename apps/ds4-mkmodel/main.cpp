// ds4-mkmodel: writes a random-weight GGUF in llama.cpp's deepseek4 layout for a
// preset (tiny, small, bench = Flash widths) with any hyperparameter the family
// allows overridden, in one of the quant mixes, with a synthetic or imported
// tokenizer. Same arguments give the same bytes.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/gguf_writer.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"
#include "model/imatrix.h"
#include "model/quant_mix.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "version/version.h"

namespace {

using ds4::Error;
using namespace ds4::model;

// A random importance matrix for every weight matrix of hp (not the norms,
// biases or the hash table): per column sums uniform in [0.01, 3) times the
// matrix's count, counts 64..1087 per matrix (per expert), as llama-imatrix's
// GGUF. Reproducible from the seed.
void write_random_imatrix(const Deepseek4HParams& hp, uint64_t seed, const std::string& path) {
  Imatrix m;
  m.datasets = {"ds4-mkmodel random"};
  m.chunk_count = 1;
  m.chunk_size = 512;
  for (const TensorSpec& t : deepseek4_tensors(hp)) {
    if (t.ne.size() < 2 || t.kind == TensorKind::FfnGateTid2Eid || !t.name.ends_with(".weight")) continue;
    Rng rng(stream_seed(seed ^ 0x1a7a1c5ull, t.name, 0));
    const uint64_t n_mat = t.ne.size() > 2 ? t.ne[2] : 1;
    ImatrixEntry e;
    for (uint64_t j = 0; j < n_mat; ++j) {
      const float count = static_cast<float>(64 + rng.below(1024));
      e.counts.push_back(count);
      for (uint64_t c = 0; c < t.ne[0]; ++c) e.sums.push_back(count * (0.01f + 2.99f * static_cast<float>(rng.uniform())));
    }
    m.entries.emplace(t.name, std::move(e));
  }
  m.save(path);
}

std::vector<uint32_t> parse_ratio_list(const std::string& s) {
  std::vector<uint32_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const unsigned long v = std::stoul(item, &used);
      if (used != item.size() || v > UINT32_MAX) throw std::invalid_argument(item);
      out.push_back(static_cast<uint32_t>(v));
    } catch (const std::exception&) {
      throw Error("--compress-ratios: '" + item + "' is not a non-negative integer");
    }
  }
  if (out.empty()) throw Error("--compress-ratios: empty list");
  return out;
}

struct Overrides {
  std::optional<uint32_t> embd, heads, kv_heads, head_dim, rope_dims, q_lora, o_groups, o_lora, experts, experts_used,
      shared_experts, expert_ff, hash_layers, window, indexer_heads, indexer_dim, indexer_top_k, vocab, ctx, hc,
      sinkhorn_iters;
  std::optional<float> swiglu_clamp, expert_scale, rope_base, compress_rope_base, rms_eps;
  std::optional<std::string> compress_ratios, name;
};

int run(int argc, char** argv) {
  CLI::App app{"Write a random-weight DeepSeek V4 (deepseek4) GGUF for tests and benchmarks."};
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", ds4::version_line("ds4-mkmodel"), "Print the version and git commit and exit");
  std::string preset = "tiny", mix_name = "ds4-q2", out, tokenizer_path;
  uint64_t seed = 1;
  std::optional<uint32_t> layers;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  bool no_data = false;
  float routing_skew = 0.0f;
  Overrides o;

  app.add_option("--preset", preset, "Base hyperparameters: tiny, small, bench (Flash widths), flash, pro")
      ->check(CLI::IsMember({"tiny", "small", "bench", "flash", "pro"}))
      ->capture_default_str();
  app.add_option("--mix", mix_name, std::string("Quant mix: ") + std::string(quant_mix_names()))
      ->check([](const std::string& v) {
        return quant_mix_from_name(v) ? std::string() : v + " is not a quant mix (" + std::string(quant_mix_names()) + ")";
      })
      ->capture_default_str();
  app.add_option("--seed", seed, "Random seed; the same arguments give the same file")->capture_default_str();
  app.add_option("--out", out, "Output GGUF path")->required();
  app.add_option("--routing-skew", routing_skew,
                 "Uneven expert popularity (0 = even): in each layer a random popularity order, router bias of rank "
                 "r lowered by S*ln(1+r), hash-table experts drawn with weight 1/(1+r)^S (docs/streaming.md)")
      ->check(CLI::Range(0.0f, 8.0f))
      ->capture_default_str();
  app.add_option("--layers", layers, "Number of layers (bench default 2; ratios continue 4,128,...)");
  app.add_option("--tokenizer", tokenizer_path, "Import this Hugging Face tokenizer.json instead of the synthetic one")
      ->check(CLI::ExistingFile);
  app.add_option("--threads", threads, "Threads that generate weights")->capture_default_str();
  std::string imatrix_out;
  app.add_option("--imatrix-out", imatrix_out,
                 "Also write a random importance matrix for every weight matrix (llama-imatrix's GGUF form; for "
                 "testing and timing quantizers)");
  app.add_flag("--no-data", no_data,
               "Write the header, metadata and tensor table only; the tensor data is left a hole (zeros) of the "
               "file's full size: the layout of a full-size model without its weights");

  auto* hp_group = app.add_option_group("Hyperparameter overrides");
  hp_group->add_option("--embd", o.embd, "Embedding length");
  hp_group->add_option("--heads", o.heads, "Query heads");
  hp_group->add_option("--kv-heads", o.kv_heads, "KV heads (the family requires 1)");
  hp_group->add_option("--head-dim", o.head_dim, "Head dim = key length = value length");
  hp_group->add_option("--rope-dims", o.rope_dims, "Rope dims (last dims of each head)");
  hp_group->add_option("--q-lora", o.q_lora, "Q LoRA rank");
  hp_group->add_option("--o-groups", o.o_groups, "Output projection groups");
  hp_group->add_option("--o-lora", o.o_lora, "Output LoRA rank per group");
  hp_group->add_option("--experts", o.experts, "Routed experts");
  hp_group->add_option("--experts-used", o.experts_used, "Experts per token");
  hp_group->add_option("--shared-experts", o.shared_experts, "Shared experts");
  hp_group->add_option("--expert-ff", o.expert_ff, "Expert FF length (routed and shared)");
  hp_group->add_option("--hash-layers", o.hash_layers, "Leading layers routed by token id");
  hp_group->add_option("--window", o.window, "Sliding window (rows incl. the current token)");
  hp_group->add_option("--indexer-heads", o.indexer_heads, "Indexer heads");
  hp_group->add_option("--indexer-dim", o.indexer_dim, "Indexer key length (power of two >= 64)");
  hp_group->add_option("--indexer-top-k", o.indexer_top_k, "Indexer top-k");
  hp_group->add_option("--compress-ratios", o.compress_ratios, "Per-layer ratios, e.g. 0,4,128,4 (sets --layers)");
  hp_group->add_option("--vocab", o.vocab, "Vocab size (rows of embedding and head)");
  hp_group->add_option("--ctx", o.ctx, "Training context length");
  hp_group->add_option("--hc", o.hc, "Hyper-connection streams (the family requires 4)");
  hp_group->add_option("--sinkhorn-iters", o.sinkhorn_iters, "Sinkhorn iterations");
  hp_group->add_option("--swiglu-clamp", o.swiglu_clamp, "SwiGLU clamp of every layer");
  hp_group->add_option("--expert-scale", o.expert_scale, "Routed expert weights scale");
  hp_group->add_option("--rope-base", o.rope_base, "Rope base of ratio-0 layers");
  hp_group->add_option("--compress-rope-base", o.compress_rope_base, "Rope base of compressed layers");
  hp_group->add_option("--rms-eps", o.rms_eps, "RMSNorm epsilon");
  hp_group->add_option("--name", o.name, "general.name");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ds4-mkmodel: error: %s\n", e.what());
    return 1;
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::optional<std::vector<uint32_t>> ratios;
  if (o.compress_ratios) ratios = parse_ratio_list(*o.compress_ratios);
  if (ratios && layers && *layers != ratios->size())
    throw Error("--layers " + std::to_string(*layers) + " disagrees with the " + std::to_string(ratios->size()) +
                " entries of --compress-ratios");
  const std::optional<uint32_t> n_layer = ratios ? std::optional<uint32_t>(static_cast<uint32_t>(ratios->size())) : layers;
  if (n_layer && *n_layer == 0) throw Error("--layers must be at least 1");
  Deepseek4HParams hp = preset == "bench" ? preset_bench(n_layer.value_or(2)) : *preset_by_name(preset);
  if (n_layer && *n_layer != hp.n_layer) resize_layers(hp, *n_layer);
  if (ratios) hp.compress_ratios = *ratios;

  auto set = [](auto& field, const auto& value) {
    if (value) field = *value;
  };
  set(hp.n_embd, o.embd);
  set(hp.n_head, o.heads);
  set(hp.n_head_kv, o.kv_heads);
  set(hp.head_dim, o.head_dim);
  set(hp.n_rot, o.rope_dims);
  set(hp.q_lora_rank, o.q_lora);
  set(hp.o_groups, o.o_groups);
  set(hp.o_lora_rank, o.o_lora);
  set(hp.n_expert, o.experts);
  set(hp.n_expert_used, o.experts_used);
  set(hp.n_expert_shared, o.shared_experts);
  set(hp.n_ff_exp, o.expert_ff);
  set(hp.n_hash_layers, o.hash_layers);
  set(hp.n_swa, o.window);
  set(hp.indexer_n_head, o.indexer_heads);
  set(hp.indexer_head_dim, o.indexer_dim);
  set(hp.indexer_top_k, o.indexer_top_k);
  set(hp.n_vocab, o.vocab);
  set(hp.n_ctx_train, o.ctx);
  set(hp.hc_count, o.hc);
  set(hp.hc_sinkhorn_iters, o.sinkhorn_iters);
  set(hp.expert_weights_scale, o.expert_scale);
  set(hp.rope_freq_base, o.rope_base);
  set(hp.compress_rope_freq_base, o.compress_rope_base);
  set(hp.rms_eps, o.rms_eps);
  set(hp.name, o.name);
  if (o.swiglu_clamp) hp.swiglu_clamp_exp.assign(hp.n_layer, *o.swiglu_clamp);

  const QuantMix mix = *quant_mix_from_name(mix_name);
  TokenizerData tok = tokenizer_path.empty() ? make_synthetic_tokenizer(hp.n_vocab)
                                             : import_hf_tokenizer(tokenizer_path, hp.n_vocab, o.vocab.has_value());
  hp.n_vocab = tok.size();
  hp.validate();
  check_mix(mix, hp);

  ds4::gguf::Writer w;
  write_metadata(hp, w);
  tok.write(w);
  const size_t n_tensors = add_synthetic_tensors(w, hp, mix, seed, threads, routing_skew);
  if (no_data) {
    w.write_without_data(out);
  } else {
    w.write(out);
  }

  if (!imatrix_out.empty()) write_random_imatrix(hp, seed, imatrix_out);

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t params = 0;
  for (const TensorSpec& s : deepseek4_tensors(hp)) params += s.n_elements();
  std::printf("%s\n", describe(hp).c_str());
  std::printf("mix %s, seed %llu, tokenizer %s (%u tokens, %zu merges)\n", mix_name.c_str(),
              static_cast<unsigned long long>(seed), tokenizer_path.empty() ? "synthetic" : tokenizer_path.c_str(),
              tok.size(), tok.merges.size());
  std::printf("wrote %s: %zu tensors, %.1fM parameters, %.2f MB%s in %.2f s\n", out.c_str(), n_tensors,
              static_cast<double>(params) / 1e6, static_cast<double>(std::filesystem::file_size(out)) / 1e6,
              no_data ? " (tensor data left a hole)" : "", secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds4-mkmodel: error: %s\n", e.what());
    return 1;
  }
}
