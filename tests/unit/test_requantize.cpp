// ds4-quantize (model/requantize.h): what each tensor becomes (mix, then
// --tensor-type overrides, first match first; --types-from), the refusals,
// and the output: the same bytes for any thread count, tensors of unchanged
// type copied as they are (the mxfp4 mix keeps an MXFP4 source's experts
// bit for bit), a file the engine loads, and the command line (plan, progress,
// resume of an interrupted run). Byte equality with llama.cpp's quantizer is
// test_reference_requantize.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "model/quant_mix.h"
#include "model/requantize.h"
#include "quant/quant.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/subprocess.h"
#include "support/synthetic_model.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

using test::error_of;

const test::SyntheticModel& bf16_source() {
  static const test::SyntheticModel m(preset_tiny(), QuantMix::Bf16, 5);
  return m;
}

const TensorPlan& find(const std::vector<TensorPlan>& plan, const std::string& name) {
  for (const TensorPlan& t : plan)
    if (t.source->name == name) return t;
  throw Error("no " + name);
}

TEST(Requantize, MixThenOverridesFirstMatchFirst) {
  const gguf::File src = gguf::File::open(bf16_source().path());
  RequantizeOptions o;
  o.mix = QuantMix::Ds4Q4;
  o.overrides = {parse_type_override("blk\\.1\\.ffn_down_exps=q6_K"), parse_type_override("ffn_down_exps=Q8_0"),
                 parse_type_override("^output\\.weight$=bf16")};
  const RequantizeInput in = gguf_input(src);
  const std::vector<TensorPlan> plan = plan_requantize(in, o);
  ASSERT_EQ(plan.size(), src.tensors().size());
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i].source->name, src.tensors()[i].name) << "source order";
  EXPECT_EQ(find(plan, "blk.1.ffn_down_exps.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(find(plan, "blk.1.ffn_down_exps.weight").why, "--tensor-type blk\\.1\\.ffn_down_exps=q6_K");
  EXPECT_EQ(find(plan, "blk.2.ffn_down_exps.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(find(plan, "blk.2.ffn_up_exps.weight").type, GgmlType::Q4_K) << "the mix's routed type";
  EXPECT_EQ(find(plan, "blk.2.ffn_up_exps.weight").why, "mix ds4-q4");
  EXPECT_EQ(find(plan, "blk.0.attn_q_a.weight").type, GgmlType::Q8_0);
  const TensorPlan& head = find(plan, "output.weight");
  EXPECT_EQ(head.type, GgmlType::BF16);
  EXPECT_TRUE(head.copy) << "same type as the source: copied";
  EXPECT_TRUE(find(plan, "blk.0.attn_norm.weight").copy);
}

TEST(Requantize, RefusesWhatCannotBe) {
  EXPECT_NE(error_of([] { parse_type_override("ffn_down"); }).find("expected REGEX=TYPE"), std::string::npos);
  EXPECT_NE(error_of([] { parse_type_override("ffn_down=q9_K"); }).find("'q9_K' is not a ggml type name"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_type_override("ffn_(down=q4_K"); }).find("bad regular expression"), std::string::npos);
  EXPECT_NE(error_of([] { parse_type_override("x=q8_K"); }).find("cannot quantize to q8_K"), std::string::npos);

  const gguf::File src = gguf::File::open(bf16_source().path());
  const RequantizeInput in = gguf_input(src);
  RequantizeOptions o;
  o.overrides = {parse_type_override("hc_attn_scale=q8_0")};
  std::string msg = error_of([&] { plan_requantize(in, o); });
  EXPECT_NE(msg.find("tensor 'blk.0.hc_attn_scale.weight' (--tensor-type hc_attn_scale=q8_0): rows of 3 are not a "
                     "whole number of q8_0 blocks (32)"),
            std::string::npos)
      << msg;
  o.overrides = {parse_type_override("tid2eid=f16")};
  msg = error_of([&] { plan_requantize(in, o); });
  EXPECT_NE(msg.find("an integer tensor (the hash routing table) keeps its type (i32); asked for f16"), std::string::npos)
      << msg;

  // --types-from a file that lacks a tensor, or gives it another shape.
  test::TempDir dir;
  const gguf::TensorInfo& embd = src.tensor("token_embd.weight");
  gguf::Writer w;
  w.add_tensor("token_embd.weight", GgmlType::Q8_0, embd.ne, [](std::span<uint8_t>) {});
  w.write(dir.file("layout.gguf"));
  const gguf::File layout = gguf::File::open(dir.file("layout.gguf"));
  o.overrides.clear();
  o.types_from = &layout;
  msg = error_of([&] { plan_requantize(in, o); });
  EXPECT_NE(msg.find(dir.file("layout.gguf") + ": has no tensor 'blk.0."), std::string::npos) << msg;
  gguf::Writer v;
  v.add_tensor("token_embd.weight", GgmlType::F32, {embd.ne[0], embd.ne[1] - 1}, [](std::span<uint8_t>) {});
  v.write(dir.file("layout2.gguf"));
  const gguf::File layout2 = gguf::File::open(dir.file("layout2.gguf"));
  o.types_from = &layout2;
  msg = error_of([&] { plan_requantize(in, o); });
  EXPECT_NE(msg.find("tensor 'token_embd.weight' has shape"), std::string::npos) << msg;
}

TEST(Requantize, SameBytesForAnyThreadCountAndCopiesUnchangedTypes) {
  const gguf::File src = gguf::File::open(bf16_source().path());
  RequantizeOptions o;
  o.mix = QuantMix::Ds4Q2;
  // Layer 1 keeps the mix's IQ2_XXS (weight-energy importance, per expert); the rest Q4_K, quicker.
  o.overrides = {parse_type_override("blk\\.[02-9]\\.ffn_(gate|up)_exps=q4_K")};
  const RequantizeInput in = gguf_input(src);
  const std::vector<TensorPlan> plan = plan_requantize(in, o);
  test::TempDir dir;
  ThreadPool one(1), two(2);
  requantize_writer(in, plan, o, one).write(dir.file("one.gguf"));
  requantize_writer(in, plan, o, two).write(dir.file("two.gguf"));
  EXPECT_EQ(test::read_bytes(dir.file("one.gguf")), test::read_bytes(dir.file("two.gguf")));

  const Deepseek4Model m = Deepseek4Model::open(dir.file("two.gguf"));
  EXPECT_EQ(m.weights().layers[1].ffn_gate_exps.type, GgmlType::IQ2_XXS);
  EXPECT_EQ(m.weights().layers[1].ffn_down_exps.type, GgmlType::Q2_K);
  EXPECT_FALSE(m.file().find("general.file_type")) << "dropped: it would describe the source";

  // MXFP4 experts into the mxfp4 mix: the source's bytes.
  const test::SyntheticModel mx(preset_tiny(), QuantMix::Mxfp4, 6);
  const gguf::File mxf = gguf::File::open(mx.path());
  RequantizeOptions q8;
  q8.mix = QuantMix::Mxfp4;
  q8.overrides = {parse_type_override("attn_q_a\\.weight=q4_K")};
  const RequantizeInput min = gguf_input(mxf);
  const std::vector<TensorPlan> mplan = plan_requantize(min, q8);
  requantize_writer(min, mplan, q8, two).write(dir.file("mx.gguf"));
  const gguf::File out = gguf::File::open(dir.file("mx.gguf"));
  const gguf::TensorInfo& a = out.tensor("blk.2.ffn_up_exps.weight");
  EXPECT_EQ(a.type, GgmlType::MXFP4);
  EXPECT_TRUE(std::ranges::equal(a.bytes(), mxf.tensor("blk.2.ffn_up_exps.weight").bytes()));
  EXPECT_EQ(out.tensor("blk.2.attn_q_a.weight").type, GgmlType::Q4_K);
}

// A grouped product's imatrix (attn_output_a: a block of importance per
// output group, as llama-imatrix records it) gives each group's rows its own
// block: the rows quantized one by one with their group's importance.
TEST(Requantize, GroupedImportanceGoesByRowBlock) {
  const gguf::File src = gguf::File::open(bf16_source().path());
  const std::string name = "blk.0.attn_output_a.weight";
  RequantizeOptions o;
  o.overrides = {parse_type_override("attn_output_a=q4_K")};
  const uint32_t groups = bf16_source().hparams().o_groups;
  ASSERT_GE(groups, 2u);
  const gguf::TensorInfo& info = src.tensor(name);
  const uint64_t cols = info.ne[0], rows = info.ne[1], rows_per_group = rows / groups;
  std::vector<float> blocks(groups * cols);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = 0.1f + static_cast<float>((i * 7919) % 1000) / 100.0f;
  o.importance = [&](const std::string& n, uint64_t, uint64_t) {
    return n == name ? blocks : std::vector<float>{};
  };
  const RequantizeInput in = gguf_input(src);
  const std::vector<TensorPlan> plan = plan_requantize(in, o);
  const auto it = std::find_if(plan.begin(), plan.end(), [&](const TensorPlan& t) { return t.source->name == name; });
  ASSERT_NE(it, plan.end());
  ASSERT_EQ(it->type, GgmlType::Q4_K);
  const uint64_t row_bytes = *ggml_nbytes(GgmlType::Q4_K, cols);
  std::vector<uint8_t> got(rows * row_bytes);
  ThreadPool pool(2);
  requantize_tensor(*it, o, pool, got);

  std::vector<float> x(rows * cols);
  it->source->rows_f32(0, rows, x.data());
  std::vector<uint8_t> want(got.size()), first_block_only(got.size());
  for (uint64_t r = 0; r < rows; ++r) {
    quant::quantize_row(GgmlType::Q4_K, x.data() + r * cols, want.data() + r * row_bytes, static_cast<int64_t>(cols),
                        blocks.data() + (r / rows_per_group) * cols);
    quant::quantize_row(GgmlType::Q4_K, x.data() + r * cols, first_block_only.data() + r * row_bytes,
                        static_cast<int64_t>(cols), blocks.data());
  }
  EXPECT_EQ(got, want);
  EXPECT_NE(got, first_block_only) << "the groups' importance must matter here";
  // A size that is no whole number of row blocks is refused.
  blocks.resize(3 * cols);
  if (rows % 3 != 0) {
    EXPECT_NE(error_of([&] { requantize_tensor(*it, o, pool, got); }).find("dividing its"), std::string::npos);
  }
}

TEST(RequantizeCli, PlansWritesAndResumes) {
  test::TempDir dir;
  auto app = [](const std::vector<std::string>& args) { return test::run_app(DS4_BIN_DIR, "ds4-quantize", args); };
  const std::string src = bf16_source().path(), out = dir.file("q.gguf");
  test::ProcessResult r = app({"--dry-run", "--mix", "ds4-q4", "--tensor-type", "ffn_down_exps=q5_K", src, out});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("blk.0.ffn_down_exps.weight"), std::string::npos);
  EXPECT_NE(r.out.find("-> q5_K"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tensor-type ffn_down_exps=q5_K"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));

  r = app({"--mix", "ds4-q4", "-t", "2", src, out});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.err.find("100%"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ds4-quantize: wrote " + out), std::string::npos) << r.err;
  const std::vector<uint8_t> whole = test::read_bytes(out);

  // An interrupted run: what its .part holds is kept by the next run.
  std::filesystem::rename(out, out + ".part");
  std::filesystem::resize_file(out + ".part", whole.size() * 2 / 3);
  r = app({"--mix", "ds4-q4", "-t", "2", src, out});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.err.find("resuming after "), std::string::npos) << r.err;
  EXPECT_EQ(test::read_bytes(out), whole);
  // --restart ignores it.
  std::filesystem::rename(out, out + ".part");
  r = app({"--mix", "ds4-q4", "--restart", "-q", src, out});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(test::read_bytes(out), whole);

  r = app({"--mix", "q7", src, out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("ds4-quantize: --mix q7: not a mix"), std::string::npos) << r.err;
  r = app({"--tensor-type", "x", src, out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("expected REGEX=TYPE"), std::string::npos) << r.err;
  r = app({dir.file("missing.gguf"), out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ds4::model
