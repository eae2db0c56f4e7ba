#include "backend/cpu/moe_layer.h"

#include <algorithm>
#include <functional>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/cpu/ops_moe.h"
#include "backend/cpu/ops_norm.h"
#include "backend/cpu/report_inputs.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "core/scratch_vector.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace ds4::cpu {
namespace {

[[noreturn]] void fail(uint32_t layer, const std::string& what) {
  throw Error("moe of layer " + std::to_string(layer) + ": " + what);
}

void check_shape(uint32_t layer, const model::TensorView& t, uint64_t ne0, uint64_t ne1, uint64_t ne2) {
  if (!t.present()) fail(layer, "weight " + std::string(t.name.empty() ? "(unnamed)" : t.name) + " missing");
  if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != ne2 || t.ne[3] != 1)
    fail(layer, "weight " + std::string(t.name) + " has an unexpected shape");
}

}  // namespace

namespace {

// One pass's working buffers. Layers run one after another, so every layer on
// a thread shares one set instead of each keeping its own (a 2048-token pass
// needs ~330 MB at Flash widths, most of it the per-(token, slot) expert
// outputs; one set per layer would take 43 of them). What a layer reports
// after its pass (selected_ids/weights, scores) stays in the layer.
struct MoePassScratch {
  // Every element is written before it is read (down: each (token, slot)
  // pair belongs to exactly one expert, whose output fills its row).
  ScratchVector<float> xn, logits, gate, up, mid, down, shared, pair_weight;
  std::vector<int32_t> pair_slot, pair_row;
  std::vector<const void*> gate_acts, up_acts;
  ActivationBatch xn_batch, mid_batch;
};

MoePassScratch& pass_scratch() {
  thread_local MoePassScratch scratch;
  return scratch;
}

// likely_experts' buffers: it runs inside another layer's pass, whose
// scratch is live.
struct PredictScratch {
  ScratchVector<float> xn, logits, scores, weights;
  std::vector<int32_t> ids;
  std::vector<int32_t> count;
  ActivationBatch batch;
};

PredictScratch& predict_scratch() {
  thread_local PredictScratch scratch;
  return scratch;
}

// task(0..n_tasks) over the pool, or in order without one.
void run_tasks(ThreadPool* pool, int n_tasks, const std::function<void(int)>& task) {
  if (pool != nullptr) {
    pool->run(n_tasks, [&](int t, int) { task(t); });
  } else {
    for (int t = 0; t < n_tasks; ++t) task(t);
  }
}

}  // namespace

MoeLayer::MoeLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, Numerics numerics)
    : w_(&layer),
      numerics_(numerics),
      index_(layer.index),
      hash_routed_(hp.is_hash_layer(layer.index)),
      n_embd_(static_cast<int>(hp.n_embd)),
      n_ff_shared_(static_cast<int>(hp.n_ff_exp * hp.n_expert_shared)),
      n_expert_(static_cast<int>(hp.n_expert)),
      n_used_(static_cast<int>(hp.n_expert_used)),
      n_vocab_(static_cast<int>(hp.n_vocab)),
      eps_(hp.rms_eps),
      scale_(hp.expert_weights_scale),
      clamp_exp_(hp.swiglu_clamp_exp.at(layer.index)),
      clamp_shexp_(hp.clamp_shexp(layer.index)) {
  // ds4 and llama.cpp's deepseek4 graph always normalise; the unnormalised
  // variant is not part of this model family.
  if (!hp.expert_weights_norm) fail(index_, "expert_weights_norm = false is not supported");
  if (n_used_ <= 0 || n_used_ > n_expert_) fail(index_, "bad expert counts");
  const uint64_t d = hp.n_embd, ff = hp.n_ff_exp, ne = hp.n_expert, sff = static_cast<uint64_t>(n_ff_shared_);
  check_shape(index_, layer.ffn_norm, d, 1, 1);
  check_shape(index_, layer.ffn_gate_inp, d, ne, 1);
  check_shape(index_, layer.ffn_gate_exps, d, ff, ne);
  check_shape(index_, layer.ffn_up_exps, d, ff, ne);
  check_shape(index_, layer.ffn_down_exps, ff, d, ne);
  check_shape(index_, layer.ffn_gate_shexp, d, sff, 1);
  check_shape(index_, layer.ffn_up_shexp, d, sff, 1);
  check_shape(index_, layer.ffn_down_shexp, sff, d, 1);
  if (hash_routed_) {
    check_shape(index_, layer.ffn_gate_tid2eid, hp.n_expert_used, hp.n_vocab, 1);
    if (layer.ffn_gate_tid2eid.type != GgmlType::I32) fail(index_, "ffn_gate_tid2eid is not i32");
  } else if (layer.exp_probs_b.present()) {
    check_shape(index_, layer.exp_probs_b, ne, 1, 1);
    bias_.resize(static_cast<size_t>(ne));
    quant::dequantize_row(layer.exp_probs_b.type, layer.exp_probs_b.data, bias_.data(), n_expert_);
  }
  norm_.resize(static_cast<size_t>(d));
  quant::dequantize_row(layer.ffn_norm.type, layer.ffn_norm.data, norm_.data(), n_embd_);

  expert_count_.resize(static_cast<size_t>(ne));
  usage_.assign(static_cast<size_t>(ne), 0);
  expert_start_.resize(static_cast<size_t>(ne) + 1);
}

void MoeLayer::expert_ffn(const model::TensorView& gate, const model::TensorView& up, const model::TensorView& down,
                          int expert, const void* const* gate_acts, const void* const* up_acts, int64_t n_acts,
                          float limit, const float* weights_before_down, float* DOWN, int64_t ldd, ThreadPool* pool) {
  MoePassScratch& s = pass_scratch();
  const int64_t ff = static_cast<int64_t>(gate.ne[1]);
  const size_t uff = static_cast<size_t>(ff);
  const size_t cells = static_cast<size_t>(n_acts) * uff;
  if (s.gate.size() < cells) {
    s.gate.resize(cells);
    s.up.resize(cells);
    s.mid.resize(cells);
  }
  if (n_acts == 1 && pool != nullptr) {
    // Decode's shared expert: both products in one pool run.
    const MatvecJob jobs[] = {{&gate, expert, gate_acts[0], s.gate.data()}, {&up, expert, up_acts[0], s.up.data()}};
    matvec_many(jobs, numerics_, pool);
  } else {
    matmul(gate, expert, gate_acts, n_acts, s.gate.data(), ff, numerics_, pool);
    matmul(up, expert, up_acts, n_acts, s.up.data(), ff, numerics_, pool);
  }
  auto swiglu_acts = [&](int64_t a0, int64_t a1) {
    for (int64_t a = a0; a < a1; ++a) {
      const size_t off = static_cast<size_t>(a) * uff;
      swiglu_clamp(std::span<const float>(s.gate.data() + off, uff), std::span<const float>(s.up.data() + off, uff),
                   limit, weights_before_down ? weights_before_down[a] : 1.0f,
                   std::span<float>(s.mid.data() + off, uff), numerics_);
    }
  };
  // Element-wise per activation (an expf per element): split over the pool
  // when there are several.
  if (pool != nullptr && pool->size() > 1 && n_acts > 1) {
    pool->run(static_cast<int>(std::min<int64_t>(n_acts, pool->size())), [&](int task, int n_tasks) {
      swiglu_acts(n_acts * task / n_tasks, n_acts * (task + 1) / n_tasks);
    });
  } else {
    swiglu_acts(0, n_acts);
  }
  if (inputs_ != nullptr) {
    // The model's views name the tensors (a streamed expert's may not).
    if (expert < 0)
      report_inputs(inputs_, w_->ffn_down_shexp, {}, s.mid.data(), n_acts, ff, chunk_tokens_);
    else
      report_inputs(inputs_, w_->ffn_down_exps, {backend::MatrixSlice::Kind::Expert, expert, n_expert_}, s.mid.data(),
                    n_acts, ff, chunk_tokens_);
  }
  s.mid_batch.reset(s.mid.data(), n_acts, ff, ff, numerics_);
  matmul(down, expert, s.mid_batch, DOWN, ldd, pool);
}

void MoeLayer::forward(std::span<const float> x, int32_t token_id, std::span<float> out, ThreadPool* pool) {
  if (x.size() != static_cast<size_t>(n_embd_) || out.size() != static_cast<size_t>(n_embd_))
    fail(index_, "input/output width must be n_embd = " + std::to_string(n_embd_));
  forward_batch(x.data(), &token_id, 1, out.data(), pool);
}

void MoeLayer::forward_batch(const float* X, const int32_t* token_ids, int64_t n, float* OUT, ThreadPool* pool,
                             MoeLayer* next) {
  if (n <= 0) return;
  // Validate before any work so a bad token leaves the last selection intact.
  if (hash_routed_)
    for (int64_t t = 0; t < n; ++t)
      if (token_ids[t] < 0 || token_ids[t] >= n_vocab_)
        fail(index_, "token id " + std::to_string(token_ids[t]) + " outside [0, " + std::to_string(n_vocab_) + ")");
  chunk_tokens_ = n;
  for (int64_t at = 0; at < n; at += kMaxBatch) {
    const int64_t m = std::min(kMaxBatch, n - at);
    forward_pass(X + at * n_embd_, token_ids + at, m, OUT + at * n_embd_, pool, next);
  }
}

void MoeLayer::route(int64_t t, int32_t token_id, const float* logits_row, std::span<int32_t> tid_row) {
  const size_t ne = static_cast<size_t>(n_expert_), nu = static_cast<size_t>(n_used_);
  const std::span<const float> logits(logits_row, ne);
  const std::span<float> scores(scores_.data() + static_cast<size_t>(t) * ne, ne);
  const std::span<int32_t> ids(ids_.data() + static_cast<size_t>(t) * nu, nu);
  const std::span<float> weights(weights_.data() + static_cast<size_t>(t) * nu, nu);
  router_scores(logits, scores, numerics_);
  if (hash_routed_) {
    // The mapping gives no alignment promise for an int32 row: copy it.
    std::memcpy(tid_row.data(), w_->ffn_gate_tid2eid.row(static_cast<uint64_t>(token_id)), nu * sizeof(int32_t));
    try {
      route_hash(scores, tid_row, scale_, ids, weights, numerics_);
    } catch (const std::out_of_range& e) {
      fail(index_, std::string(e.what()) + " (token " + std::to_string(token_id) + ")");
    }
  } else {
    route_top_k(scores, bias_, scale_, ids, weights, numerics_);
  }
}

void MoeLayer::likely_experts(const float* X, const int32_t* token_ids, int64_t n, std::vector<int>& out,
                              ThreadPool* pool) {
  PredictScratch& p = predict_scratch();
  const size_t un = static_cast<size_t>(n), nu = static_cast<size_t>(n_used_), ne = static_cast<size_t>(n_expert_);
  p.count.assign(ne, 0);
  if (hash_routed_) {
    std::vector<int32_t> row(nu);
    for (int64_t t = 0; t < n; ++t) {
      if (token_ids[t] < 0 || token_ids[t] >= n_vocab_) continue;
      std::memcpy(row.data(), w_->ffn_gate_tid2eid.row(static_cast<uint64_t>(token_ids[t])), nu * sizeof(int32_t));
      for (int32_t e : row)
        if (e >= 0 && e < n_expert_) ++p.count[static_cast<size_t>(e)];
    }
  } else {
    const size_t d = static_cast<size_t>(n_embd_);
    p.xn.resize(un * d);
    p.logits.resize(un * ne);
    p.scores.resize(un * ne);
    p.weights.resize(un * nu);
    p.ids.resize(un * nu);
    parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        rms_norm(std::span<const float>(X + t * n_embd_, d), norm_, std::span<float>(p.xn.data() + t * n_embd_, d),
                 eps_, numerics_);
    });
    p.batch.reset(p.xn.data(), n, n_embd_, n_embd_, numerics_);
    matmul(w_->ffn_gate_inp, -1, p.batch, p.logits.data(), n_expert_, pool);
    parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const size_t ut = static_cast<size_t>(t);
        const std::span<float> scores(p.scores.data() + ut * ne, ne);
        router_scores(std::span<const float>(p.logits.data() + ut * ne, ne), scores, numerics_);
        route_top_k(scores, bias_, scale_, std::span<int32_t>(p.ids.data() + ut * nu, nu),
                    std::span<float>(p.weights.data() + ut * nu, nu), numerics_);
      }
    });
    for (int32_t e : p.ids) ++p.count[static_cast<size_t>(e)];
  }
  out.clear();
  for (int e = 0; e < n_expert_; ++e)
    if (p.count[static_cast<size_t>(e)] > 0 && share_.owns_expert(e)) out.push_back(e);
  std::stable_sort(out.begin(), out.end(),
                   [&](int a, int b) { return p.count[static_cast<size_t>(a)] > p.count[static_cast<size_t>(b)]; });
}

void MoeLayer::run_streamed(const std::function<void(int, const ExpertMatrices&, ThreadPool*)>& run_expert,
                            const float* X, const int32_t* token_ids, int64_t n, MoeLayer* next, ThreadPool* pool) {
  bool predicted = false;
  auto prefetch_next = [&] {
    if (next == nullptr || !source_->wants_prefetch()) return;
    if (!predicted) {
      next->likely_experts(X, token_ids, n, predicted_, pool);
      predicted = true;
    }
    source_->prefetch(next->weights(), predicted_);
  };
  // Experts [from, to) of `experts`: one per pool task, or, when there are
  // too few to give each thread one, each over the whole pool.
  auto run_range = [&](std::span<const int> experts, size_t from, size_t to) {
    if (pool != nullptr && to - from < static_cast<size_t>(pool->size())) {
      for (size_t k = from; k < to; ++k) run_expert(experts[k], acquired_[k], pool);
      return;
    }
    run_tasks(pool, static_cast<int>(to - from), [&](int i) {
      const size_t k = from + static_cast<size_t>(i);
      run_expert(experts[k], acquired_[k], nullptr);
    });
  };
  // As many experts at a time as the source holds (all of them when the
  // cache is large enough); each computes once it is readable, the rest
  // being read meanwhile, and its room is handed back when it is done.
  acquired_.resize(active_.size());
  for (size_t at = 0; at < active_.size();) {
    const std::span<int> rest = std::span<int>(active_).subspan(at);
    size_t ready = 0;
    const size_t got = source_->acquire(*w_, rest, acquired_, &ready);
    try {
      prefetch_next();  // queued behind this layer's reads
      for (size_t done = 0; done < got;) {
        if (ready == done) ready = source_->wait(done);
        run_range(rest, done, ready);
        source_->done_with(done, ready);
        done = ready;
        if (done < got) prefetch_next();
      }
    } catch (...) {
      source_->release();
      throw;
    }
    source_->release();
    at += got;
  }
}

void MoeLayer::forward_pass(const float* X, const int32_t* token_ids, int64_t n, float* OUT, ThreadPool* pool,
                            MoeLayer* next) {
  MoePassScratch& s = pass_scratch();
  const model::LayerWeights& w = *w_;
  const size_t un = static_cast<size_t>(n), d = static_cast<size_t>(n_embd_), nu = static_cast<size_t>(n_used_);
  s.xn.resize(un * d);
  s.logits.resize(un * static_cast<size_t>(n_expert_));
  scores_.resize(s.logits.size());
  ids_.resize(un * nu);
  weights_.resize(un * nu);
  s.down.resize(un * nu * d);
  s.shared.resize(un * d);

  // Per-token loops run split over the pool (each token's values are the
  // same whatever the split); `s` is this thread's scratch, shared with the
  // workers by reference.
  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      rms_norm(std::span<const float>(X + t * n_embd_, d), norm_, std::span<float>(s.xn.data() + t * n_embd_, d), eps_,
               numerics_);
  });
  // Router, gate_exps and up_exps all read xn: each activation form once.
  s.xn_batch.reset(s.xn.data(), n, n_embd_, n_embd_, numerics_);
  if (inputs_ != nullptr) {
    for (const model::TensorView* v : {&w.ffn_gate_inp, &w.ffn_gate_shexp, &w.ffn_up_shexp})
      report_inputs(inputs_, *v, {}, s.xn.data(), n, n_embd_, chunk_tokens_);
  }
  matmul(w.ffn_gate_inp, -1, s.xn_batch, s.logits.data(), n_expert_, pool);
  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> tid_row(nu);
    for (int64_t t = t0; t < t1; ++t)
      route(t, token_ids[t], s.logits.data() + static_cast<size_t>(t) * static_cast<size_t>(n_expert_), tid_row);
  });
  last_ = n - 1;
  for (int32_t e : ids_) ++usage_[static_cast<size_t>(e)];

  // (token, slot) pairs grouped by expert (counting sort, tokens in order).
  std::fill(expert_count_.begin(), expert_count_.end(), 0);
  for (int32_t e : ids_) ++expert_count_[static_cast<size_t>(e)];
  expert_start_[0] = 0;
  for (int e = 0; e < n_expert_; ++e)
    expert_start_[static_cast<size_t>(e) + 1] = expert_start_[static_cast<size_t>(e)] + expert_count_[static_cast<size_t>(e)];
  // pair_slot: sorted position -> pair (token * n_used + slot); pair_row: the
  // inverse, the pair's row in the down buffer.
  s.pair_slot.resize(un * nu);
  s.pair_row.resize(un * nu);
  {
    std::vector<int32_t>& fill = expert_count_;  // reused as the next free index per expert
    for (int e = 0; e < n_expert_; ++e) fill[static_cast<size_t>(e)] = expert_start_[static_cast<size_t>(e)];
    for (size_t p = 0; p < un * nu; ++p) {
      const int32_t row = fill[static_cast<size_t>(ids_[p])]++;
      s.pair_slot[static_cast<size_t>(row)] = static_cast<int32_t>(p);
      s.pair_row[p] = row;
    }
  }

  // Each routed expert once over its tokens, one expert per pool task: a
  // thread runs an expert's three products and its activation alone (on its
  // own scratch), so no barrier falls inside an expert. Its outputs fill rows
  // [begin, end) of the pass's down buffer (sorted order, no gather copy).
  // The most-used experts go first, so the pass does not end on a large one
  // (an expert's result does not depend on the order or the thread).
  const bool before = expert_weight_before_down(numerics_);
  s.xn_batch.prepare(w.ffn_gate_exps.type, pool);
  s.xn_batch.prepare(w.ffn_up_exps.type, pool);
  const void* const* gate_rows = s.xn_batch.rows(w.ffn_gate_exps.type);
  const void* const* up_rows = s.xn_batch.rows(w.ffn_up_exps.type);
  active_.clear();
  for (int e = 0; e < n_expert_; ++e)
    if (expert_start_[static_cast<size_t>(e) + 1] > expert_start_[static_cast<size_t>(e)] && share_.owns_expert(e))
      active_.push_back(e);
  auto count = [&](int e) { return expert_start_[static_cast<size_t>(e) + 1] - expert_start_[static_cast<size_t>(e)]; };
  std::stable_sort(active_.begin(), active_.end(), [&](int a, int b) { return count(a) > count(b); });
  // Expert e with its matrices m (matrix m.index of each view); `inner`
  // splits its products (null: this thread alone).
  auto run_expert = [&](int e, const ExpertMatrices& m, ThreadPool* inner) {
    const int32_t begin = expert_start_[static_cast<size_t>(e)];
    const int64_t c = count(e);
    MoePassScratch& mine = pass_scratch();  // this thread's
    mine.gate_acts.resize(static_cast<size_t>(c));
    mine.up_acts.resize(static_cast<size_t>(c));
    mine.pair_weight.resize(static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) {
      const size_t p = static_cast<size_t>(s.pair_slot[static_cast<size_t>(begin + i)]);
      mine.gate_acts[static_cast<size_t>(i)] = gate_rows[p / nu];
      mine.up_acts[static_cast<size_t>(i)] = up_rows[p / nu];
      mine.pair_weight[static_cast<size_t>(i)] = weights_[p];
    }
    if (inputs_ != nullptr) {
      std::vector<const float*> rows(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i)
        rows[static_cast<size_t>(i)] = s.xn.data() + (static_cast<size_t>(s.pair_slot[static_cast<size_t>(begin + i)]) / nu) * d;
      const backend::MatrixSlice slice{backend::MatrixSlice::Kind::Expert, e, n_expert_};
      inputs_->met(w.ffn_gate_exps, slice, rows, chunk_tokens_);
      inputs_->met(w.ffn_up_exps, slice, rows, chunk_tokens_);
    }
    expert_ffn(m.gate, m.up, m.down, m.index, mine.gate_acts.data(), mine.up_acts.data(), c, clamp_exp_,
               before ? mine.pair_weight.data() : nullptr, s.down.data() + static_cast<size_t>(begin) * d, n_embd_,
               inner);
  };
  if (source_ == nullptr) {
    run_tasks(pool, static_cast<int>(active_.size()), [&](int i) {
      const int e = active_[static_cast<size_t>(i)];
      run_expert(e, ExpertMatrices{w.ffn_gate_exps, w.ffn_up_exps, w.ffn_down_exps, e}, nullptr);
    });
  } else {
    run_streamed(run_expert, X, token_ids, n, next, pool);
  }

  // Shared expert over every token, unweighted.
  const bool shared = share_.owns_shared_expert();
  if (shared) {
    s.xn_batch.prepare(w.ffn_gate_shexp.type, pool);
    s.xn_batch.prepare(w.ffn_up_shexp.type, pool);
    expert_ffn(w.ffn_gate_shexp, w.ffn_up_shexp, w.ffn_down_shexp, -1, s.xn_batch.rows(w.ffn_gate_shexp.type),
               s.xn_batch.rows(w.ffn_up_shexp.type), n, clamp_shexp_, nullptr, s.shared.data(), n_embd_, pool);
  }

  // Routed experts summed in slot order (ds4 and llama.cpp agree), then the
  // shared expert added.
  // Slot by slot into a row of sums (per element the same additions, in the
  // same order, as one element at a time).
  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    std::vector<float> sum(d);
    for (int64_t t = t0; t < t1; ++t) {
      float* __restrict acc = sum.data();
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (size_t k = 0; k < nu; ++k) {
        const size_t pair = static_cast<size_t>(t) * nu + k;
        if (!share_.owns_expert(ids_[pair])) continue;  // another rank's part
        const float* __restrict down = s.down.data() + static_cast<size_t>(s.pair_row[pair]) * d;
        if (before) {
          for (size_t i = 0; i < d; ++i) acc[i] += down[i];
        } else {
          const float wk = weights_[pair];
          for (size_t i = 0; i < d; ++i) acc[i] += down[i] * wk;
        }
      }
      float* out = OUT + t * n_embd_;
      if (!shared) {
        std::copy(acc, acc + d, out);
        continue;
      }
      const float* shared_row = s.shared.data() + static_cast<size_t>(t) * d;
      for (size_t i = 0; i < d; ++i) out[i] = acc[i] + shared_row[i];
    }
  });
}

}  // namespace ds4::cpu
