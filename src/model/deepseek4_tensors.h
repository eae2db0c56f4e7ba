// The tensors of a deepseek4 GGUF for given hyperparameters: names, shapes
// (ne order, ne[0] = contiguous row length) and what each one is. The single
// source of truth for the writer (ds4-mkmodel), quant mixes and load-time
// validation; shapes are the ones llama.cpp's deepseek4 loader creates.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/deepseek4_hparams.h"

namespace ds4::gguf {
class File;
}

namespace ds4::model {

// One value per tensor kind of the family.
enum class TensorKind : uint8_t {
  // Global.
  TokenEmbd,      // token_embd           [n_embd, n_vocab]
  OutputHcFn,     // output_hc_fn         [hc_dim, hc]
  OutputHcBase,   // output_hc_base       [hc]
  OutputHcScale,  // output_hc_scale      [1]
  OutputNorm,     // output_norm          [n_embd]
  Output,         // output               [n_embd, n_vocab]
  // Attention sublayer.
  HcAttnFn,       // hc_attn_fn           [hc_dim, hc_mix]
  HcAttnScale,    // hc_attn_scale        [3]
  HcAttnBase,     // hc_attn_base         [hc_mix]
  AttnNorm,       // attn_norm            [n_embd]
  AttnQA,         // attn_q_a             [n_embd, q_lora]
  AttnQANorm,     // attn_q_a_norm        [q_lora]
  AttnQB,         // attn_q_b             [q_lora, n_head*head_dim]
  AttnKv,         // attn_kv              [n_embd, head_dim]
  AttnKvNorm,     // attn_kv_a_norm       [head_dim]
  AttnCompApe,    // attn_compressor_ape  [coff*head_dim, ratio]     ratio != 0
  AttnCompKv,     // attn_compressor_kv   [n_embd, coff*head_dim]    ratio != 0
  AttnCompGate,   // attn_compressor_gate [n_embd, coff*head_dim]    ratio != 0
  AttnCompNorm,   // attn_compressor_norm [head_dim]                 ratio != 0
  IndexerQB,      // indexer.attn_q_b     [q_lora, idx_heads*idx_dim]  ratio 4
  IndexerProj,    // indexer.proj         [n_embd, idx_heads]          ratio 4
  IndexerCompApe,   // indexer_compressor_ape  [2*idx_dim, 4]          ratio 4
  IndexerCompKv,    // indexer_compressor_kv   [n_embd, 2*idx_dim]     ratio 4
  IndexerCompGate,  // indexer_compressor_gate [n_embd, 2*idx_dim]     ratio 4
  IndexerCompNorm,  // indexer_compressor_norm [idx_dim]               ratio 4
  AttnSinks,      // attn_sinks           [n_head]
  AttnOutA,       // attn_output_a        [n_head*head_dim/G, o_lora*G]
  AttnOutB,       // attn_output_b        [o_lora*G, n_embd]
  // MoE sublayer.
  HcFfnFn,        // hc_ffn_fn            [hc_dim, hc_mix]
  HcFfnScale,     // hc_ffn_scale         [3]
  HcFfnBase,      // hc_ffn_base          [hc_mix]
  FfnNorm,        // ffn_norm             [n_embd]
  FfnGateInp,     // ffn_gate_inp (router) [n_embd, n_expert]
  ExpProbsB,      // exp_probs_b.bias     [n_expert]                 non-hash layers
  FfnGateTid2Eid, // ffn_gate_tid2eid     [n_expert_used, n_vocab]   hash layers, I32
  FfnGateExps,    // ffn_gate_exps        [n_embd, n_ff_exp, n_expert]
  FfnUpExps,      // ffn_up_exps          [n_embd, n_ff_exp, n_expert]
  FfnDownExps,    // ffn_down_exps        [n_ff_exp, n_embd, n_expert]
  FfnGateShexp,   // ffn_gate_shexp       [n_embd, n_ff_exp*n_shared]
  FfnUpShexp,     // ffn_up_shexp         [n_embd, n_ff_exp*n_shared]
  FfnDownShexp,   // ffn_down_shexp       [n_ff_exp*n_shared, n_embd]
  // The MTP draft block's own tensors (model/deepseek4_mtp.h); its other
  // tensors are a layer's kinds.
  MtpEProj,       // e_proj               [n_embd, n_embd]      ds4's sidecar
  MtpHProj,       // h_proj               [n_embd, n_embd]      ds4's sidecar
  MtpEhProj,      // nextn.eh_proj        [2*n_embd, n_embd]    llama.cpp: [e_proj | h_proj] per row
  MtpENorm,       // enorm / nextn.enorm  [n_embd]
  MtpHNorm,       // hnorm / nextn.hnorm  [n_embd]
  MtpNorm,        // norm / nextn.shared_head_norm [n_embd]
};

// Coarser grouping: what a quant mix and the weight generator decide by.
enum class TensorFamily : uint8_t {
  Embedding,       // token_embd
  OutputHead,      // output
  Norm,            // every RMSNorm weight
  HcFn,            // hc_attn_fn, hc_ffn_fn, output_hc_fn
  HcScale,         // hc_*_scale, output_hc_scale
  HcBase,          // hc_*_base, output_hc_base
  AttnProjection,  // attn_q_a, attn_q_b, attn_kv, attn_output_a, attn_output_b
  AttnSinks,
  CompressorProj,  // attn/indexer compressor kv and gate
  CompressorApe,   // attn/indexer compressor ape
  IndexerProj,     // indexer.attn_q_b, indexer.proj
  Router,          // ffn_gate_inp
  RouterBias,      // exp_probs_b
  Tid2Eid,         // ffn_gate_tid2eid
  SharedExpert,    // ffn_{gate,up,down}_shexp
  RoutedGateUp,    // ffn_gate_exps, ffn_up_exps
  RoutedDown,      // ffn_down_exps
};

TensorFamily family_of(TensorKind kind);
std::string_view family_name(TensorFamily family);
// GGUF name without "blk.N." and without ".weight"/".bias", e.g. "attn_q_a".
std::string_view kind_stem(TensorKind kind);
// Full GGUF name: "blk.3.attn_q_a.weight", "output.weight", "blk.5.exp_probs_b.bias".
// layer is ignored for global kinds.
std::string tensor_name(TensorKind kind, uint32_t layer);
bool is_global(TensorKind kind);

struct TensorSpec {
  std::string name;
  TensorKind kind;
  int32_t layer;              // -1 for global tensors
  std::vector<uint64_t> ne;   // ne[0] = row length

  TensorFamily family() const { return family_of(kind); }
  uint64_t n_elements() const;
  uint64_t row_length() const { return ne[0]; }
};

// Every tensor of a file with these hyperparameters, in write order: token_embd,
// each layer's tensors in computation order, then the output head. Validates hp.
std::vector<TensorSpec> deepseek4_tensors(const Deepseek4HParams& hp);

// "[4096, 1024]": a shape as error messages print it.
std::string format_shape(std::span<const uint64_t> ne);
// A file's shape compared with a spec: GGUF writers may keep trailing 1s (gguf-py does).
std::vector<uint64_t> without_trailing_ones(std::vector<uint64_t> ne);

// Checks that the file's tensor directory is exactly deepseek4_tensors(hp):
// every tensor present with its shape (trailing 1s ignored), no extra tensor,
// tid2eid stored as I32. Throws ds4::Error naming the first offending tensor.
// Quant types other than I32 are for the engine to accept or refuse.
void validate_tensor_directory(const gguf::File& f, const Deepseek4HParams& hp);

}  // namespace ds4::model
