#include "model/hf_checkpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf_split.h"
#include "core/gguf_writer.h"
#include "model/synthetic_tokenizer.h"

namespace ds4::model {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// GGUF name (after "blk.N.") -> checkpoint name (after "layers.N.").
struct NamePair {
  std::string_view gguf, checkpoint;
};
constexpr NamePair kLayerNames[] = {
    {"hc_attn_fn.weight", "hc_attn_fn"},
    {"hc_attn_scale.weight", "hc_attn_scale"},
    {"hc_attn_base.weight", "hc_attn_base"},
    {"attn_norm.weight", "attn_norm.weight"},
    {"attn_q_a.weight", "attn.wq_a.weight"},
    {"attn_q_a_norm.weight", "attn.q_norm.weight"},
    {"attn_q_b.weight", "attn.wq_b.weight"},
    {"attn_kv.weight", "attn.wkv.weight"},
    {"attn_kv_a_norm.weight", "attn.kv_norm.weight"},
    {"attn_compressor_ape.weight", "attn.compressor.ape"},
    {"attn_compressor_kv.weight", "attn.compressor.wkv.weight"},
    {"attn_compressor_gate.weight", "attn.compressor.wgate.weight"},
    {"attn_compressor_norm.weight", "attn.compressor.norm.weight"},
    {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight"},
    {"indexer.proj.weight", "attn.indexer.weights_proj.weight"},
    {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape"},
    {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight"},
    {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight"},
    {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"attn_sinks.weight", "attn.attn_sink"},
    {"attn_output_a.weight", "attn.wo_a.weight"},
    {"attn_output_b.weight", "attn.wo_b.weight"},
    {"hc_ffn_fn.weight", "hc_ffn_fn"},
    {"hc_ffn_scale.weight", "hc_ffn_scale"},
    {"hc_ffn_base.weight", "hc_ffn_base"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"ffn_gate_inp.weight", "ffn.gate.weight"},
    {"exp_probs_b.bias", "ffn.gate.bias"},
    {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid"},
    {"ffn_gate_exps.weight", "ffn.experts.0.w1.weight"},
    {"ffn_up_exps.weight", "ffn.experts.0.w3.weight"},
    {"ffn_down_exps.weight", "ffn.experts.0.w2.weight"},
    {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"},
    {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"},
    {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"},
};
constexpr NamePair kGlobalNames[] = {
    {"token_embd.weight", "embed.weight"},       {"output.weight", "head.weight"},
    {"output_norm.weight", "norm.weight"},       {"output_hc_fn.weight", "hc_head_fn"},
    {"output_hc_base.weight", "hc_head_base"},   {"output_hc_scale.weight", "hc_head_scale"},
};

constexpr uint64_t kFp8Block = 128;
constexpr uint64_t kFp4Block = 32;

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = e4m3_to_f32(static_cast<uint8_t>(b));
    return v;
  }();
  return t;
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::vector<uint64_t> reversed(std::vector<uint64_t> v) {
  std::reverse(v.begin(), v.end());
  return v;
}

[[noreturn]] void bad(const StTensor& t, const std::string& gguf, const std::string& what) {
  throw Error(*t.shard + ": tensor '" + t.name + "' (" + gguf + "): " + what);
}

// The checkpoint's expert e name for a routed tensor's expert-0 name.
std::string expert_name(const std::string& expert0, uint32_t e) {
  const size_t at = expert0.find(".experts.0.");
  return expert0.substr(0, at) + ".experts." + std::to_string(e) + "." + expert0.substr(at + 11);
}

// A dense tensor: BF16 / F16 / F32 as they are, FP8 with its block scales.
SourceTensor dense_source(const SafetensorsSet& set, const TensorSpec& spec, const std::string& name) {
  const StTensor& t = set.get(name);
  const std::vector<uint64_t> want = reversed(without_trailing_ones(spec.ne));
  if (without_trailing_ones(reversed(t.shape)) != without_trailing_ones(spec.ne)) {
    bad(t, spec.name, "shape " + shape_text(t.shape) + ", expected " + shape_text(want));
  }
  SourceTensor s;
  s.name = spec.name;
  s.ne = spec.ne;
  s.reads = {t.data};
  const uint64_t cols = spec.ne[0];
  const StTensor* tp = &t;
  switch (t.dtype) {
    case StDtype::F32:
    case StDtype::F16:
    case StDtype::BF16: {
      const GgmlType g = t.dtype == StDtype::F32 ? GgmlType::F32 : t.dtype == StDtype::F16 ? GgmlType::F16 : GgmlType::BF16;
      s.native = g;
      s.origin = std::string(ggml_type_name(g));
      s.view = t.data;
      s.native_bytes = [tp](std::span<uint8_t> dst) { std::memcpy(dst.data(), tp->data.data(), dst.size()); };
      s.rows_f32 = [tp, cols](uint64_t row0, uint64_t n, float* dst) {
        const uint8_t* p = tp->data.data();
        for (uint64_t i = 0; i < n * cols; ++i) {
          const uint64_t at = row0 * cols + i;
          if (tp->dtype == StDtype::F32) {
            std::memcpy(dst + i, p + at * 4, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, p + at * 2, 2);
            dst[i] = tp->dtype == StDtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
          }
        }
      };
      return s;
    }
    case StDtype::F8_E4M3: {
      const StTensor& sc = set.get(name.substr(0, name.size() - std::string_view(".weight").size()) + ".scale");
      const uint64_t rows = t.shape.at(0);
      const std::vector<uint64_t> want_scale = {(rows + kFp8Block - 1) / kFp8Block, (cols + kFp8Block - 1) / kFp8Block};
      if (sc.dtype != StDtype::F8_E8M0 || sc.shape != want_scale) {
        bad(sc, spec.name, std::string(st_dtype_name(sc.dtype)) + " " + shape_text(sc.shape) + "; an FP8 weight of " +
                               shape_text(t.shape) + " needs F8_E8M0 " + shape_text(want_scale) + " block scales");
      }
      s.origin = "F8_E4M3 x F8_E8M0 (128x128 blocks)";
      s.reads.push_back(sc.data);
      const StTensor* scp = &sc;
      const uint64_t scols = want_scale[1];
      s.rows_f32 = [tp, scp, cols, scols](uint64_t row0, uint64_t n, float* dst) {
        const std::array<float, 256>& lut = e4m3_table();
        for (uint64_t r = 0; r < n; ++r) {
          const uint64_t row = row0 + r;
          const uint8_t* q = tp->data.data() + row * cols;
          const uint8_t* srow = scp->data.data() + (row / kFp8Block) * scols;
          for (uint64_t j = 0; j < cols; ++j) dst[r * cols + j] = lut[q[j]] * e8m0_to_f32(srow[j / kFp8Block]);
        }
      };
      return s;
    }
    default:
      bad(t, spec.name, "dtype " + std::string(st_dtype_name(t.dtype)) + "; expected F8_E4M3 (with .scale), BF16, F16 or F32");
  }
}

// The hash layers' routing table: I64 (or I32) ids -> I32, each in [0, n_expert).
SourceTensor tid2eid_source(const SafetensorsSet& set, const TensorSpec& spec, const std::string& name, uint32_t n_expert) {
  const StTensor& t = set.get(name);
  if (without_trailing_ones(reversed(t.shape)) != without_trailing_ones(spec.ne)) {
    bad(t, spec.name, "shape " + shape_text(t.shape) + ", expected " + shape_text(reversed(spec.ne)));
  }
  if (t.dtype != StDtype::I64 && t.dtype != StDtype::I32) {
    bad(t, spec.name, "dtype " + std::string(st_dtype_name(t.dtype)) + "; expected I64 or I32 expert ids");
  }
  SourceTensor s;
  s.name = spec.name;
  s.ne = spec.ne;
  s.native = GgmlType::I32;
  s.origin = std::string(st_dtype_name(t.dtype));
  s.reads = {t.data};
  const StTensor* tp = &t;
  const std::string gguf = spec.name;
  s.native_bytes = [tp, n_expert, gguf](std::span<uint8_t> dst) {
    const uint64_t n = tp->elements();
    for (uint64_t i = 0; i < n; ++i) {
      int64_t v;
      if (tp->dtype == StDtype::I64) {
        std::memcpy(&v, tp->data.data() + i * 8, 8);
      } else {
        int32_t w;
        std::memcpy(&w, tp->data.data() + i * 4, 4);
        v = w;
      }
      if (v < 0 || v >= n_expert) {
        bad(*tp, gguf, "entry " + std::to_string(i) + " is expert " + std::to_string(v) + ", outside [0, " +
                           std::to_string(n_expert) + ")");
      }
      const auto w = static_cast<int32_t>(v);
      std::memcpy(dst.data() + i * 4, &w, 4);
    }
  };
  return s;
}

// A routed expert tensor: n_expert matrices [out, in], each FP4 (I8 pairs,
// E8M0 per 32) or BF16 / F32, stacked into ne [in, out, n_expert].
SourceTensor experts_source(const SafetensorsSet& set, const TensorSpec& spec, const std::string& name0) {
  const uint64_t in = spec.ne[0], out = spec.ne[1], n_expert = spec.ne[2];
  struct Expert {
    const StTensor* q;
    const StTensor* scale;  // null unless FP4
  };
  std::vector<Expert> experts;
  SourceTensor s;
  s.name = spec.name;
  s.ne = spec.ne;
  bool all_fp4 = true;
  for (uint64_t e = 0; e < n_expert; ++e) {
    const std::string name = expert_name(name0, static_cast<uint32_t>(e));
    const StTensor& q = set.get(name);
    if (q.dtype == StDtype::I8 || q.dtype == StDtype::U8) {
      if (in % kFp4Block != 0) bad(q, spec.name, "FP4 rows of " + std::to_string(in) + " are not whole blocks of 32");
      if (q.shape != std::vector<uint64_t>{out, in / 2}) {
        bad(q, spec.name, "shape " + shape_text(q.shape) + "; FP4 pairs of a [" + std::to_string(out) + ", " +
                              std::to_string(in) + "] matrix are " + shape_text({out, in / 2}));
      }
      const StTensor& sc = set.get(name.substr(0, name.size() - std::string_view(".weight").size()) + ".scale");
      if (sc.dtype != StDtype::F8_E8M0 || sc.shape != std::vector<uint64_t>{out, in / kFp4Block}) {
        bad(sc, spec.name, std::string(st_dtype_name(sc.dtype)) + " " + shape_text(sc.shape) + "; expected F8_E8M0 " +
                               shape_text({out, in / kFp4Block}) + " scales, one per 32 inputs");
      }
      experts.push_back({&q, &sc});
      s.reads.push_back(q.data);
      s.reads.push_back(sc.data);
    } else if (q.dtype == StDtype::BF16 || q.dtype == StDtype::F32 || q.dtype == StDtype::F16) {
      if (q.shape != std::vector<uint64_t>{out, in}) {
        bad(q, spec.name, "shape " + shape_text(q.shape) + ", expected " + shape_text({out, in}));
      }
      experts.push_back({&q, nullptr});
      s.reads.push_back(q.data);
      all_fp4 = false;
    } else {
      bad(q, spec.name, "dtype " + std::string(st_dtype_name(q.dtype)) + "; expected I8 (FP4 pairs with .scale), BF16 or F32");
    }
  }
  s.origin = all_fp4 ? "FP4 E2M1 pairs x F8_E8M0 (per 32)" : "per-expert float matrices";
  auto shared = std::make_shared<std::vector<Expert>>(std::move(experts));
  s.rows_f32 = [shared, in, out](uint64_t row0, uint64_t n, float* dst) {
    for (uint64_t r = 0; r < n; ++r) {
      const uint64_t row = row0 + r, e = row / out, i = row % out;
      const Expert& x = (*shared)[e];
      float* y = dst + r * in;
      if (x.scale != nullptr) {
        const uint8_t* q = x.q->data.data() + i * (in / 2);
        const uint8_t* sc = x.scale->data.data() + i * (in / kFp4Block);
        for (uint64_t k = 0; k < in / 2; ++k) {
          const float d = e8m0_to_f32(sc[(2 * k) / kFp4Block]);
          y[2 * k] = e2m1_to_f32(q[k] & 0x0f) * d;
          y[2 * k + 1] = e2m1_to_f32(q[k] >> 4) * d;
        }
      } else {
        const size_t es = st_dtype_size(x.q->dtype);
        const uint8_t* p = x.q->data.data() + i * in * es;
        for (uint64_t j = 0; j < in; ++j) {
          if (x.q->dtype == StDtype::F32) {
            std::memcpy(y + j, p + j * 4, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, p + j * 2, 2);
            y[j] = x.q->dtype == StDtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
          }
        }
      }
    }
  };
  if (all_fp4) {
    s.native = GgmlType::MXFP4;
    // Per row and block of 32: the scale byte, then byte j = element j | element j + 16 << 4.
    s.native_bytes = [shared, in, out](std::span<uint8_t> dst) {
      const uint64_t blocks = in / kFp4Block;
      uint8_t* o = dst.data();
      for (const Expert& x : *shared) {
        for (uint64_t i = 0; i < out; ++i) {
          const uint8_t* q = x.q->data.data() + i * (in / 2);
          const uint8_t* sc = x.scale->data.data() + i * blocks;
          for (uint64_t b = 0; b < blocks; ++b) {
            uint8_t v[32];
            for (int k = 0; k < 16; ++k) {
              v[2 * k] = q[b * 16 + static_cast<uint64_t>(k)] & 0x0f;
              v[2 * k + 1] = q[b * 16 + static_cast<uint64_t>(k)] >> 4;
            }
            *o++ = sc[b];
            for (int j = 0; j < 16; ++j) *o++ = static_cast<uint8_t>(v[j] | (v[j + 16] << 4));
          }
        }
      }
    };
  }
  return s;
}

// llama.cpp's nextn.eh_proj: each row is e_proj's row followed by h_proj's.
SourceTensor side_by_side_source(const TensorSpec& spec, SourceTensor left, SourceTensor right) {
  SourceTensor s;
  s.name = spec.name;
  s.ne = spec.ne;
  s.origin = left.origin + " | " + right.origin;
  s.reads = left.reads;
  s.reads.insert(s.reads.end(), right.reads.begin(), right.reads.end());
  const uint64_t lc = left.ne[0], rc = right.ne[0];
  auto l = std::make_shared<SourceTensor>(std::move(left));
  auto r = std::make_shared<SourceTensor>(std::move(right));
  s.rows_f32 = [l, r, lc, rc](uint64_t row0, uint64_t n, float* dst) {
    for (uint64_t i = 0; i < n; ++i) {
      l->rows_f32(row0 + i, 1, dst + i * (lc + rc));
      r->rows_f32(row0 + i, 1, dst + i * (lc + rc) + lc);
    }
  };
  return s;
}

// The checkpoint name of an MTP tensor (model/deepseek4_mtp.h) of either layout.
std::string mtp_checkpoint_name(const TensorSpec& spec, uint32_t n_layer) {
  switch (spec.kind) {
    case TensorKind::TokenEmbd: return "embed.weight";
    case TensorKind::Output: return "head.weight";
    case TensorKind::OutputNorm: return "norm.weight";
    case TensorKind::OutputHcFn: return "mtp.0.hc_head_fn";
    case TensorKind::OutputHcBase: return "mtp.0.hc_head_base";
    case TensorKind::OutputHcScale: return "mtp.0.hc_head_scale";
    case TensorKind::MtpEProj: return "mtp.0.e_proj.weight";
    case TensorKind::MtpHProj: return "mtp.0.h_proj.weight";
    case TensorKind::MtpENorm: return "mtp.0.enorm.weight";
    case TensorKind::MtpHNorm: return "mtp.0.hnorm.weight";
    case TensorKind::MtpNorm: return "mtp.0.norm.weight";
    case TensorKind::MtpEhProj: return "";
    default: {
      // A block tensor: the main layers' name under "mtp.0.".
      const std::string layer = checkpoint_name(tensor_name(spec.kind, n_layer));
      const std::string prefix = "layers." + std::to_string(n_layer) + ".";
      return layer.empty() ? "" : "mtp.0." + layer.substr(prefix.size());
    }
  }
}

// The folder's tokenizer.json, or the synthetic tokenizer of the vocabulary
// size when it has none (test checkpoints).
void write_checkpoint_tokenizer(const std::string& tokenizer, uint32_t n_vocab, gguf::Writer& w) {
  const TokenizerData tok =
      fs::exists(tokenizer) ? import_hf_tokenizer(tokenizer, n_vocab, true) : make_synthetic_tokenizer(n_vocab);
  if (tok.size() != n_vocab) {
    throw Error(tokenizer + ": " + std::to_string(tok.size()) + " tokens for a vocabulary of " + std::to_string(n_vocab));
  }
  tok.write(w);
}

// config.json's required whole-number keys and the fields they set.
constexpr std::pair<std::string_view, uint32_t Deepseek4HParams::*> kRequiredU32[] = {
    {"num_hidden_layers", &Deepseek4HParams::n_layer},
    {"max_position_embeddings", &Deepseek4HParams::n_ctx_train},
    {"hidden_size", &Deepseek4HParams::n_embd},
    {"vocab_size", &Deepseek4HParams::n_vocab},
    {"num_attention_heads", &Deepseek4HParams::n_head},
    {"head_dim", &Deepseek4HParams::head_dim},
    {"qk_rope_head_dim", &Deepseek4HParams::n_rot},
    {"q_lora_rank", &Deepseek4HParams::q_lora_rank},
    {"o_groups", &Deepseek4HParams::o_groups},
    {"o_lora_rank", &Deepseek4HParams::o_lora_rank},
    {"sliding_window", &Deepseek4HParams::n_swa},
    {"index_n_heads", &Deepseek4HParams::indexer_n_head},
    {"index_head_dim", &Deepseek4HParams::indexer_head_dim},
    {"index_topk", &Deepseek4HParams::indexer_top_k},
    {"n_routed_experts", &Deepseek4HParams::n_expert},
    {"num_experts_per_tok", &Deepseek4HParams::n_expert_used},
    {"n_shared_experts", &Deepseek4HParams::n_expert_shared},
    {"moe_intermediate_size", &Deepseek4HParams::n_ff_exp},
    {"num_hash_layers", &Deepseek4HParams::n_hash_layers},
    {"hc_mult", &Deepseek4HParams::hc_count},
    {"hc_sinkhorn_iters", &Deepseek4HParams::hc_sinkhorn_iters},
};

template <typename T>
T config_value(const json& c, const std::string& key, const std::string& path) {
  if (!c.contains(key)) throw Error(path + ": key \"" + key + "\" missing");
  try {
    return c.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(path + ": key \"" + key + "\" is " + c.at(key).dump() + ", not the expected type");
  }
}

json read_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  if (!c.is_object()) throw Error(path + ": not a JSON object");
  return c;
}

}  // namespace

float e4m3_to_f32(uint8_t b) {
  const bool neg = b & 0x80;
  const int exp = (b >> 3) & 0x0f, man = b & 0x07;
  float v;
  if (exp == 0x0f && man == 0x07) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  }
  return neg ? -v : v;
}

float e8m0_to_f32(uint8_t e) {
  return std::bit_cast<float>(e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23);
}

float e2m1_to_f32(uint8_t nibble) {
  static constexpr float kValues[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  return kValues[nibble & 0x0f];
}

std::string checkpoint_name(const std::string& gguf_name) {
  for (const NamePair& p : kGlobalNames)
    if (p.gguf == gguf_name) return std::string(p.checkpoint);
  const int64_t layer = gguf::tensor_layer(gguf_name);
  if (layer < 0) return "";
  const std::string prefix = "blk." + std::to_string(layer) + ".";
  const std::string_view stem = std::string_view(gguf_name).substr(prefix.size());
  for (const NamePair& p : kLayerNames)
    if (p.gguf == stem) return "layers." + std::to_string(layer) + "." + std::string(p.checkpoint);
  return "";
}

Deepseek4HParams hparams_from_config(const std::string& path) {
  const json c = read_config(path);
  Deepseek4HParams hp;
  hp.name = c.value("_name_or_path", std::string("deepseek4"));
  if (hp.name.empty()) hp.name = "deepseek4";
  for (const auto& [key, field] : kRequiredU32) hp.*field = config_value<uint32_t>(c, std::string(key), path);
  hp.n_head_kv = c.contains("num_key_value_heads") ? config_value<uint32_t>(c, "num_key_value_heads", path) : 1;
  std::vector<uint32_t> ratios = config_value<std::vector<uint32_t>>(c, "compress_ratios", path);
  if (ratios.size() < hp.n_layer) {
    throw Error(path + ": \"compress_ratios\" has " + std::to_string(ratios.size()) + " entries for " +
                std::to_string(hp.n_layer) + " layers");
  }
  ratios.resize(hp.n_layer);  // the entries past the layers belong to the MTP block
  hp.compress_ratios = ratios;
  hp.n_hash_layers = std::min(hp.n_hash_layers, hp.n_layer);
  if (c.contains("scoring_func") && config_value<std::string>(c, "scoring_func", path) != "sqrtsoftplus") {
    throw Error(path + ": \"scoring_func\" is " + c["scoring_func"].dump() + "; the deepseek4 family routes by sqrtsoftplus");
  }
  hp.expert_weights_scale = c.contains("routed_scaling_factor") ? config_value<float>(c, "routed_scaling_factor", path) : 1.0f;
  hp.expert_weights_norm = c.contains("norm_topk_prob") ? config_value<bool>(c, "norm_topk_prob", path) : true;
  const float clamp = c.contains("swiglu_limit") ? config_value<float>(c, "swiglu_limit", path) : 0.0f;
  hp.swiglu_clamp_exp.assign(hp.n_layer, clamp);
  hp.hc_eps = config_value<float>(c, "hc_eps", path);
  hp.rms_eps = config_value<float>(c, "rms_norm_eps", path);
  hp.rope_freq_base = config_value<float>(c, "rope_theta", path);
  hp.compress_rope_freq_base = config_value<float>(c, "compress_rope_theta", path);
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object()) {
    const json& r = c["rope_scaling"];
    const std::string where = path + " rope_scaling";
    hp.rope_scaling_type = r.value("type", r.value("rope_type", std::string("yarn")));
    hp.rope_scaling_factor = config_value<float>(r, "factor", where);
    hp.rope_scaling_orig_ctx = config_value<uint32_t>(r, "original_max_position_embeddings", where);
    hp.yarn_beta_fast = config_value<float>(r, "beta_fast", where);
    hp.yarn_beta_slow = config_value<float>(r, "beta_slow", where);
  }
  try {
    hp.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return hp;
}

uint32_t mtp_blocks_from_config(const std::string& path, const Deepseek4HParams& hp) {
  const json c = read_config(path);
  const uint32_t blocks =
      c.contains("num_nextn_predict_layers") ? config_value<uint32_t>(c, "num_nextn_predict_layers", path) : 0;
  if (blocks == 0) return 0;
  const auto ratios = config_value<std::vector<uint32_t>>(c, "compress_ratios", path);
  if (ratios.size() <= hp.n_layer || ratios[hp.n_layer] != 0) {
    throw Error(path + ": \"compress_ratios\" entry " + std::to_string(hp.n_layer) + " (the MTP block's) is " +
                (ratios.size() <= hp.n_layer ? std::string("missing") : std::to_string(ratios[hp.n_layer])) +
                "; the MTP block attends by sliding window only (ratio 0)");
  }
  return blocks;
}

RequantizeInput checkpoint_input(const SafetensorsSet& set, const Deepseek4HParams& hp, MetadataFlavour flavour) {
  RequantizeInput in;
  in.path = set.folder();
  in.hp = hp;
  for (const TensorSpec& spec : deepseek4_tensors(hp)) {
    const std::string name = checkpoint_name(spec.name);
    if (name.empty()) throw Error(spec.name + ": no checkpoint counterpart (internal)");
    if (spec.kind == TensorKind::FfnGateExps || spec.kind == TensorKind::FfnUpExps || spec.kind == TensorKind::FfnDownExps) {
      in.tensors.push_back(experts_source(set, spec, name));
    } else if (spec.kind == TensorKind::FfnGateTid2Eid) {
      in.tensors.push_back(tid2eid_source(set, spec, name, hp.n_expert));
    } else {
      in.tensors.push_back(dense_source(set, spec, name));
    }
  }
  in.specs = deepseek4_tensors(hp);
  const std::string tokenizer = (fs::path(set.folder()) / "tokenizer.json").string();
  in.write_metadata = [hp, tokenizer, flavour, specs = in.specs](gguf::Writer& w) {
    write_model_metadata(hp, flavour, specs, w);
    write_checkpoint_tokenizer(tokenizer, hp.n_vocab, w);
  };
  return in;
}

RequantizeInput checkpoint_mtp_input(const SafetensorsSet& set, const Deepseek4HParams& hp, MtpLayout layout,
                                     MetadataFlavour flavour) {
  const std::string config = (fs::path(set.folder()) / "config.json").string();
  const uint32_t blocks = mtp_blocks_from_config(config, hp);
  if (blocks == 0) throw Error(config + ": \"num_nextn_predict_layers\" is 0: the checkpoint has no MTP block");
  if (blocks > 1) {
    throw Error(config + ": \"num_nextn_predict_layers\" is " + std::to_string(blocks) +
                "; ds4's and llama.cpp's MTP layouts hold one block (mtp.0)");
  }
  RequantizeInput in;
  in.path = set.folder();
  in.hp = hp;
  in.specs = mtp_tensors(hp, layout);
  for (const TensorSpec& spec : in.specs) {
    if (spec.kind == TensorKind::MtpEhProj) {
      TensorSpec half = spec;
      half.ne = {hp.n_embd, hp.n_embd};
      in.tensors.push_back(side_by_side_source(spec, dense_source(set, half, "mtp.0.e_proj.weight"),
                                               dense_source(set, half, "mtp.0.h_proj.weight")));
      continue;
    }
    const std::string name = mtp_checkpoint_name(spec, hp.n_layer);
    if (name.empty()) throw Error(spec.name + ": no checkpoint counterpart (internal)");
    if (spec.family() == TensorFamily::RoutedGateUp || spec.family() == TensorFamily::RoutedDown) {
      in.tensors.push_back(experts_source(set, spec, name));
    } else {
      in.tensors.push_back(dense_source(set, spec, name));
    }
  }
  const std::string tokenizer = (fs::path(set.folder()) / "tokenizer.json").string();
  in.write_metadata = [hp, layout, flavour, tokenizer, specs = in.specs](gguf::Writer& w) {
    if (layout == MtpLayout::Ds4Sidecar) {
      write_mtp_sidecar_metadata(hp, w);
      return;
    }
    write_model_metadata(with_mtp_block(hp), flavour, specs, w, 1);
    write_checkpoint_tokenizer(tokenizer, hp.n_vocab, w);
  };
  return in;
}

}  // namespace ds4::model
