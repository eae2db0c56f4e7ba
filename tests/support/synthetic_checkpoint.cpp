#include "support/synthetic_checkpoint.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek4_mtp.h"
#include "model/deepseek4_tensors.h"
#include "model/synthetic_weights.h"
#include "quant/quant.h"
#include "support/file_io.h"

namespace ds4::test {

namespace {

using model::TensorKind;
using nlohmann::json;

enum class Store { Fp8, Fp4Experts, Bf16, F32, I64 };

Store store_of(TensorKind k) {
  switch (k) {
    case TensorKind::AttnQA:
    case TensorKind::AttnQB:
    case TensorKind::AttnKv:
    case TensorKind::AttnOutA:
    case TensorKind::AttnOutB:
    case TensorKind::IndexerQB:
    case TensorKind::FfnGateShexp:
    case TensorKind::FfnUpShexp:
    case TensorKind::FfnDownShexp:
    case TensorKind::MtpEProj:
    case TensorKind::MtpHProj:
      return Store::Fp8;
    case TensorKind::FfnGateExps:
    case TensorKind::FfnUpExps:
    case TensorKind::FfnDownExps:
      return Store::Fp4Experts;
    case TensorKind::FfnGateTid2Eid:
      return Store::I64;
    case TensorKind::HcAttnFn:
    case TensorKind::HcFfnFn:
    case TensorKind::OutputHcFn:
    case TensorKind::HcAttnScale:
    case TensorKind::HcAttnBase:
    case TensorKind::HcFfnScale:
    case TensorKind::HcFfnBase:
    case TensorKind::OutputHcScale:
    case TensorKind::OutputHcBase:
    case TensorKind::AttnCompApe:
    case TensorKind::IndexerCompApe:
    case TensorKind::AttnSinks:
    case TensorKind::ExpProbsB:
      return Store::F32;
    default:
      return Store::Bf16;
  }
}

// The release's name for a tensor kind (expert e for routed ones), written
// out here from the published layout, apart from the reader's own table.
std::string release_name(TensorKind k, uint32_t layer, uint32_t e = 0) {
  const std::string l = "layers." + std::to_string(layer) + ".";
  const std::string ex = l + "ffn.experts." + std::to_string(e) + ".";
  switch (k) {
    case TensorKind::TokenEmbd: return "embed.weight";
    case TensorKind::Output: return "head.weight";
    case TensorKind::OutputNorm: return "norm.weight";
    case TensorKind::OutputHcFn: return "hc_head_fn";
    case TensorKind::OutputHcBase: return "hc_head_base";
    case TensorKind::OutputHcScale: return "hc_head_scale";
    case TensorKind::HcAttnFn: return l + "hc_attn_fn";
    case TensorKind::HcAttnScale: return l + "hc_attn_scale";
    case TensorKind::HcAttnBase: return l + "hc_attn_base";
    case TensorKind::AttnNorm: return l + "attn_norm.weight";
    case TensorKind::AttnQA: return l + "attn.wq_a.weight";
    case TensorKind::AttnQANorm: return l + "attn.q_norm.weight";
    case TensorKind::AttnQB: return l + "attn.wq_b.weight";
    case TensorKind::AttnKv: return l + "attn.wkv.weight";
    case TensorKind::AttnKvNorm: return l + "attn.kv_norm.weight";
    case TensorKind::AttnCompApe: return l + "attn.compressor.ape";
    case TensorKind::AttnCompKv: return l + "attn.compressor.wkv.weight";
    case TensorKind::AttnCompGate: return l + "attn.compressor.wgate.weight";
    case TensorKind::AttnCompNorm: return l + "attn.compressor.norm.weight";
    case TensorKind::IndexerQB: return l + "attn.indexer.wq_b.weight";
    case TensorKind::IndexerProj: return l + "attn.indexer.weights_proj.weight";
    case TensorKind::IndexerCompApe: return l + "attn.indexer.compressor.ape";
    case TensorKind::IndexerCompKv: return l + "attn.indexer.compressor.wkv.weight";
    case TensorKind::IndexerCompGate: return l + "attn.indexer.compressor.wgate.weight";
    case TensorKind::IndexerCompNorm: return l + "attn.indexer.compressor.norm.weight";
    case TensorKind::AttnSinks: return l + "attn.attn_sink";
    case TensorKind::AttnOutA: return l + "attn.wo_a.weight";
    case TensorKind::AttnOutB: return l + "attn.wo_b.weight";
    case TensorKind::HcFfnFn: return l + "hc_ffn_fn";
    case TensorKind::HcFfnScale: return l + "hc_ffn_scale";
    case TensorKind::HcFfnBase: return l + "hc_ffn_base";
    case TensorKind::FfnNorm: return l + "ffn_norm.weight";
    case TensorKind::FfnGateInp: return l + "ffn.gate.weight";
    case TensorKind::ExpProbsB: return l + "ffn.gate.bias";
    case TensorKind::FfnGateTid2Eid: return l + "ffn.gate.tid2eid";
    case TensorKind::FfnGateExps: return ex + "w1.weight";
    case TensorKind::FfnUpExps: return ex + "w3.weight";
    case TensorKind::FfnDownExps: return ex + "w2.weight";
    case TensorKind::FfnGateShexp: return l + "ffn.shared_experts.w1.weight";
    case TensorKind::FfnUpShexp: return l + "ffn.shared_experts.w3.weight";
    case TensorKind::FfnDownShexp: return l + "ffn.shared_experts.w2.weight";
    case TensorKind::MtpEProj: return "mtp.0.e_proj.weight";
    case TensorKind::MtpHProj: return "mtp.0.h_proj.weight";
    case TensorKind::MtpENorm: return "mtp.0.enorm.weight";
    case TensorKind::MtpHNorm: return "mtp.0.hnorm.weight";
    case TensorKind::MtpNorm: return "mtp.0.norm.weight";
    case TensorKind::MtpEhProj: break;  // llama.cpp's fusion; not in the release
  }
  throw Error("release_name: unknown kind");
}

struct StEntry {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

// Nearest code to x for a sign-magnitude format whose positive codes
// 0 .. n-1 have increasing `magnitudes` and whose sign is bit `sign_bit`
// (ties: the smaller magnitude).
uint8_t nearest(const std::vector<float>& magnitudes, uint8_t sign_bit, float x) {
  const float a = std::fabs(x);
  const auto it = std::lower_bound(magnitudes.begin(), magnitudes.end(), a);
  size_t c = static_cast<size_t>(it - magnitudes.begin());
  if (c == magnitudes.size() || (c > 0 && a - magnitudes[c - 1] <= magnitudes[c] - a)) --c;
  return static_cast<uint8_t>(c | (x < 0 ? sign_bit : 0));
}

// The power-of-two scale exponent (E8M0 byte) that fits amax into max.
uint8_t pow2_scale(float amax, float max) {
  if (amax <= 0.0f) return 127;
  const int e = static_cast<int>(std::ceil(std::log2(amax / max))) + 127;
  return static_cast<uint8_t>(std::clamp(e, 1, 254));
}

std::vector<float> draw(const model::TensorSpec& spec, const model::Deepseek4HParams& hp, uint64_t seed,
                        uint32_t expert, uint64_t n) {
  const model::WeightInit init = model::weight_init(spec, hp);
  model::Rng rng(model::stream_seed(seed, spec.name, expert));
  std::vector<float> v(n);
  switch (init.kind) {
    case model::WeightInit::Kind::Uniform:
      for (float& x : v) x = init.lo + (init.hi - init.lo) * static_cast<float>(rng.uniform());
      break;
    case model::WeightInit::Kind::SpreadBias:
      for (uint64_t i = 0; i < n; ++i) v[i] = init.lo + (init.hi - init.lo) * static_cast<float>(i) / static_cast<float>(std::max<uint64_t>(1, n - 1));
      for (uint64_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.below(static_cast<uint32_t>(i))]);
      break;
    default:
      for (float& x : v) x = init.mean + init.std * rng.normal();
  }
  return v;
}

void put_f32(std::vector<uint8_t>& b, float x) {
  const size_t at = b.size();
  b.resize(at + 4);
  std::memcpy(b.data() + at, &x, 4);
}

void put_bf16(std::vector<uint8_t>& b, float x) {
  // Round to nearest even, as torch's .to(bfloat16).
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7fff + ((u >> 16) & 1);
  b.push_back(static_cast<uint8_t>(u >> 16));
  b.push_back(static_cast<uint8_t>(u >> 24));
}

// The release's name of a tensor of the main model or, when `mtp`, of the
// MTP block: its hc_head, its own projections and norms, and the layer
// tensors of the block under "mtp.0." in place of "layers.N.".
std::string stored_name(TensorKind k, uint32_t layer, bool mtp, uint32_t e = 0) {
  if (!mtp) return release_name(k, layer, e);
  switch (k) {
    case TensorKind::OutputHcFn: return "mtp.0.hc_head_fn";
    case TensorKind::OutputHcBase: return "mtp.0.hc_head_base";
    case TensorKind::OutputHcScale: return "mtp.0.hc_head_scale";
    default: break;
  }
  const std::string name = release_name(k, layer, e);
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  return name.starts_with(prefix) ? "mtp.0." + name.substr(prefix.size()) : name;
}

void add_tensor(std::map<std::string, StEntry>& out, const model::TensorSpec& spec, const model::Deepseek4HParams& hp,
                uint64_t seed, bool mtp = false) {
  std::vector<uint64_t> shape(spec.ne.rbegin(), spec.ne.rend());  // release order: outermost first
  const uint32_t layer = spec.layer < 0 ? 0 : static_cast<uint32_t>(spec.layer);
  const auto name_of = [mtp](TensorKind k, uint32_t l, uint32_t e = 0) { return stored_name(k, l, mtp, e); };
  switch (store_of(spec.kind)) {
    case Store::F32: {
      StEntry e{"F32", shape, {}};
      for (float x : draw(spec, hp, seed, 0, spec.n_elements())) put_f32(e.bytes, x);
      out[name_of(spec.kind, layer)] = std::move(e);
      return;
    }
    case Store::Bf16: {
      StEntry e{"BF16", shape, {}};
      for (float x : draw(spec, hp, seed, 0, spec.n_elements())) put_bf16(e.bytes, x);
      out[name_of(spec.kind, layer)] = std::move(e);
      return;
    }
    case Store::I64: {
      // [n_vocab, n_used]: distinct experts per token.
      model::Rng rng(model::stream_seed(seed, spec.name, 0));
      StEntry e{"I64", shape, {}};
      for (uint64_t t = 0; t < shape[0]; ++t) {
        std::vector<int64_t> row;
        while (row.size() < shape[1]) {
          const int64_t x = rng.below(hp.n_expert);
          if (std::find(row.begin(), row.end(), x) == row.end()) row.push_back(x);
        }
        for (int64_t x : row) {
          const size_t at = e.bytes.size();
          e.bytes.resize(at + 8);
          std::memcpy(e.bytes.data() + at, &x, 8);
        }
      }
      out[name_of(spec.kind, layer)] = std::move(e);
      return;
    }
    case Store::Fp8: {
      std::vector<float> codes(127);  // 0x00 .. 0x7e; 0x7f is NaN
      for (int c = 0; c < 127; ++c) codes[static_cast<size_t>(c)] = fp8_e4m3_value(static_cast<uint8_t>(c));
      const uint64_t rows = shape[0], cols = shape[1], br = (rows + 127) / 128, bc = (cols + 127) / 128;
      const std::vector<float> w = draw(spec, hp, seed, 0, rows * cols);
      StEntry q{"F8_E4M3", shape, std::vector<uint8_t>(rows * cols)};
      StEntry s{"F8_E8M0", {br, bc}, std::vector<uint8_t>(br * bc)};
      for (uint64_t i0 = 0; i0 < br; ++i0) {
        for (uint64_t j0 = 0; j0 < bc; ++j0) {
          float amax = 0;
          for (uint64_t i = i0 * 128; i < std::min(rows, i0 * 128 + 128); ++i)
            for (uint64_t j = j0 * 128; j < std::min(cols, j0 * 128 + 128); ++j) amax = std::max(amax, std::fabs(w[i * cols + j]));
          const uint8_t e = pow2_scale(amax, 448.0f);
          s.bytes[i0 * bc + j0] = e;
          for (uint64_t i = i0 * 128; i < std::min(rows, i0 * 128 + 128); ++i)
            for (uint64_t j = j0 * 128; j < std::min(cols, j0 * 128 + 128); ++j)
              q.bytes[i * cols + j] = nearest(codes, 0x80, w[i * cols + j] / e8m0_scale(e));
        }
      }
      const std::string name = name_of(spec.kind, layer);
      out[name] = std::move(q);
      out[name.substr(0, name.size() - 7) + ".scale"] = std::move(s);
      return;
    }
    case Store::Fp4Experts: {
      std::vector<float> codes(8);
      for (int c = 0; c < 8; ++c) codes[static_cast<size_t>(c)] = fp4_e2m1_value(static_cast<uint8_t>(c));
      const uint64_t in = spec.ne[0], out_rows = spec.ne[1];
      for (uint32_t x = 0; x < spec.ne[2]; ++x) {
        const std::vector<float> w = draw(spec, hp, seed, x + 1, in * out_rows);
        StEntry q{"I8", {out_rows, in / 2}, std::vector<uint8_t>(out_rows * in / 2)};
        StEntry s{"F8_E8M0", {out_rows, in / 32}, std::vector<uint8_t>(out_rows * in / 32)};
        for (uint64_t i = 0; i < out_rows; ++i) {
          for (uint64_t b = 0; b < in / 32; ++b) {
            float amax = 0;
            for (uint64_t j = b * 32; j < b * 32 + 32; ++j) amax = std::max(amax, std::fabs(w[i * in + j]));
            const uint8_t e = pow2_scale(amax, 6.0f);
            s.bytes[i * (in / 32) + b] = e;
            for (uint64_t j = b * 32; j < b * 32 + 32; j += 2) {
              const uint8_t lo = nearest(codes, 0x8, w[i * in + j] / e8m0_scale(e));
              const uint8_t hi = nearest(codes, 0x8, w[i * in + j + 1] / e8m0_scale(e));
              q.bytes[i * (in / 2) + j / 2] = static_cast<uint8_t>(lo | (hi << 4));
            }
          }
        }
        const std::string name = name_of(spec.kind, layer, x);
        out[name] = std::move(q);
        out[name.substr(0, name.size() - 7) + ".scale"] = std::move(s);
      }
      return;
    }
  }
}

void write_safetensors(const std::string& path, const std::map<std::string, StEntry>& tensors) {
  json header = json::object();
  uint64_t at = 0;
  for (const auto& [name, e] : tensors) {
    header[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {at, at + e.bytes.size()}}};
    at += e.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  std::vector<uint8_t> file(8);
  const uint64_t n = h.size();
  std::memcpy(file.data(), &n, 8);
  file.insert(file.end(), h.begin(), h.end());
  for (const auto& [name, e] : tensors) file.insert(file.end(), e.bytes.begin(), e.bytes.end());
  write_bytes(path, file);
}

json config_of(const model::Deepseek4HParams& hp) {
  std::vector<uint32_t> ratios = hp.compress_ratios;
  ratios.push_back(0);  // the release lists the MTP layer's too
  return {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"hidden_size", hp.n_embd},
      {"num_hidden_layers", hp.n_layer},
      {"num_attention_heads", hp.n_head},
      {"num_key_value_heads", hp.n_head_kv},
      {"head_dim", hp.head_dim},
      {"qk_rope_head_dim", hp.n_rot},
      {"q_lora_rank", hp.q_lora_rank},
      {"o_lora_rank", hp.o_lora_rank},
      {"o_groups", hp.o_groups},
      {"vocab_size", hp.n_vocab},
      {"max_position_embeddings", hp.n_ctx_train},
      {"rms_norm_eps", hp.rms_eps},
      {"rope_theta", hp.rope_freq_base},
      {"compress_rope_theta", hp.compress_rope_freq_base},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", hp.rope_scaling_factor},
        {"original_max_position_embeddings", hp.rope_scaling_orig_ctx},
        {"beta_fast", hp.yarn_beta_fast},
        {"beta_slow", hp.yarn_beta_slow}}},
      {"sliding_window", hp.n_swa},
      {"index_n_heads", hp.indexer_n_head},
      {"index_head_dim", hp.indexer_head_dim},
      {"index_topk", hp.indexer_top_k},
      {"n_routed_experts", hp.n_expert},
      {"n_shared_experts", hp.n_expert_shared},
      {"num_experts_per_tok", hp.n_expert_used},
      {"moe_intermediate_size", hp.n_ff_exp},
      {"num_hash_layers", hp.n_hash_layers},
      {"scoring_func", "sqrtsoftplus"},
      {"topk_method", "noaux_tc"},
      {"norm_topk_prob", hp.expert_weights_norm},
      {"routed_scaling_factor", hp.expert_weights_scale},
      {"swiglu_limit", hp.swiglu_clamp_exp.at(0)},
      {"hc_mult", hp.hc_count},
      {"hc_sinkhorn_iters", hp.hc_sinkhorn_iters},
      {"hc_eps", hp.hc_eps},
      {"num_nextn_predict_layers", 1},
      {"compress_ratios", ratios},
      {"quantization_config",
       {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}}},
  };
}

}  // namespace

float fp8_e4m3_value(uint8_t b) {
  const uint32_t sign = (b >> 7) & 1u, exp = (b >> 3) & 0xfu, man = b & 0x7u;
  if (exp == 0xf && man == 0x7) return NAN;
  float v;
  if (exp == 0) {
    v = static_cast<float>(man) / 512.0f;  // subnormal: man x 2^-9
  } else {
    v = std::bit_cast<float>(((exp - 7 + 127) << 23) | (man << 20));  // (1 + man/8) 2^(exp-7)
  }
  return sign ? -v : v;
}

float fp4_e2m1_value(uint8_t nibble) {
  const uint32_t sign = (nibble >> 3) & 1u, exp = (nibble >> 1) & 3u, man = nibble & 1u;
  const float v = exp == 0 ? 0.5f * static_cast<float>(man) : std::ldexp(1.0f + 0.5f * static_cast<float>(man), static_cast<int>(exp) - 1);
  return sign ? -v : v;
}

float e8m0_scale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 127); }

std::string fp4_experts_mismatch(const gguf::TensorInfo& t, const model::SafetensorsSet& set,
                                 const std::function<std::string(uint64_t expert)>& expert_base) {
  if (t.type != GgmlType::MXFP4) return t.name + ": not MXFP4";
  const uint64_t in = t.ne[0], rows = t.ne[1];
  std::vector<float> row(in);
  for (uint64_t e = 0; e < t.ne[2]; ++e) {
    const model::StTensor& q = set.get(expert_base(e) + ".weight");
    const model::StTensor& s = set.get(expert_base(e) + ".scale");
    for (uint64_t i = 0; i < rows; ++i) {
      quant::dequantize_row(GgmlType::MXFP4, t.data + (e * rows + i) * t.row_bytes(), row.data(), static_cast<int64_t>(in));
      for (uint64_t j = 0; j < in; ++j) {
        const uint8_t byte = q.data[i * (in / 2) + j / 2];
        const float want = fp4_e2m1_value(j % 2 ? byte >> 4 : byte & 0xf) * e8m0_scale(s.data[i * (in / 32) + j / 32]);
        if (row[j] != want) {
          return t.name + " expert " + std::to_string(e) + " row " + std::to_string(i) + " col " + std::to_string(j) +
                 ": " + std::to_string(row[j]) + ", the checkpoint's FP4 value is " + std::to_string(want);
        }
      }
    }
  }
  return "";
}

void write_synthetic_checkpoint(const model::Deepseek4HParams& hp, uint64_t seed, const std::string& folder) {
  std::filesystem::create_directories(folder);
  std::map<std::string, StEntry> all;
  for (const model::TensorSpec& spec : model::deepseek4_tensors(hp)) add_tensor(all, spec, hp, seed);
  // The MTP block, as the release ships it beside the model (mtp.0.*).
  for (const model::TensorSpec& spec : model::mtp_tensors(hp, model::MtpLayout::Ds4Sidecar))
    add_tensor(all, spec, hp, seed, true);
  // Two shards, tensors dealt alternately; the index lists every one.
  std::map<std::string, StEntry> shard[2];
  json weight_map = json::object();
  size_t i = 0;
  for (auto& [name, e] : all) {
    const size_t k = i++ % 2;
    weight_map[name] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
    shard[k][name] = std::move(e);
  }
  for (size_t k = 0; k < 2; ++k) {
    write_safetensors((std::filesystem::path(folder) / ("model-0000" + std::to_string(k + 1) + "-of-00002.safetensors")).string(),
                      shard[k]);
  }
  write_text((std::filesystem::path(folder) / "model.safetensors.index.json").string(),
             json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(1));
  write_text((std::filesystem::path(folder) / "config.json").string(), config_of(hp).dump(1));
}

}  // namespace ds4::test
