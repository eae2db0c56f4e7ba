#include "engine/imatrix_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/imatrix_collector.h"
#include "text/tokenizer.h"

namespace ds4::engine {

namespace {

// -log p(target) from one row of logits (a stable log-softmax in double).
double negative_log_likelihood(std::span<const float> logits, int32_t target) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - max);
  return std::log(sum) - (static_cast<double>(logits[static_cast<size_t>(target)]) - max);
}

// Clears the listener however the run ends.
struct ListenerScope {
  backend::Backend& backend;
  ListenerScope(backend::Backend& b, backend::MatrixInputs* inputs) : backend(b) { backend.set_matrix_inputs(inputs); }
  ~ListenerScope() { backend.set_matrix_inputs(nullptr); }
  ListenerScope(const ListenerScope&) = delete;
  ListenerScope& operator=(const ListenerScope&) = delete;
};

}  // namespace

ImatrixRunResult run_imatrix(Engine& engine, std::string_view text, const ImatrixRunOptions& options,
                             const std::function<bool(const ImatrixProgress&)>& progress) {
  const int64_t ctx = options.chunk_tokens;
  if (ctx < 2) throw Error("imatrix: a chunk must hold at least 2 tokens, not " + std::to_string(ctx));
  if (options.skip_chunks < 0) throw Error("imatrix: cannot skip a negative number of chunks");
  const text::Tokenizer& tokenizer = engine.tokenizer();
  std::vector<int32_t> tokens;
  const bool bos = engine.facts().add_bos;
  if (bos) tokens.push_back(tokenizer.bos());
  {
    const std::vector<int32_t> body = tokenizer.encode(text, text::Tokenizer::SpecialTokens::UserDefined);
    tokens.insert(tokens.end(), body.begin(), body.end());
  }
  ImatrixRunResult result;
  result.n_tokens = static_cast<int64_t>(tokens.size());
  const int64_t skipped = options.skip_chunks * ctx;
  const int64_t left = result.n_tokens - std::min(result.n_tokens, skipped);
  int64_t n_chunks = left / ctx;
  if (options.max_chunks >= 0) n_chunks = std::min(n_chunks, options.max_chunks);
  if (n_chunks < 1)
    throw Error("imatrix: the text has " + std::to_string(result.n_tokens) + " tokens" +
                (skipped > 0 ? " (" + std::to_string(skipped) + " skipped)" : std::string()) +
                "; a chunk needs " + std::to_string(ctx));

  ImatrixCollector collector(options.process_output);
  backend::Backend& backend = engine.backend();
  const auto n_vocab = static_cast<size_t>(backend.n_vocab());
  std::vector<float> logits(static_cast<size_t>(ctx) * n_vocab);
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  std::unique_ptr<backend::Session> session = engine.new_session(ctx);
  ListenerScope listening(backend, &collector);
  const auto t0 = std::chrono::steady_clock::now();
  double nll = 0;
  int64_t scored = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const auto from = tokens.begin() + skipped + c * ctx;
    std::copy(from, from + ctx, chunk.begin());
    if (bos) chunk[0] = tokenizer.bos();
    session->reset();
    backend.eval(*session, chunk, logits.data());
    collector.check();
    // Perplexity as llama-imatrix reports it: each token of the second
    // half predicting the next.
    for (int64_t j = ctx / 2; j + 1 < ctx; ++j, ++scored)
      nll += negative_log_likelihood(std::span<const float>(logits).subspan(static_cast<size_t>(j) * n_vocab, n_vocab),
                                     chunk[static_cast<size_t>(j + 1)]);
    result.n_chunks = c + 1;
    result.perplexity = scored > 0 ? std::exp(nll / static_cast<double>(scored)) : 0.0;
    if (progress) {
      const ImatrixProgress p{c + 1, n_chunks,
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                              result.perplexity};
      if (!progress(p)) break;
    }
  }

  result.imatrix = collector.result(options.per_group);
  if (!options.dataset.empty()) result.imatrix.datasets.push_back(options.dataset);
  result.imatrix.chunk_size = static_cast<uint32_t>(ctx);
  // llama-imatrix's chunk counter: the most rows any matrix met, in chunks.
  result.imatrix.chunk_count = static_cast<uint32_t>(collector.most_rows() / ctx);
  return result;
}

}  // namespace ds4::engine
