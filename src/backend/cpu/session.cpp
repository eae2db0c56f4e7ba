#include "backend/cpu/session.h"

#include <string>

#include "core/error.h"
#include "model/deepseek4_model.h"

namespace ds4::cpu {

Session::Session(const model::Deepseek4Model &model, Numerics numerics, int64_t n_ctx)
    : model_(&model), numerics_(numerics), n_ctx_(n_ctx) {
  if (n_ctx < 1) throw Error("session: context size " + std::to_string(n_ctx) + " must be at least 1");
  const auto &hp = model.hparams();
  layers_.reserve(model.weights().layers.size());
  for (const auto &layer : model.weights().layers) layers_.emplace_back(layer, hp, numerics, n_ctx);
}

void Session::reset() {
  for (auto &l : layers_) l.reset();
  tokens_.clear();
  logits_.clear();
  consistent_ = true;
}

void Session::restore(const Session &snapshot) {
  if (&snapshot == this) return;
  if (snapshot.model_ != model_) throw Error("session restore: the snapshot belongs to another model");
  if (snapshot.numerics_ != numerics_) throw Error("session restore: the snapshot was taken in other numerics");
  if (snapshot.n_ctx_ != n_ctx_)
    throw Error("session restore: the snapshot has context " + std::to_string(snapshot.n_ctx_) + ", this session " +
                std::to_string(n_ctx_));
  // Copy-assign member by member: vectors reuse this session's capacity.
  layers_ = snapshot.layers_;
  tokens_ = snapshot.tokens_;
  logits_ = snapshot.logits_;
  consistent_ = snapshot.consistent_;
}

std::unique_ptr<backend::Session> Session::snapshot() const { return std::make_unique<Session>(*this); }

void Session::restore(const backend::Session &snapshot) {
  const auto *cpu = dynamic_cast<const Session *>(&snapshot);
  if (!cpu) throw Error("session restore: the snapshot belongs to another backend");
  restore(*cpu);
}

size_t Session::state_bytes() const {
  size_t n = 0;
  for (const auto &l : layers_) n += l.bytes();
  return n;
}

}  // namespace ds4::cpu
