#include "backend/backend.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/deepseek4_model.h"

namespace ds4::backend {

void check_tokens(std::span<const int32_t> tokens, int n_vocab, int64_t held, int64_t n_ctx) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      throw Error("token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                  ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  if (held + static_cast<int64_t>(tokens.size()) > n_ctx)
    throw Error(std::to_string(held) + " + " + std::to_string(tokens.size()) + " tokens do not fit the context of " +
                std::to_string(n_ctx));
}

int check_range(std::span<const Part> parts, LayerRange range, int n_layer) {
  const int end = range.end < 0 ? n_layer : range.end;
  if (range.begin < 0 || range.begin >= end || end > n_layer)
    throw Error("eval: layer range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                ") is not a non-empty range of the model's " + std::to_string(n_layer) + " layers");
  for (size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].tokens.empty()) continue;
    if (range.begin > 0 && !parts[p].hidden_in)
      throw Error("eval: part " + std::to_string(p) + " has no hidden states for a range starting at layer " +
                  std::to_string(range.begin));
    if (range.end >= 0 && !parts[p].hidden_out)
      throw Error("eval: part " + std::to_string(p) + " has no buffer for the hidden states after layer " +
                  std::to_string(end - 1));
    if (range.end >= 0 && parts[p].all_logits)
      throw Error("eval: part " + std::to_string(p) + " asks for logits from a range that ends before the output head");
  }
  return end;
}

void Backend::set_matrix_inputs(MatrixInputs * /*inputs*/) {
  throw Error("the " + name() + " backend cannot report the inputs of its weight matrices");
}

int Backend::n_layer() const { return static_cast<int>(model().hparams().n_layer); }
int Backend::n_vocab() const { return static_cast<int>(model().hparams().n_vocab); }

void Backend::eval(Session &session, std::span<const int32_t> tokens, float *all_logits) {
  Part part;
  part.session = &session;
  part.tokens = tokens;
  part.all_logits = all_logits;
  eval(std::span<const Part>(&part, 1));
}

std::vector<int32_t> Backend::generate_greedy(Session &session, int n) {
  if (n < 0) throw Error("greedy: token count " + std::to_string(n) + " is negative");
  if (n == 0) return {};
  if (session.size() == 0) throw Error("greedy: the session holds no tokens to continue");
  if (session.size() + n - 1 > session.n_ctx())
    throw Error("greedy: " + std::to_string(session.size()) + " + " + std::to_string(n - 1) +
                " tokens do not fit the context of " + std::to_string(session.n_ctx()));
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto logits = session.logits();
    if (logits.empty()) throw Error("greedy: the session has no logits (its last evaluation skipped them)");
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    out.push_back(static_cast<int32_t>(best));
    if (i + 1 < n) {
      const int32_t id = out.back();
      eval(session, std::span<const int32_t>(&id, 1));
    }
  }
  return out;
}

}  // namespace ds4::backend
