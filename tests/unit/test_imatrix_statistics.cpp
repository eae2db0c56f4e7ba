// ds4-imatrix --show-statistics (model/imatrix_statistics.h). Truth: figures
// worked out by hand from llama-imatrix's definitions (tools/imatrix of the
// pinned llama.cpp) for a small matrix built to exercise each rule: a matrix
// no row met, near-zero columns, a block's cosine with the previous block,
// entries without statistics, and the per-layer weighting by N.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/imatrix.h"
#include "model/imatrix_statistics.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace ds4::model {
namespace {

Imatrix sample() {
  Imatrix m;
  m.datasets = {"calibration.txt"};
  m.chunk_count = 1;
  m.chunk_size = 512;
  // Per-column means {1, 2, 3, 4}.
  m.entries["blk.0.ffn_down.weight"] = {{1, 2, 3, 4}, {1}};
  // The same means from twice the rows; raw sums parallel to block 0's.
  m.entries["blk.1.ffn_down.weight"] = {{2, 4, 6, 8}, {2}};
  // Three experts of two columns; the second met no row: means {1, 1, 3, 3}.
  m.entries["blk.1.ffn_up_exps.weight"] = {{1, 1, 5, 5, 9, 9}, {1, 0, 3}};
  // Three columns at or below 1e-5: 25 % active.
  m.entries["output.weight"] = {{0, 0, 1e-6f, 2}, {1}};
  // No statistics: every count zero; sums that do not split into the matrices.
  m.entries["blk.2.attn_q.weight"] = {{1, 2}, {0}};
  m.entries["blk.2.attn_kv.weight"] = {{1, 2, 3, 4, 5}, {1, 1}};
  return m;
}

const ImatrixTensorStats& find(const ImatrixStatistics& s, const std::string& name) {
  for (const auto& t : s.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no statistics for " + name);
}

TEST(ImatrixStatistics, PerTensorFiguresAsLlamaImatrixDefinesThem) {
  const ImatrixStatistics s = imatrix_statistics(sample());
  ASSERT_EQ(s.tensors.size(), 4u);
  ASSERT_EQ(s.skipped.size(), 2u);
  EXPECT_EQ(s.skipped[0], "activation size mismatch for tensor blk.2.attn_kv.weight (2 vs 5)");
  EXPECT_EQ(s.skipped[1], "all counts are zero for tensor blk.2.attn_q.weight");

  const ImatrixTensorStats& a = find(s, "blk.0.ffn_down.weight");
  EXPECT_EQ(a.layer, "0");
  EXPECT_EQ(a.tensor, "ffn_down");
  EXPECT_FLOAT_EQ(a.sum_sqract, 10.0f);
  EXPECT_FLOAT_EQ(a.min_sqract, 1.0f);
  EXPECT_FLOAT_EQ(a.max_sqract, 4.0f);
  EXPECT_FLOAT_EQ(a.mean_sqract, 2.5f);
  EXPECT_FLOAT_EQ(a.stddev, std::sqrt(1.25f));  // 30/4 - 2.5^2
  EXPECT_FLOAT_EQ(a.active, 1.0f);
  EXPECT_EQ(a.elements, 4);
  // -(0.1 log2 0.1 + 0.2 log2 0.2 + 0.3 log2 0.3 + 0.4 log2 0.4)
  EXPECT_NEAR(a.entropy, 1.8464393f, 1e-6f);
  EXPECT_FLOAT_EQ(a.zd, 0.25f);      // only 4 lies more than one sigma above the mean
  EXPECT_FLOAT_EQ(a.cossim, 0.0f);   // no block before it

  const ImatrixTensorStats& b = find(s, "blk.1.ffn_down.weight");
  EXPECT_FLOAT_EQ(b.sum_sqract, 10.0f);
  EXPECT_NEAR(b.cossim, 1.0f, 1e-6f);  // raw sums {2,4,6,8} against {1,2,3,4}

  const ImatrixTensorStats& up = find(s, "blk.1.ffn_up_exps.weight");
  EXPECT_EQ(up.elements, 4);  // the expert no row met is left out
  EXPECT_FLOAT_EQ(up.sum_sqract, 8.0f);
  EXPECT_FLOAT_EQ(up.mean_sqract, 2.0f);
  EXPECT_FLOAT_EQ(up.stddev, 1.0f);
  EXPECT_FLOAT_EQ(up.zd, 0.0f);  // 3 is exactly one sigma above: not counted
  EXPECT_NEAR(up.entropy, 1.8112781f, 1e-6f);
  EXPECT_FLOAT_EQ(up.cossim, 0.0f);  // blk.0 has no ffn_up_exps

  const ImatrixTensorStats& out = find(s, "output.weight");
  EXPECT_EQ(out.layer, "-");
  EXPECT_EQ(out.tensor, "output");
  EXPECT_FLOAT_EQ(out.active, 0.25f);

  // By tensor name, then by Σ(Act²) descending.
  ASSERT_EQ(s.tensors[2].tensor, "ffn_up_exps");
  EXPECT_EQ(s.tensors[0].tensor, "ffn_down");
  EXPECT_EQ(s.tensors[3].tensor, "output");
}

TEST(ImatrixStatistics, LayersWeightEachTensorByItsCount) {
  const ImatrixStatistics s = imatrix_statistics(sample());
  ASSERT_EQ(s.layers.size(), 2u);  // block 2 has no statistics; output is in no block
  EXPECT_EQ(s.layers[0].layer, 0);
  EXPECT_FLOAT_EQ(s.layers[0].mean_sum_sqract, 10.0f);
  EXPECT_FLOAT_EQ(s.layers[0].zd, 0.25f);
  EXPECT_EQ(s.layers[1].layer, 1);
  EXPECT_FLOAT_EQ(s.layers[1].mean_sum_sqract, 9.0f);  // (4 * 10 + 4 * 8) / 8
  EXPECT_FLOAT_EQ(s.layers[1].zd, 0.125f);             // (4 * 0.25 + 4 * 0) / 8
  EXPECT_NEAR(s.layers[1].cossim, 0.5f, 1e-6f);        // (4 * 1 + 4 * 0) / 8
}

TEST(ImatrixStatistics, PrintedInLlamaImatrixColumns) {
  const std::string text = format_imatrix_statistics(imatrix_statistics(sample()), "m.gguf");
  EXPECT_NE(text.find("Computing statistics for m.gguf (4 tensors)"), std::string::npos) << text;
  EXPECT_NE(text.find("    0\tffn_down            \t     10.00\t  1.0000\t     4.0000\t  2.50\t  1.12\t  100.00%\t     "
                      "4\t    1.8464\t 92.32%\t     25.00%\t  0.0000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Computing weighted average statistics per layer (2 layers)"), std::string::npos);
  EXPECT_NE(text.find("    1\t          9.00\t   12.5000%\t0.5000\n"), std::string::npos) << text;
}

// The program: one --in-file, read as llama-imatrix loads it; usage errors.
TEST(ImatrixStatistics, ShownByDsImatrix) {
  test::TempDir dir;
  Imatrix m = sample();
  m.entries.erase("blk.2.attn_kv.weight");  // not a file llama-imatrix could write
  m.save(dir.file("m.gguf"));
  const test::ProcessResult r =
      test::run_app(DS4_BIN_DIR, "ds4-imatrix", {"--in-file", dir.file("m.gguf"), "--show-statistics"});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("(4 tensors)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    1\t          9.00\t   12.5000%\t0.5000\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("all counts are zero for tensor blk.2.attn_q.weight"), std::string::npos) << r.err;

  const test::ProcessResult none = test::run_app(DS4_BIN_DIR, "ds4-imatrix", {"--show-statistics"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--show-statistics needs exactly one --in-file"), std::string::npos) << none.err;
  const test::ProcessResult missing =
      test::run_app(DS4_BIN_DIR, "ds4-imatrix", {"--in-file", dir.file("absent.gguf"), "--show-statistics"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("absent.gguf"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace ds4::model
