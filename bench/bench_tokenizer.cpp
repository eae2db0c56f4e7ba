// Encode speed of ds4::text::Tokenizer on one core, in MB/s of input text, over
// a generated multi-language corpus (prose in several scripts, code, emoji,
// digits, whitespace). Uses DeepSeek's real tokenizer.json when
// DS4_TOKENIZER_JSON names one (the synthetic vocabulary is far smaller and not
// representative), else the synthetic tokenizer.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string_view>

#include "model/synthetic_tokenizer.h"
#include "text/tokenizer.h"
#include "tokenizer_corpus.h"
#include "version/version.h"

namespace {

using ds4::text::Tokenizer;

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = [] {
    const char* json = std::getenv("DS4_TOKENIZER_JSON");
    const ds4::model::TokenizerData data =
        json && *json ? ds4::model::import_hf_tokenizer(json, ds4::model::kV4VocabSize, true)
                      : ds4::model::make_synthetic_tokenizer(4096);
    return std::make_unique<Tokenizer>(Tokenizer::from_data(data));
  }();
  return *t;
}

const std::string& corpus() {
  static const std::string c = [] {
    ds4::test::TokenizerCorpusOptions o;
    o.min_bytes = 4 << 20;
    o.seed = 42;
    return ds4::test::tokenizer_corpus(o);
  }();
  return c;
}

// Whole corpus per call: the piece cache is warm after the first iteration,
// as it is in a server that tokenizes prompt after prompt.
void BM_Encode(benchmark::State& state) {
  const Tokenizer& t = tokenizer();
  const std::string& text = corpus();
  const bool parse_special = state.range(0) != 0;
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(text, parse_special);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
}
BENCHMARK(BM_Encode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Fresh 64 KiB slices, so pieces are mostly new to the cache: the cold-path cost.
void BM_EncodeColdSlices(benchmark::State& state) {
  const Tokenizer& t = tokenizer();
  const std::string& text = corpus();
  constexpr size_t kSlice = 64 << 10;
  size_t at = 0;
  for (auto _ : state) {
    if (at + kSlice > text.size()) at = 0;
    auto ids = t.encode(std::string_view(text).substr(at, kSlice), false);
    benchmark::DoNotOptimize(ids.data());
    at += kSlice;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kSlice));
}
BENCHMARK(BM_EncodeColdSlices)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  // Google Benchmark has no version flag: ours is answered before it reads the arguments.
  if (ds4::answer_version_flag(argc, argv, "ds4-bench-tokenizer")) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
