// The weights of a deepseek4 model bound to a mapped GGUF: one TensorView per
// tensor the forward pass reads, grouped per layer, each validated against
// deepseek4_tensors(hp) for presence, shape and type. Views point into the
// File's mapping and stay valid while that File lives.
//
// Policy (docs/model-files.md):
//  - a tensor of deepseek4_tensors(hp) that is missing is an error, except
//    exp_probs_b, which ds4's loader treats as optional (absent = zero bias;
//    noted);
//  - an unexpected tensor is an error: ds4 binds by name, and a tensor we do
//    not know means a model variant we would compute wrongly. Tolerated and
//    ignored (noted): the MTP block of the llama.cpp layout (blk.<n_layer>+.*)
//    and exp_probs_b_vl (routing bias for image tokens; text never uses it);
//  - types: see allowed_types().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"
#include "model/deepseek4_config.h"
#include "model/deepseek4_tensors.h"

namespace ds4::gguf {
class File;
}

namespace ds4::model {

// One tensor's bytes inside the mapping. An absent optional tensor has
// data == nullptr.
struct TensorView {
  std::string_view name;              // inside the File
  TensorKind kind = TensorKind::TokenEmbd;
  GgmlType type = GgmlType::F32;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};  // ne[0] = row length
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  uint64_t row_bytes = 0;  // bytes of one ne[0]-long row
  uint64_t n_rows = 0;     // ne[1] * ne[2] * ne[3]

  bool present() const { return data != nullptr; }
  const uint8_t* row(uint64_t i) const { return data + i * row_bytes; }
  // 3-D expert tensors: matrix e is ne[1] consecutive rows.
  uint64_t matrix_bytes() const { return row_bytes * ne[1]; }
  const uint8_t* matrix(uint64_t e) const { return data + e * matrix_bytes(); }
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
};

// A token-window compressor: ape [coff*D, ratio], kv and gate [n_embd, coff*D], norm [D].
struct CompressorWeights {
  TensorView ape, kv, gate, norm;
  bool present() const { return kv.present(); }
};

struct LayerWeights {
  uint32_t index = 0;
  uint32_t compress_ratio = 0;  // 0, 4 or 128
  bool hash_routed = false;     // experts from ffn_gate_tid2eid

  // Attention sublayer.
  TensorView hc_attn_fn, hc_attn_scale, hc_attn_base;
  TensorView attn_norm;
  TensorView attn_q_a, attn_q_a_norm, attn_q_b;
  TensorView attn_kv, attn_kv_norm;
  CompressorWeights attn_compressor;     // ratio != 0
  TensorView indexer_q_b, indexer_proj;  // ratio 4
  CompressorWeights indexer_compressor;  // ratio 4
  TensorView attn_sinks;
  TensorView attn_output_a, attn_output_b;

  // MoE sublayer.
  TensorView hc_ffn_fn, hc_ffn_scale, hc_ffn_base;
  TensorView ffn_norm;
  TensorView ffn_gate_inp;      // router
  TensorView exp_probs_b;       // top-k layers; may be absent (zero bias)
  TensorView ffn_gate_tid2eid;  // hash layers
  TensorView ffn_gate_exps, ffn_up_exps, ffn_down_exps;
  TensorView ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;

  // Every present view of the layer, in deepseek4_tensors order.
  std::vector<const TensorView*> all() const;
};

struct Deepseek4Weights {
  TensorView token_embd;
  std::vector<LayerWeights> layers;
  TensorView output_hc_fn, output_hc_base, output_hc_scale;
  TensorView output_norm;
  TensorView output;

  // Every present view, in deepseek4_tensors order.
  std::vector<const TensorView*> all() const;
  // Tolerated tensors left unbound (MTP block, exp_probs_b_vl), and one line
  // per tolerance applied.
  std::vector<std::string> ignored_tensors;
  std::vector<std::string> notes;
  // Tensors in shards not present here (gguf::File::open_partial), unbound.
  std::vector<std::string> absent_tensors;
};

// Types a tensor of this kind may be stored in.
//   norms, HC scale/base, sinks, router bias: F32
//   tid2eid: I32
//   routed experts: IQ2_XXS, Q2_K, Q4_K, MXFP4 (published mixes) and Q6_K,
//     F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; gate and up of a layer
//     must share a type
//   every other matrix (embedding, head, HC fn, attention, compressor incl.
//     ape, indexer, router, shared expert): F32, F16, BF16, Q8_0, Q6_K, Q4_0,
//     Q4_1, Q5_0, Q5_1
std::span<const GgmlType> allowed_types(TensorKind kind);

// Binds and validates every tensor; throws ds4::Error naming the file and the
// first offending tensor (missing; unexpected; shape "has shape [a, b],
// expected [c, d]"; type "has type tq1_0; allowed: f32, f16, ..."; gate/up
// type mismatch; data past the end of the file).
// A shard set opened with shards absent (File::open_partial) binds what is
// there; a tensor it lacks is listed in absent_tensors.
Deepseek4Weights bind_weights(const gguf::File& f, const Deepseek4Config& cfg);

// What one process of a pipeline evaluates: layers [begin, end), and the
// embedding (the first stage) or the output head (the last) when asked.
// Throws ds4::Error naming `what`, the first of their tensors that is in an
// absent shard, and the absent shards' files.
void require_present(const Deepseek4Weights& w, const gguf::File& f, uint32_t begin, uint32_t end, bool embedding,
                     bool head, const std::string& what);

}  // namespace ds4::model
