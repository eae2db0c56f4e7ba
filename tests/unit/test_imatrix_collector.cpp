// ds4-imatrix's collection (engine/imatrix_collector.h) and its run over a
// text (engine/imatrix_run.h). Truths: llama-imatrix's rules worked by hand
// on small rows (which products, the 16-row rule, counts, groups, experts);
// on a model, the hash layers' routing table (their experts' counts follow
// from the tokens alone) and the forward pass's own per-token trace (the
// first layer's q_a input is its attn_norm output). The same files against
// llama-imatrix on llama.cpp's activations: test_reference_imatrix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/forward.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/imatrix_collector.h"
#include "engine/imatrix_run.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"
#include "support/error_of.h"
#include "support/synthetic_model.h"
#include "text/tokenizer.h"

namespace ds4::engine {
namespace {

using backend::MatrixSlice;
using test::error_of;

model::TensorView view(const char* name, uint64_t width) {
  model::TensorView v;
  v.name = name;
  v.ne = {width, 1, 1, 1};
  return v;
}

void met(ImatrixCollector& c, const model::TensorView& w, MatrixSlice slice,
         const std::vector<std::vector<float>>& rows, int64_t chunk_tokens) {
  std::vector<const float*> p;
  for (const auto& r : rows) p.push_back(r.data());
  c.met(w, slice, p, chunk_tokens);
}

TEST(ImatrixCollector, LlamaImatrixRules) {
  ImatrixCollector c;
  const auto q_a = view("blk.0.attn_q_a.weight", 3);
  met(c, q_a, {}, {{1, 2, 3}, {0, 1, -1}}, 16);
  met(c, q_a, {}, {{5, 5, 5}}, 15);  // a batch under 16 rows: skipped
  met(c, view("output_hc_fn.weight", 3), {}, {{1, 1, 1}}, 64);  // not blk.*
  met(c, view("output.weight", 3), {}, {{1, 1, 1}}, 64);        // only with process_output
  // Routed experts count every batch, per expert.
  const auto up = view("blk.0.ffn_up_exps.weight", 2);
  met(c, up, {MatrixSlice::Kind::Expert, 1, 3}, {{1, 1}, {2, 0}}, 1);
  met(c, up, {MatrixSlice::Kind::Expert, 2, 3}, {{0, 3}}, 1);
  // A grouped product: each group's columns in turn, its rows counted once.
  const auto oa = view("blk.0.attn_output_a.weight", 2);
  met(c, oa, {MatrixSlice::Kind::Group, 0, 2}, {{1, 2}}, 16);
  met(c, oa, {MatrixSlice::Kind::Group, 1, 2}, {{3, 4}}, 16);

  const model::Imatrix per_group = c.result(true);
  ASSERT_EQ(per_group.entries.size(), 3u);
  EXPECT_EQ(per_group.entries.at("blk.0.attn_q_a.weight").sums, (std::vector<float>{1, 5, 10}));
  EXPECT_EQ(per_group.entries.at("blk.0.attn_q_a.weight").counts, (std::vector<float>{2}));
  EXPECT_EQ(per_group.entries.at("blk.0.ffn_up_exps.weight").sums, (std::vector<float>{0, 0, 5, 1, 0, 9}));
  EXPECT_EQ(per_group.entries.at("blk.0.ffn_up_exps.weight").counts, (std::vector<float>{0, 2, 1}));
  EXPECT_EQ(per_group.entries.at("blk.0.attn_output_a.weight").sums, (std::vector<float>{1, 4, 9, 16}));
  EXPECT_EQ(per_group.entries.at("blk.0.attn_output_a.weight").counts, (std::vector<float>{1}));
  // By default the groups' mean under the rows' count.
  const model::Imatrix merged = c.result();
  EXPECT_EQ(merged.entries.at("blk.0.attn_output_a.weight").sums, (std::vector<float>{5, 10}));
  EXPECT_EQ(merged.entries.at("blk.0.attn_output_a.weight").counts, (std::vector<float>{1}));
  EXPECT_EQ(merged.entries.at("blk.0.attn_q_a.weight").sums, (std::vector<float>{1, 5, 10}));

  ImatrixCollector with_output(true);
  met(with_output, view("output.weight", 3), {}, {{1, 2, 2}}, 64);
  EXPECT_EQ(with_output.result().entries.at("output.weight").sums, (std::vector<float>{1, 4, 4}));
}

TEST(ImatrixCollector, RefusesWhatDoesNotFit) {
  ImatrixCollector c;
  met(c, view("blk.0.attn_kv.weight", 2), {}, {{1, 1}}, 16);
  EXPECT_NE(error_of([&] { met(c, view("blk.0.attn_kv.weight", 3), {}, {{1, 1, 1}}, 16); })
                .find("blk.0.attn_kv.weight met inputs of another shape"),
            std::string::npos);
  const float inf = std::numeric_limits<float>::infinity();
  met(c, view("blk.1.attn_kv.weight", 2), {}, {{inf, 1}}, 16);
  EXPECT_NE(error_of([&] { c.check(); }).find("the inputs of blk.1.attn_kv.weight are not finite"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.result(); }).find("not finite"), std::string::npos);
}

TEST(ImatrixCollector, ExpertsFromManyThreadsAddUp) {
  ImatrixCollector c;
  const auto down = view("blk.3.ffn_down_exps.weight", 4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) met(c, down, {MatrixSlice::Kind::Expert, (t + i) % 8, 8}, {{1, 1, 1, 1}}, 2);
    });
  for (auto& t : threads) t.join();
  const model::Imatrix m = c.result();
  const model::ImatrixEntry& e = m.entries.at("blk.3.ffn_down_exps.weight");
  float rows = 0;
  for (const float n : e.counts) rows += n;
  EXPECT_EQ(rows, 1000.0f);
  for (int x = 0; x < 8; ++x) EXPECT_EQ(e.sums[static_cast<size_t>(x) * 4], e.counts[static_cast<size_t>(x)]);
}

const test::SyntheticModel& tiny() {
  static const test::SyntheticModel m(model::preset_tiny(), model::QuantMix::Ds4Q2, 17);
  return m;
}

EngineOptions quality(const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.numerics = backend::Numerics::Quality;
  o.prefill_chunk = 32;
  return o;
}

std::string some_text() {
  std::string s;
  for (int i = 0; i < 60; ++i) s += "the sea <think> rolls " + std::to_string(i * 37) + " waves, 東京 and <｜User｜> ";
  return s;
}

TEST(ImatrixRun, ChunksOfTheTextAsLlamaImatrixFeedsThem) {
  Engine engine(quality(tiny().path()));
  ASSERT_TRUE(engine.facts().add_bos);
  const std::string text = some_text();
  ImatrixRunOptions o;
  o.chunk_tokens = 32;
  o.max_chunks = 3;
  o.dataset = "sea.txt";
  const ImatrixRunResult r = run_imatrix(engine, text, o);
  const text::Tokenizer& tok = engine.tokenizer();
  std::vector<int32_t> tokens{tok.bos()};
  for (const int32_t t : tok.encode(text, text::Tokenizer::SpecialTokens::UserDefined)) tokens.push_back(t);
  EXPECT_EQ(r.n_tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(r.n_chunks, 3);
  EXPECT_GT(r.perplexity, 1.0);
  const model::Imatrix& m = r.imatrix;
  EXPECT_EQ(m.chunk_count, 3u);
  EXPECT_EQ(m.chunk_size, 32u);
  EXPECT_EQ(m.datasets, (std::vector<std::string>{"sea.txt"}));
  EXPECT_EQ(m.entries.at("blk.2.attn_kv.weight").counts, (std::vector<float>{96}));
  EXPECT_FALSE(m.entries.contains("output.weight"));
  EXPECT_FALSE(m.entries.contains("output_hc_fn.weight"));

  // Each chunk's first token is BOS; the hash layers route by token id, so
  // their experts' counts are the table's for those tokens.
  std::vector<int32_t> fed;
  for (int c = 0; c < 3; ++c) {
    fed.push_back(tok.bos());
    fed.insert(fed.end(), tokens.begin() + c * 32 + 1, tokens.begin() + (c + 1) * 32);
  }
  const model::Deepseek4HParams& hp = tiny().hparams();
  for (uint32_t il = 0; il < hp.n_hash_layers; ++il) {
    const model::TensorView& table = tiny().layer(static_cast<int>(il)).ffn_gate_tid2eid;
    std::vector<float> want(hp.n_expert, 0.0f);
    for (const int32_t t : fed) {
      std::vector<int32_t> ids(hp.n_expert_used);
      std::memcpy(ids.data(), table.row(static_cast<uint64_t>(t)), ids.size() * sizeof(int32_t));
      for (const int32_t e : ids) want[static_cast<size_t>(e)] += 1;
    }
    const std::string layer = "blk." + std::to_string(il) + ".";
    for (const char* w : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
      EXPECT_EQ(m.entries.at(layer + w + ".weight").counts, want) << layer << w;
  }

  // The first layer's q_a input is the forward pass's attn_norm output
  // (traced token by token): the same sums, added in the same order.
  cpu::Forward traced(tiny().model(), backend::Numerics::Quality, nullptr);
  std::vector<float> want(hp.n_embd, 0.0f);
  traced.set_trace([&](std::string_view name, int layer, int64_t, std::span<const float> v) {
    if (name != "attn_norm" || layer != 0) return;
    for (size_t j = 0; j < v.size(); ++j) want[j] += v[j] * v[j];
  });
  for (int c = 0; c < 3; ++c) {
    auto s = traced.make_session(32);
    traced.eval(s, std::span<const int32_t>(fed).subspan(static_cast<size_t>(c) * 32, 32));
  }
  EXPECT_EQ(m.entries.at("blk.0.attn_q_a.weight").sums, want);
}

// Chunks collected in two runs and combined (llama-imatrix's --in-file
// rules) are the chunks collected in one.
TEST(ImatrixRun, TwoRunsCombinedAreOneRun) {
  Engine engine(quality(tiny().path()));
  ImatrixRunOptions o;
  o.chunk_tokens = 32;
  o.max_chunks = 3;
  const model::Imatrix whole = run_imatrix(engine, some_text(), o).imatrix;
  o.max_chunks = 2;
  const model::Imatrix first = run_imatrix(engine, some_text(), o).imatrix;
  o.skip_chunks = 2;
  o.max_chunks = 1;
  const model::Imatrix last = run_imatrix(engine, some_text(), o).imatrix;
  model::Imatrix sum;
  sum.add(first, 32);
  sum.add(last, 32);
  EXPECT_EQ(sum.chunk_count, 3u);
  ASSERT_EQ(sum.entries.size(), whole.entries.size());
  for (const auto& [name, e] : whole.entries) {
    const model::ImatrixEntry& s = sum.entries.at(name);
    EXPECT_EQ(s.counts, e.counts) << name;
    ASSERT_EQ(s.sums.size(), e.sums.size()) << name;
    for (size_t j = 0; j < e.sums.size(); ++j) EXPECT_NEAR(s.sums[j], e.sums[j], 1e-5f * (1 + e.sums[j])) << name;
  }
}

TEST(ImatrixRun, ShortTextsStopsAndSkips) {
  Engine engine(quality(tiny().path()));
  ImatrixRunOptions o;
  o.chunk_tokens = 4096;
  EXPECT_NE(error_of([&] { run_imatrix(engine, "a few words", o); }).find("a chunk needs 4096"), std::string::npos);
  o.chunk_tokens = 32;
  o.skip_chunks = 1000;
  EXPECT_NE(error_of([&] { run_imatrix(engine, some_text(), o); }).find("skipped"), std::string::npos);
  o.skip_chunks = 1;
  int calls = 0;
  const ImatrixRunResult r = run_imatrix(engine, some_text(), o, [&](const ImatrixProgress& p) {
    ++calls;
    EXPECT_EQ(p.chunk, 1);
    return false;  // stop after the first chunk
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.n_chunks, 1);
  EXPECT_EQ(r.imatrix.chunk_count, 1u);
}

}  // namespace
}  // namespace ds4::engine
