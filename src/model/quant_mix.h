// Quant mixes: which ggml type each tensor of a deepseek4 file is stored in.
//
//   f32, f16, q8_0   every weight matrix in that type (token_embd, output, HC fn,
//                    attention, compressor incl. ape, indexer, router, shared and
//                    routed experts). q8_0 needs a row length that is a multiple
//                    of 32; a matrix whose row is not falls back to f16.
//   ds4-q2           as the published DS4 files: routed gate/up IQ2_XXS, routed
//                    down Q2_K; attention projections, shared expert and output
//                    head Q8_0; embedding, HC fn, compressor, indexer and router
//                    F16.
//   ds4-q4           ds4-q2 with Q4_K for all routed experts.
//   mxfp4            ds4-q2 with MXFP4 for all routed experts.
//   bf16             every weight matrix in BF16.
//   q6_K             every weight matrix in Q6_K where its row is a multiple
//                    of 256, F16 otherwise.
//   iq3_xxs          every weight matrix in IQ3_XXS (token_embd IQ3_S, as
//                    llama-quantize's IQ3_XXS preset) where its row is a
//                    multiple of 256, F16 otherwise.
//   q3_K, q5_K       every weight matrix in Q3_K / Q5_K where its row is a
//                    multiple of 256, F16 otherwise.
//   iq4_xs           every weight matrix in IQ4_XS, falling back to IQ4_NL (as
//                    llama-quantize does) where the row is a multiple of 32
//                    only, F16 otherwise.
//   legacy           the 32-element formats, one per family: routed gate/up
//                    Q4_0, routed down Q4_1, attention projections and output
//                    head Q5_0, shared expert and embedding Q5_1; HC fn,
//                    compressor, indexer and router F16 (and any matrix whose
//                    row is not a multiple of 32, except routed ones).
//   llama-convert    the layout llama.cpp's converter (conversion/deepseek.py
//                    DeepseekV4Model.tensor_force_quant) writes from the
//                    official FP8/FP4 checkpoint: an FP8 matrix becomes Q8_0,
//                    F32 and BF16 matrices keep their type, FP4 experts are
//                    repacked as MXFP4. Per the checkpoint's dtypes: attention
//                    projections (wo_a included), indexer.attn_q_b and shared
//                    expert Q8_0; embedding, output head, router, compressor
//                    kv/gate and indexer.proj BF16; HC fn and compressor ape
//                    F32; routed experts MXFP4. The converter's rules are read
//                    from its source; the checkpoint dtypes from DeepSeek's
//                    reference model.py and published header listings, not
//                    from a real file. A Q8_0 matrix whose row is not a
//                    multiple of 32 falls back to F16, as gguf-py does.
// In every mix: norms, router bias, attention sinks, HC scale and base stay F32
// and ffn_gate_tid2eid is I32. Routed types have no fallback: a row length that
// is not a whole number of their blocks (256 for K/IQ quants, 32 for MXFP4) is
// an error, because the mix is defined by them.
#pragma once

#include <optional>
#include <string_view>

#include "core/ggml_type.h"
#include "model/deepseek4_tensors.h"

namespace ds4::model {

enum class QuantMix { F32, F16, Q8_0, Ds4Q2, Ds4Q4, Mxfp4, Bf16, LlamaConvert, Q6_K, Iq3Xxs, Q3_K, Q5_K, Iq4Xs, Legacy };

std::string_view quant_mix_name(QuantMix mix);  // "f32", ..., "ds4-q2", "mxfp4"
std::optional<QuantMix> quant_mix_from_name(std::string_view name);
// "f32|f16|q8_0|ds4-q2|ds4-q4|mxfp4|bf16|llama-convert|q6_K|iq3_xxs|q3_K|q5_K|iq4_xs|legacy",
// for help texts.
std::string_view quant_mix_names();

// The type of one tensor. Throws ds4::Error naming the tensor and the row-length
// rule when a routed-expert type cannot hold its rows.
GgmlType tensor_type(QuantMix mix, const TensorSpec& spec);

// tensor_type for every tensor of hp, so a bad combination fails before any
// writing starts.
void check_mix(QuantMix mix, const Deepseek4HParams& hp);

}  // namespace ds4::model
