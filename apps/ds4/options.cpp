#include "options.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "common/engine_flags.h"
#include "core/error.h"

namespace ds4::app {

namespace {

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec1, ec2;
  const auto ca = std::filesystem::weakly_canonical(a, ec1);
  const auto cb = std::filesystem::weakly_canonical(b, ec2);
  if (ec1 || ec2) return a == b;
  return ca == cb;
}

}  // namespace

Mode mode_of(const Options& o) {
  if (!o.tokens_file.empty() || !o.dump_logits.empty() || o.greedy || !o.save_session.empty() ||
      !o.load_session.empty())
    return Mode::Tokens;
  if (o.dump_tokens) return Mode::DumpTokens;
  if (o.prompt || !o.prompt_file.empty()) return Mode::OneShot;
  return Mode::Interactive;
}

namespace {

void validate_text_options(const Options& o, Mode mode) {
  if (o.prompt && !o.prompt_file.empty()) throw Error("conflicting options: -p and --prompt-file both give a prompt");
  if (mode == Mode::DumpTokens && !o.prompt && o.prompt_file.empty())
    throw Error("--dump-tokens needs the text: give -p TEXT or --prompt-file FILE");
  if (!o.dump_logprobs.empty() && mode != Mode::OneShot)
    throw Error("--dump-logprobs needs a prompt: give -p TEXT or --prompt-file FILE");
  if (o.max_tokens < 0) throw Error("-n/--tokens must be at least 0 (got " + std::to_string(o.max_tokens) + ")");
  if (o.logprobs_top_k < 1 || o.logprobs_top_k > 1024)
    throw Error("--logprobs-top-k must be between 1 and 1024 (got " + std::to_string(o.logprobs_top_k) + ")");
  if (!(o.temperature >= 0) || o.temperature > 100)
    throw Error("--temp must be a number between 0 and 100 (got " + std::to_string(o.temperature) + ")");
  if (!(o.top_p > 0) || o.top_p > 1) throw Error("--top-p must be in (0, 1] (got " + std::to_string(o.top_p) + ")");
  if (!(o.min_p >= 0) || o.min_p > 1) throw Error("--min-p must be in [0, 1] (got " + std::to_string(o.min_p) + ")");
  for (const std::string& stop : o.stop_strings)
    if (stop.empty()) throw Error("--stop needs a non-empty string");
  if (o.top_k < 0 || o.top_k > 1024) throw Error("--top-k must be between 0 and 1024 (got " + std::to_string(o.top_k) + ")");
}

}  // namespace

void validate(const Options& o) {
  const Mode mode = mode_of(o);
  check_engine_flags(o.engine);
  if (o.ctx && *o.ctx < 1) throw Error("--ctx must be at least 1 (got " + std::to_string(*o.ctx) + ")");
  if (o.greedy && *o.greedy < 1) throw Error("--greedy must be at least 1 (got " + std::to_string(*o.greedy) + ")");
  if (mode != Mode::Tokens) {
    validate_text_options(o, mode);
    return;
  }
  if (o.prompt || !o.prompt_file.empty() || o.dump_tokens)
    throw Error("conflicting options: -p/--prompt-file/--dump-tokens work on text, --tokens-file/--dump-logits/"
                "--greedy/--save-session/--load-session on token ids");
  if (o.dump_logits.empty() && !o.greedy && o.save_session.empty())
    throw Error("nothing to do: give --dump-logits, --greedy or --save-session");
  if (!o.dump_logits.empty() && o.tokens_file.empty()) throw Error("--dump-logits needs --tokens-file");
  if (o.tokens_file.empty() && (o.load_session.empty() || !o.greedy))
    throw Error("--tokens-file is required (it may be left out only with --load-session and --greedy)");

  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"-m", o.engine.model_path}, {"--tokens-file", o.tokens_file}, {"--load-session", o.load_session}};
  const std::vector<std::pair<std::string, std::string>> outputs = {{"--dump-logits", o.dump_logits},
                                                                    {"--save-session", o.save_session}};
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& in : inputs) {
      if (same_file(outputs[i].second, in.second))
        throw Error("conflicting options: " + outputs[i].first + " and " + in.first + " name the same file " +
                    in.second);
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (same_file(outputs[i].second, outputs[j].second))
        throw Error("conflicting options: " + outputs[i].first + " and " + outputs[j].first +
                    " name the same file " + outputs[i].second);
    }
  }
}

int64_t tokens_needed(int64_t loaded, int64_t evaluated, const std::optional<int>& greedy) {
  return loaded + evaluated + (greedy ? std::max(*greedy - 1, 0) : 0);
}

int64_t choose_ctx(const Options& o, int64_t n_ctx_train, int64_t needed) {
  if (o.ctx) return *o.ctx;
  const int64_t base = std::min<int64_t>(std::max<int64_t>(n_ctx_train, 1), kDefaultCtxCap);
  return std::max(base, needed);
}

void check_model_present(const Options& o) {
  std::error_code ec;
  const std::string& model = o.engine.model_path;
  if (std::filesystem::exists(model, ec)) return;
  if (o.model_given) throw Error(model + ": no such file");
  throw Error("no model: ./" + model +
              " does not exist. Give one with -m/--model FILE, or download DeepSeek V4 Flash (about 81 GB) with "
              "./download_model.sh q2-imatrix (96-128 GB RAM) or ./download_model.sh q4-imatrix (256 GB RAM or more), "
              "which links ./" + model + " to it");
}

void check_fits(int64_t needed, int64_t n_ctx, const std::string& detail) {
  if (needed > n_ctx)
    throw Error(std::to_string(needed) + " tokens do not fit --ctx " + std::to_string(n_ctx) +
                (detail.empty() ? "" : " (" + detail + ")"));
}

}  // namespace ds4::app
