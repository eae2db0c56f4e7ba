#include "model/quant_mix.h"

#include <array>
#include <string>

#include "core/error.h"

namespace ds4::model {
namespace {

struct MixName {
  QuantMix mix;
  std::string_view name;
};
constexpr std::array<MixName, 14> kMixNames{{
    {QuantMix::F32, "f32"},
    {QuantMix::F16, "f16"},
    {QuantMix::Q8_0, "q8_0"},
    {QuantMix::Ds4Q2, "ds4-q2"},
    {QuantMix::Ds4Q4, "ds4-q4"},
    {QuantMix::Mxfp4, "mxfp4"},
    {QuantMix::Bf16, "bf16"},
    {QuantMix::LlamaConvert, "llama-convert"},
    {QuantMix::Q6_K, "q6_K"},
    {QuantMix::Iq3Xxs, "iq3_xxs"},
    {QuantMix::Q3_K, "q3_K"},
    {QuantMix::Q5_K, "q5_K"},
    {QuantMix::Iq4Xs, "iq4_xs"},
    {QuantMix::Legacy, "legacy"},
}};

bool rows_fit(GgmlType type, uint64_t row_length) {
  return row_length % ggml_type_traits(type).block_elems == 0;
}

// Q8_0 where the row allows it, else `fallback` (a float type: any row length).
GgmlType q8_0_or(const TensorSpec& spec, GgmlType fallback) {
  return rows_fit(GgmlType::Q8_0, spec.row_length()) ? GgmlType::Q8_0 : fallback;
}
GgmlType q8_0_or_f16(const TensorSpec& spec) { return q8_0_or(spec, GgmlType::F16); }

GgmlType routed(QuantMix mix, const TensorSpec& spec) {
  GgmlType type = GgmlType::F32;
  switch (mix) {
    case QuantMix::Ds4Q2:
      type = spec.family() == TensorFamily::RoutedDown ? GgmlType::Q2_K : GgmlType::IQ2_XXS;
      break;
    case QuantMix::Ds4Q4: type = GgmlType::Q4_K; break;
    case QuantMix::Mxfp4:
    case QuantMix::LlamaConvert: type = GgmlType::MXFP4; break;
    case QuantMix::Legacy:
      type = spec.family() == TensorFamily::RoutedDown ? GgmlType::Q4_1 : GgmlType::Q4_0;
      break;
    default: break;
  }
  if (!rows_fit(type, spec.row_length())) {
    const auto& tr = ggml_type_traits(type);
    throw Error("mix " + std::string(quant_mix_name(mix)) + ": " + spec.name + " row length " +
                std::to_string(spec.row_length()) + " is not a multiple of " + std::to_string(tr.block_elems) +
                " (" + std::string(tr.name) + " blocks); routed rows are the embedding length (gate/up) and the " +
                "expert FF length (down)");
  }
  return type;
}

// A weight matrix of the llama-convert mix (see quant_mix.h): the converter
// stores an FP8 checkpoint matrix as Q8_0 (F16 where gguf-py cannot quantise
// the row), keeps F32 and BF16 ones, and repacks the FP4 experts as MXFP4.
GgmlType llama_convert_type(const TensorSpec& spec) {
  switch (spec.family()) {
    case TensorFamily::RoutedGateUp:
    case TensorFamily::RoutedDown: return routed(QuantMix::LlamaConvert, spec);
    case TensorFamily::AttnProjection:
    case TensorFamily::SharedExpert: return q8_0_or_f16(spec);  // FP8
    case TensorFamily::IndexerProj:  // indexer.attn_q_b is FP8, indexer.proj BF16
      return spec.kind == TensorKind::IndexerQB ? q8_0_or_f16(spec) : GgmlType::BF16;
    case TensorFamily::HcFn:
    case TensorFamily::CompressorApe: return GgmlType::F32;
    default: return GgmlType::BF16;  // embedding, output head, router, compressor kv/gate
  }
}

// A weight matrix of the legacy mix (see quant_mix.h).
GgmlType legacy_type(const TensorSpec& spec) {
  GgmlType type = GgmlType::F16;
  switch (spec.family()) {
    case TensorFamily::RoutedGateUp:
    case TensorFamily::RoutedDown: return routed(QuantMix::Legacy, spec);
    case TensorFamily::AttnProjection:
    case TensorFamily::OutputHead: type = GgmlType::Q5_0; break;
    case TensorFamily::SharedExpert:
    case TensorFamily::Embedding: type = GgmlType::Q5_1; break;
    default: break;  // HC fn, compressor, indexer, router
  }
  return rows_fit(type, spec.row_length()) ? type : GgmlType::F16;
}

}  // namespace

std::string_view quant_mix_name(QuantMix mix) {
  for (const auto& m : kMixNames)
    if (m.mix == mix) return m.name;
  return "?";
}

std::optional<QuantMix> quant_mix_from_name(std::string_view name) {
  for (const auto& m : kMixNames)
    if (m.name == name) return m.mix;
  return std::nullopt;
}

std::string_view quant_mix_names() {
  return "f32|f16|q8_0|ds4-q2|ds4-q4|mxfp4|bf16|llama-convert|q6_K|iq3_xxs|q3_K|q5_K|iq4_xs|legacy";
}

GgmlType tensor_type(QuantMix mix, const TensorSpec& spec) {
  const TensorFamily fam = spec.family();
  switch (fam) {
    case TensorFamily::Tid2Eid: return GgmlType::I32;
    case TensorFamily::Norm:
    case TensorFamily::HcScale:
    case TensorFamily::HcBase:
    case TensorFamily::AttnSinks:
    case TensorFamily::RouterBias: return GgmlType::F32;
    default: break;
  }
  // Weight matrices from here on.
  switch (mix) {
    case QuantMix::F32: return GgmlType::F32;
    case QuantMix::F16: return GgmlType::F16;
    case QuantMix::Q8_0: return q8_0_or_f16(spec);
    case QuantMix::Bf16: return GgmlType::BF16;
    case QuantMix::Q6_K: return rows_fit(GgmlType::Q6_K, spec.row_length()) ? GgmlType::Q6_K : GgmlType::F16;
    case QuantMix::Iq3Xxs: {
      const GgmlType type = fam == TensorFamily::Embedding ? GgmlType::IQ3_S : GgmlType::IQ3_XXS;
      return rows_fit(type, spec.row_length()) ? type : GgmlType::F16;
    }
    case QuantMix::Q3_K: return rows_fit(GgmlType::Q3_K, spec.row_length()) ? GgmlType::Q3_K : GgmlType::F16;
    case QuantMix::Q5_K: return rows_fit(GgmlType::Q5_K, spec.row_length()) ? GgmlType::Q5_K : GgmlType::F16;
    case QuantMix::Iq4Xs:
      if (rows_fit(GgmlType::IQ4_XS, spec.row_length())) return GgmlType::IQ4_XS;
      return rows_fit(GgmlType::IQ4_NL, spec.row_length()) ? GgmlType::IQ4_NL : GgmlType::F16;
    case QuantMix::LlamaConvert: return llama_convert_type(spec);
    case QuantMix::Legacy: return legacy_type(spec);
    case QuantMix::Ds4Q2:
    case QuantMix::Ds4Q4:
    case QuantMix::Mxfp4: break;
  }
  switch (fam) {
    case TensorFamily::RoutedGateUp:
    case TensorFamily::RoutedDown: return routed(mix, spec);
    case TensorFamily::AttnProjection:
    case TensorFamily::SharedExpert:
    case TensorFamily::OutputHead: return q8_0_or_f16(spec);
    default: return GgmlType::F16;  // embedding, HC fn, compressor, indexer, router
  }
}

void check_mix(QuantMix mix, const Deepseek4HParams& hp) {
  for (const TensorSpec& s : deepseek4_tensors(hp)) (void)tensor_type(mix, s);
}

}  // namespace ds4::model
