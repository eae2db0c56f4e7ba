#include "backend/cpu/session_payload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <tuple>

#include "core/error.h"
#include "core/fp16.h"
#include "core/sha256.h"
#include "model/deepseek4_fingerprint.h"
#include "model/deepseek4_model.h"

namespace ds4::cpu {

static_assert(std::endian::native == std::endian::little, "payload values are copied in place as little-endian");

namespace {

constexpr size_t kHeaderFields = 13;
// A layer range's state (serialize_layers): its own magic, "DS4L".
constexpr uint32_t kLayersMagic = 0x4c345344;
constexpr uint32_t kLayersVersion = 1;
// The header's u32 fields in order, and their names in messages.
enum Field : size_t {
  kMagic,
  kVersion,
  kSavedCtx,
  kPrefillChunk,
  kRingCapacity,
  kRawWindow,
  kCompCapacity,
  kTokenCount,
  kLayerCount,
  kHeadDim,
  kIndexDim,
  kVocab,
  kRawRows,
};
constexpr std::array<std::string_view, kHeaderFields> kFieldNames = {
    "magic",      "version",          "saved context", "prefill chunk", "raw ring capacity",
    "raw window", "compressed capacity", "token count", "layer count",  "head dim",
    "indexer head dim", "vocab",      "raw rows"};

// Session file container (docs/session-files.md).
constexpr std::array<uint8_t, 4> kFileMagic = {'D', 'S', '4', 'S'};
constexpr uint32_t kFileVersion = 1;
constexpr size_t kFileHeaderBytes = 4 + 4 + 1 + 3 + 32 + 8;
constexpr size_t kDigestBytes = 32;

[[noreturn]] void fail(const std::string &what) { throw Error("session payload: " + what); }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// The raw window of a session of n_ctx (ds4 sizes it min(n_swa, ctx)), and
// the rows a consistent layer state holds after `tokens` tokens.
int64_t raw_window(const model::Deepseek4HParams &hp, int64_t n_ctx) { return std::min<int64_t>(hp.n_swa, n_ctx); }
int64_t comp_rows(uint32_t ratio, int64_t tokens) { return ratio == 0 ? 0 : tokens / ratio; }
int64_t index_rows(uint32_t ratio, int64_t tokens) { return ratio == 4 ? tokens / 4 : 0; }

// Compressed-row capacity written to the header: the row count of the
// largest compressed buffer, n_ctx / smallest ratio + 2 (MODEL.md 6; ctx/4 + 2
// for Flash, as ds4 writes); 0 when no layer compresses.
int64_t comp_capacity(const model::Deepseek4HParams &hp, int64_t n_ctx) {
  uint32_t smallest = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const uint32_t r = hp.ratio(il);
    if (r != 0 && (smallest == 0 || r < smallest)) smallest = r;
  }
  return smallest == 0 ? 0 : n_ctx / smallest + 2;
}

class Writer {
 public:
  explicit Writer(std::vector<uint8_t> &out) : out_(out) {}
  void u32(uint32_t v) { bytes(&v, sizeof v); }
  void f32s(std::span<const float> v) { bytes(v.data(), v.size_bytes()); }
  void f32s(const float *p, size_t n) { bytes(p, n * sizeof(float)); }

 private:
  void bytes(const void *p, size_t n) {
    const auto *b = static_cast<const uint8_t *>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t> &out_;
};

uint32_t to_u32(int64_t v, std::string_view what) {
  if (v < 0 || v > std::numeric_limits<uint32_t>::max())
    fail(std::string(what) + " " + std::to_string(v) + " does not fit the payload's u32");
  return static_cast<uint32_t>(v);
}

// Bounds-checked cursor over the payload; a short read names what was being
// read and where.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  std::span<const uint8_t> take(size_t n, const std::string &what) {
    if (n > b_.size() - at_)
      fail("truncated in " + what + ": needs " + std::to_string(n) + " bytes at offset " + std::to_string(at_) + ", " +
           std::to_string(b_.size() - at_) + " left");
    const auto s = b_.subspan(at_, n);
    at_ += n;
    return s;
  }
  uint32_t u32(const std::string &what) {
    uint32_t v;
    std::memcpy(&v, take(sizeof v, what).data(), sizeof v);
    return v;
  }
  // n floats as bytes; n is checked against what is left before it is
  // multiplied, so a huge count cannot wrap.
  std::span<const uint8_t> f32s(uint64_t n, const std::string &what) {
    if (n > (b_.size() - at_) / sizeof(float))
      fail("truncated in " + what + ": needs " + std::to_string(n) + " floats at offset " + std::to_string(at_) + ", " +
           std::to_string(b_.size() - at_) + " bytes left");
    return take(static_cast<size_t>(n) * sizeof(float), what);
  }
  size_t left() const { return b_.size() - at_; }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

// Where one layer's pieces lie in the payload (byte spans), found and checked
// before anything in the session is touched.
struct LayerPlan {
  std::span<const uint8_t> raw, comp, comp_kv, comp_score, index, index_kv, index_score;
};

void copy_floats(std::span<const uint8_t> src, std::span<float> dst) {
  std::memcpy(dst.data(), src.data(), src.size());
}

// A Default session stores its rows as f16 (KvRows); rows it saved are f16
// values, so a row value that is not (e.g. from a --quality session) cannot
// be stored as it is, and the load is refused rather than rounded.
void check_f16_exact(std::span<const uint8_t> src, size_t width, const std::string &what) {
  for (size_t i = 0; i < src.size() / sizeof(float); ++i) {
    float v;
    std::memcpy(&v, src.data() + i * sizeof(float), sizeof v);
    if (std::bit_cast<uint32_t>(f16_round(v)) != std::bit_cast<uint32_t>(v))
      fail(what + " " + std::to_string(i / width) + " value " + std::to_string(i % width) + " (" + std::to_string(v) +
           ") is not an f16 value; a default-numerics session stores f16 rows (load it with --quality)");
  }
}

std::vector<float> floats_of(std::span<const uint8_t> src) {
  std::vector<float> v(src.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), src.data(), src.size());
  return v;
}

// Refuses a layer state a load would refuse: the model's ratio, the window at
// positions tokens - raw_rows .. tokens - 1, the row counts `tokens` tokens
// leave. Returns the layer's bytes in a payload.
size_t check_layer_state(const model::Deepseek4HParams &hp, const LayerKvState &st, size_t il, int64_t tokens,
                         int64_t raw_rows) {
  const uint32_t ratio = hp.ratio(static_cast<uint32_t>(il));
  const std::string where = "layer " + std::to_string(il) + ": ";
  if (static_cast<uint32_t>(st.ratio()) != ratio)
    fail(where + "state has ratio " + std::to_string(st.ratio()) + ", the model " + std::to_string(ratio));
  if (st.raw_count() != raw_rows)
    fail(where + std::to_string(st.raw_count()) + " raw rows after " + std::to_string(tokens) + " tokens, expected " +
         std::to_string(raw_rows));
  for (int i = 0; i < st.raw_count(); ++i)
    if (st.raw_pos(i) != tokens - raw_rows + i)
      fail(where + "raw row " + std::to_string(i) + " is at position " + std::to_string(st.raw_pos(i)) +
           ", expected " + std::to_string(tokens - raw_rows + i));
  if (st.n_compressed() != comp_rows(ratio, tokens) || st.n_index() != index_rows(ratio, tokens))
    fail(where + std::to_string(st.n_compressed()) + " compressed and " + std::to_string(st.n_index()) +
         " index rows after " + std::to_string(tokens) + " tokens, expected " +
         std::to_string(comp_rows(ratio, tokens)) + " and " + std::to_string(index_rows(ratio, tokens)));
  const size_t row_values = static_cast<size_t>(raw_rows + st.n_compressed()) * hp.head_dim +
                            static_cast<size_t>(st.n_index()) * hp.indexer_head_dim;
  return row_values * 4 + st.frontier_bytes();  // rows are f32 in the payload
}

// One layer's rows and frontiers; rows are f32 in the payload whatever the
// storage (f16 rows convert exactly).
void write_layer_rows(Writer &w, const LayerKvState &st) {
  const auto hd = static_cast<size_t>(st.head_dim()), id = static_cast<size_t>(st.index_dim());
  std::vector<float> row(std::max(hd, id));
  for (int i = 0; i < st.raw_count(); ++i) w.f32s(st.raw_row(i, row.data()), hd);
  if (const Compressor *c = st.attn_compressor()) {
    for (int64_t r = 0; r < st.n_compressed(); ++r) w.f32s(st.compressed_row(r, row.data()), hd);
    w.f32s(c->state_kv());
    w.f32s(c->state_score());
  }
  if (const Compressor *c = st.index_compressor()) {
    for (int64_t r = 0; r < st.n_index(); ++r) w.f32s(st.index_row(r, row.data()), id);
    w.f32s(c->state_kv());
    w.f32s(c->state_score());
  }
}

// Where layer il's pieces lie (checked, nothing touched yet).
LayerPlan plan_layer(Reader &r, const model::Deepseek4HParams &hp, const LayerKvState &st, size_t il,
                     uint32_t raw_rows, uint32_t n_comp, uint32_t n_index, Numerics numerics) {
  const std::string where = "layer " + std::to_string(il) + " ";
  LayerPlan p;
  p.raw = r.f32s(uint64_t{raw_rows} * hp.head_dim, where + "raw rows");
  if (const Compressor *c = st.attn_compressor()) {
    const auto frontier = static_cast<uint64_t>(c->state_rows()) * static_cast<uint64_t>(c->state_width());
    p.comp = r.f32s(uint64_t{n_comp} * hp.head_dim, where + "compressed rows");
    p.comp_kv = r.f32s(frontier, where + "compressor kv");
    p.comp_score = r.f32s(frontier, where + "compressor score");
  }
  if (const Compressor *c = st.index_compressor()) {
    const auto frontier = static_cast<uint64_t>(c->state_rows()) * static_cast<uint64_t>(c->state_width());
    p.index = r.f32s(uint64_t{n_index} * hp.indexer_head_dim, where + "indexer rows");
    p.index_kv = r.f32s(frontier, where + "indexer compressor kv");
    p.index_score = r.f32s(frontier, where + "indexer compressor score");
  }
  if (numerics == Numerics::Default) {
    check_f16_exact(p.raw, hp.head_dim, where + "raw row");
    check_f16_exact(p.comp, hp.head_dim, where + "compressed row");
    check_f16_exact(p.index, hp.indexer_head_dim, where + "indexer row");
  }
  return p;
}

void apply_layer(LayerKvState &st, const LayerPlan &p, int64_t first_pos) {
  st.restore_raw(floats_of(p.raw), first_pos);
  st.restore_compressed(floats_of(p.comp));
  st.restore_index(floats_of(p.index));
  if (Compressor *c = st.attn_compressor()) {
    copy_floats(p.comp_kv, c->state_kv());
    copy_floats(p.comp_score, c->state_score());
  }
  if (Compressor *c = st.index_compressor()) {
    copy_floats(p.index_kv, c->state_kv());
    copy_floats(p.index_score, c->state_score());
  }
}

}  // namespace

std::vector<uint8_t> serialize_payload(const Session &session, int prefill_chunk) {
  if (!session.consistent()) throw Error("session save: the session was left incomplete by a cancelled evaluation");
  const model::Deepseek4HParams &hp = session.model().hparams();
  const auto &layers = session.layers();
  if (prefill_chunk < 1) fail("prefill chunk " + std::to_string(prefill_chunk) + " is not >= 1");
  if (layers.size() != hp.n_layer)
    fail("session holds " + std::to_string(layers.size()) + " layers, the model " + std::to_string(hp.n_layer));
  const int64_t tokens = session.size();
  const int64_t n_ctx = session.n_ctx();
  const int64_t window = raw_window(hp, n_ctx);
  const int64_t raw_rows = std::min(tokens, window);
  if (tokens > 0 && session.logits().size() != hp.n_vocab)
    fail("session of " + std::to_string(tokens) + " tokens holds " + std::to_string(session.logits().size()) +
         " logits, expected " + std::to_string(hp.n_vocab));

  // Refuse to write a state a load would refuse: ids inside the vocab, and
  // every layer holding what `tokens` tokens leave behind, the window at
  // positions tokens - R .. tokens - 1.
  if (tokens > n_ctx) fail(std::to_string(tokens) + " tokens in a context of " + std::to_string(n_ctx));
  for (size_t i = 0; i < session.tokens().size(); ++i)
    if (session.tokens()[i] < 0 || static_cast<uint32_t>(session.tokens()[i]) >= hp.n_vocab)
      fail("token " + std::to_string(i) + " is id " + std::to_string(session.tokens()[i]) + ", the vocab has " +
           std::to_string(hp.n_vocab));
  size_t bytes = kHeaderFields * 4 + static_cast<size_t>(tokens) * 4 + size_t{hp.n_vocab} * 4 + layers.size() * 8;
  for (size_t il = 0; il < layers.size(); ++il) bytes += check_layer_state(hp, layers[il], il, tokens, raw_rows);

  std::vector<uint8_t> out;
  out.reserve(bytes);
  Writer w(out);
  w.u32(kDsv4PayloadMagic);
  w.u32(kDsv4PayloadVersion);
  w.u32(to_u32(n_ctx, "saved context"));
  w.u32(static_cast<uint32_t>(prefill_chunk));
  w.u32(hp.n_swa);
  w.u32(static_cast<uint32_t>(window));
  w.u32(to_u32(comp_capacity(hp, n_ctx), "compressed capacity"));
  w.u32(static_cast<uint32_t>(tokens));
  w.u32(hp.n_layer);
  w.u32(hp.head_dim);
  w.u32(hp.indexer_head_dim);
  w.u32(hp.n_vocab);
  w.u32(static_cast<uint32_t>(raw_rows));

  for (const int32_t t : session.tokens()) w.u32(static_cast<uint32_t>(t));
  if (tokens > 0)
    w.f32s(session.logits());
  else
    out.resize(out.size() + size_t{hp.n_vocab} * sizeof(float), 0);  // no logits yet: zeros
  for (const LayerKvState &st : layers) w.u32(static_cast<uint32_t>(st.n_compressed()));
  for (const LayerKvState &st : layers) w.u32(static_cast<uint32_t>(st.n_index()));

  for (const LayerKvState &st : layers) write_layer_rows(w, st);
  return out;
}

std::vector<uint8_t> serialize_layers(const Session &session, backend::LayerRange range) {
  if (!session.consistent()) throw Error("session save: the session was left incomplete by a cancelled evaluation");
  const model::Deepseek4HParams &hp = session.model().hparams();
  const auto &layers = session.layers();
  const int n_layer = static_cast<int>(hp.n_layer);
  const int end = range.end < 0 ? n_layer : range.end;
  if (range.begin < 0 || range.begin >= end || end > n_layer)
    fail("layers " + std::to_string(range.begin) + ":" + std::to_string(range.end) + " do not fit the model");
  const bool with_logits = range.end < 0;
  const int64_t tokens = session.size();
  const int64_t raw_rows = std::min(tokens, raw_window(hp, session.n_ctx()));
  if (with_logits && tokens > 0 && session.logits().size() != hp.n_vocab)
    fail("session of " + std::to_string(tokens) + " tokens holds no logits");
  for (int il = range.begin; il < end; ++il)
    check_layer_state(hp, layers[static_cast<size_t>(il)], static_cast<size_t>(il), tokens, raw_rows);
  std::vector<uint8_t> out;
  Writer w(out);
  w.u32(kLayersMagic);
  w.u32(kLayersVersion);
  w.u32(to_u32(session.n_ctx(), "context"));
  w.u32(to_u32(tokens, "token count"));
  w.u32(static_cast<uint32_t>(range.begin));
  w.u32(static_cast<uint32_t>(end));
  w.u32(with_logits ? 1 : 0);
  w.u32(static_cast<uint32_t>(raw_rows));
  w.u32(hp.n_layer);
  w.u32(hp.head_dim);
  w.u32(hp.indexer_head_dim);
  w.u32(hp.n_vocab);
  for (const int32_t t : session.tokens()) w.u32(static_cast<uint32_t>(t));
  if (with_logits) {
    if (tokens > 0)
      w.f32s(session.logits());
    else
      out.resize(out.size() + size_t{hp.n_vocab} * sizeof(float), 0);
  }
  for (int il = range.begin; il < end; ++il) w.u32(static_cast<uint32_t>(layers[static_cast<size_t>(il)].n_compressed()));
  for (int il = range.begin; il < end; ++il) w.u32(static_cast<uint32_t>(layers[static_cast<size_t>(il)].n_index()));
  for (int il = range.begin; il < end; ++il) write_layer_rows(w, layers[static_cast<size_t>(il)]);
  return out;
}

void deserialize_layers(std::span<const uint8_t> blob, Session &session, backend::LayerRange range) {
  const model::Deepseek4HParams &hp = session.model().hparams();
  auto &layers = session.layers();
  Reader r(blob);
  auto field = [&](const char *name) { return r.u32(std::string("layer state ") + name); };
  if (field("magic") != kLayersMagic) fail("not a layer state (no \"DS4L\" magic)");
  if (const uint32_t v = field("version"); v != kLayersVersion)
    fail("layer state version " + std::to_string(v) + ", this build reads " + std::to_string(kLayersVersion));
  const uint32_t saved_ctx = field("context");
  const int64_t tokens = field("token count");
  const int begin = static_cast<int>(field("first layer"));
  const int end = static_cast<int>(field("end layer"));
  const bool with_logits = field("logits flag") != 0;
  const uint32_t raw_rows = field("raw rows");
  const uint32_t n_layer = field("layer count"), head_dim = field("head dim"), index_dim = field("indexer head dim"),
                 vocab = field("vocab");
  if (n_layer != hp.n_layer || head_dim != hp.head_dim || index_dim != hp.indexer_head_dim || vocab != hp.n_vocab)
    fail("the layer state is of another model shape");
  const int want_end = range.end < 0 ? static_cast<int>(hp.n_layer) : range.end;
  if (begin != range.begin || end != want_end || with_logits != (range.end < 0))
    fail("the layer state holds layers " + std::to_string(begin) + ":" + std::to_string(end) + ", expected " +
         std::to_string(range.begin) + ":" + std::to_string(want_end));
  if (saved_ctx == 0 || tokens >= session.n_ctx())
    fail("token count " + std::to_string(tokens) + " does not fit this session's context " +
         std::to_string(session.n_ctx()));
  if (raw_rows != std::min(tokens, raw_window(hp, session.n_ctx())))
    fail("raw rows " + std::to_string(raw_rows) + " do not fit " + std::to_string(tokens) + " tokens");
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  {
    const auto b = r.take(static_cast<size_t>(tokens) * 4, "token ids");
    for (size_t i = 0; i < ids.size(); ++i) {
      uint32_t v;
      std::memcpy(&v, b.data() + i * 4, 4);
      if (v >= hp.n_vocab) fail("token " + std::to_string(i) + " is id " + std::to_string(v));
      ids[i] = static_cast<int32_t>(v);
    }
  }
  std::span<const uint8_t> logit_bytes;
  if (with_logits) logit_bytes = r.f32s(hp.n_vocab, "logits");
  const auto n = static_cast<size_t>(end - begin);
  std::vector<uint32_t> n_comp(n), n_index(n);
  for (auto &c : n_comp) c = r.u32("compressed count");
  for (auto &c : n_index) c = r.u32("indexer count");
  std::vector<LayerPlan> plan(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t il = static_cast<size_t>(begin) + k;
    const uint32_t ratio = hp.ratio(static_cast<uint32_t>(il));
    if (n_comp[k] != comp_rows(ratio, tokens) || n_index[k] != index_rows(ratio, tokens))
      fail("layer " + std::to_string(il) + " row counts do not fit " + std::to_string(tokens) + " tokens");
    plan[k] = plan_layer(r, hp, layers[il], il, raw_rows, n_comp[k], n_index[k], session.numerics());
  }
  if (r.left() != 0) fail(std::to_string(r.left()) + " trailing bytes after the last layer");
  const int64_t first_pos = tokens - raw_rows;
  for (size_t k = 0; k < n; ++k) apply_layer(layers[static_cast<size_t>(begin) + k], plan[k], first_pos);
  session.mutable_tokens() = std::move(ids);
  if (with_logits) session.mutable_logits() = tokens > 0 ? floats_of(logit_bytes) : std::vector<float>{};
}

void deserialize_payload(std::span<const uint8_t> payload, Session &session) {
  const model::Deepseek4HParams &hp = session.model().hparams();
  auto &layers = session.layers();
  Reader r(payload);

  std::array<uint32_t, kHeaderFields> h{};
  for (size_t i = 0; i < kHeaderFields; ++i) h[i] = r.u32("header field " + std::string(kFieldNames[i]));
  // A field that must equal what this session / model has.
  auto expect = [&](Field f, uint64_t want, std::string_view whose) {
    if (h[f] != want)
      fail(std::string(kFieldNames[f]) + " is " + std::to_string(h[f]) + ", " + std::string(whose) + " has " +
           std::to_string(want));
  };
  if (h[kMagic] != kDsv4PayloadMagic)
    fail("magic is " + hex32(h[kMagic]) + ", expected " + hex32(kDsv4PayloadMagic) + " (\"DSV4\")");
  if (h[kVersion] != kDsv4PayloadVersion)
    fail("version is " + std::to_string(h[kVersion]) + ", this build reads " + std::to_string(kDsv4PayloadVersion));
  expect(kLayerCount, hp.n_layer, "the model");
  expect(kHeadDim, hp.head_dim, "the model");
  expect(kIndexDim, hp.indexer_head_dim, "the model");
  expect(kVocab, hp.n_vocab, "the model");
  if (layers.size() != hp.n_layer)
    fail("session holds " + std::to_string(layers.size()) + " layers, the model " + std::to_string(hp.n_layer));
  const int64_t n_ctx = session.n_ctx();
  if (h[kSavedCtx] == 0) fail("saved context is 0");
  if (h[kSavedCtx] > n_ctx)
    fail("saved context is " + std::to_string(h[kSavedCtx]) + ", larger than this session's " + std::to_string(n_ctx));
  expect(kRawWindow, static_cast<uint64_t>(raw_window(hp, n_ctx)), "this session");
  if (h[kRingCapacity] < h[kRawWindow])
    fail("raw ring capacity " + std::to_string(h[kRingCapacity]) + " is smaller than the raw window " +
         std::to_string(h[kRawWindow]));
  const int64_t tokens = h[kTokenCount];
  if (tokens > h[kSavedCtx])
    fail("token count is " + std::to_string(tokens) + ", more than the saved context " + std::to_string(h[kSavedCtx]));
  // The next token needs a free position (ds4 refuses the same).
  if (tokens >= n_ctx)
    fail("token count is " + std::to_string(tokens) + ", not below this session's context " + std::to_string(n_ctx) +
         " (no room for the next token)");
  expect(kRawRows, static_cast<uint64_t>(std::min<int64_t>(tokens, h[kRawWindow])), "the token count");

  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  {
    const auto b = r.take(static_cast<size_t>(tokens) * 4, "token ids");
    for (size_t i = 0; i < ids.size(); ++i) {
      uint32_t v;
      std::memcpy(&v, b.data() + i * 4, 4);
      if (v >= hp.n_vocab)
        fail("token " + std::to_string(i) + " is id " + std::to_string(v) + ", the vocab has " +
             std::to_string(hp.n_vocab));
      ids[i] = static_cast<int32_t>(v);
    }
  }
  const auto logit_bytes = r.f32s(hp.n_vocab, "logits");

  const size_t n_layer = hp.n_layer;
  std::vector<uint32_t> n_comp(n_layer), n_index(n_layer);
  for (size_t il = 0; il < n_layer; ++il) n_comp[il] = r.u32("layer " + std::to_string(il) + " compressed count");
  for (size_t il = 0; il < n_layer; ++il) n_index[il] = r.u32("layer " + std::to_string(il) + " indexer count");
  for (size_t il = 0; il < n_layer; ++il) {
    const uint32_t ratio = hp.ratio(static_cast<uint32_t>(il));
    const std::string where = "layer " + std::to_string(il) + " (ratio " + std::to_string(ratio) + ") ";
    for (auto [count, want, what] : {std::tuple{n_comp[il], comp_rows(ratio, tokens), "compressed count"},
                                     std::tuple{n_index[il], index_rows(ratio, tokens), "indexer count"}}) {
      if (count != want)
        fail(where + what + " is " + std::to_string(count) + ", " + std::to_string(tokens) + " tokens give " +
             std::to_string(want));
      if (count > h[kCompCapacity])
        fail(where + what + " " + std::to_string(count) + " exceeds the compressed capacity " +
             std::to_string(h[kCompCapacity]));
    }
  }

  std::vector<LayerPlan> plan(n_layer);
  for (size_t il = 0; il < n_layer; ++il)
    plan[il] = plan_layer(r, hp, layers[il], il, h[kRawRows], n_comp[il], n_index[il], session.numerics());
  if (r.left() != 0) fail(std::to_string(r.left()) + " trailing bytes after the last layer");

  // Everything is checked; from here on only allocation can fail, and the
  // big buffers were reserved for n_ctx when the session was made.
  std::vector<float> logits = tokens > 0 ? floats_of(logit_bytes) : std::vector<float>{};
  const int64_t first_pos = tokens - h[kRawRows];
  for (size_t il = 0; il < n_layer; ++il) apply_layer(layers[il], plan[il], first_pos);
  session.mutable_tokens() = std::move(ids);
  session.mutable_logits() = std::move(logits);
}

namespace {

std::string sys_error(const std::string &path, std::string_view what) {
  return path + ": " + std::string(what) + ": " + std::strerror(errno);
}

void write_all(int fd, std::span<const uint8_t> b, const std::string &path) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(sys_error(path, "cannot write"));
    b = b.subspan(static_cast<size_t>(n));
  }
}

std::vector<uint8_t> read_all(const std::string &path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(sys_error(path, "cannot open session file"));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(sys_error(path, "cannot stat"));
  if (!S_ISREG(st.st_mode)) throw Error(path + ": is not a regular file");
  std::vector<uint8_t> b(static_cast<size_t>(st.st_size));
  size_t at = 0;
  while (at < b.size()) {
    const ssize_t n = ::read(fd, b.data() + at, b.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(sys_error(path, "cannot read"));
    if (n == 0) throw Error(path + ": file shrank while being read");
    at += static_cast<size_t>(n);
  }
  return b;
}

uint8_t numerics_code(Numerics n) { return n == Numerics::Default ? 0 : 1; }
std::string_view numerics_name(Numerics n) { return n == Numerics::Default ? "Default" : "Quality"; }

}  // namespace

void save_session_file(const std::string &path, const Session &session, int prefill_chunk) {
  const std::vector<uint8_t> payload = serialize_payload(session, prefill_chunk);
  const std::array<uint8_t, 32> fp = model::fingerprint(session.model());

  std::array<uint8_t, kFileHeaderBytes> header{};
  size_t at = 0;
  auto put = [&](const void *p, size_t n) {
    std::memcpy(header.data() + at, p, n);
    at += n;
  };
  put(kFileMagic.data(), kFileMagic.size());
  put(&kFileVersion, 4);
  const uint8_t numerics = numerics_code(session.numerics());
  put(&numerics, 1);
  at += 3;  // reserved, zero
  put(fp.data(), fp.size());
  const uint64_t payload_len = payload.size();
  put(&payload_len, 8);

  Sha256 digest;
  digest.update(header);
  digest.update(payload);
  const Sha256Digest sum = digest.finish();

  // A reader never sees a half-written file: write a private temporary name,
  // flush it to disk, then rename over the target.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(sys_error(path, "cannot create session file " + tmp));
  try {
    write_all(fd, header, path);
    write_all(fd, payload, path);
    write_all(fd, sum, path);
    if (::fsync(fd) != 0) throw Error(sys_error(path, "cannot flush"));
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(sys_error(path, "cannot close"));
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error(sys_error(path, "cannot rename " + tmp + " to it"));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

void load_session_file(const std::string &path, Session &session) {
  const std::vector<uint8_t> b = read_all(path);
  if (b.size() < kFileMagic.size() || !std::equal(kFileMagic.begin(), kFileMagic.end(), b.begin()))
    throw Error(path + ": not a session file (no \"DS4S\" magic)");
  if (b.size() < kFileHeaderBytes + kDigestBytes)
    throw Error(path + ": session file damaged: " + std::to_string(b.size()) + " bytes, shorter than its header");
  uint32_t version;
  std::memcpy(&version, b.data() + 4, 4);
  if (version != kFileVersion)
    throw Error(path + ": session file version " + std::to_string(version) + ", this build reads " +
                std::to_string(kFileVersion));
  const size_t body = b.size() - kDigestBytes;
  const Sha256Digest sum = sha256(std::span(b).first(body));
  if (!std::equal(sum.begin(), sum.end(), b.begin() + static_cast<std::ptrdiff_t>(body)))
    throw Error(path + ": session file damaged: checksum mismatch");
  uint64_t payload_len;
  std::memcpy(&payload_len, b.data() + kFileHeaderBytes - 8, 8);
  if (payload_len != body - kFileHeaderBytes)
    throw Error(path + ": session file damaged: payload length " + std::to_string(payload_len) + ", file holds " +
                std::to_string(body - kFileHeaderBytes));
  if (b[9] != 0 || b[10] != 0 || b[11] != 0) throw Error(path + ": session file damaged: reserved bytes not zero");
  const uint8_t numerics = b[8];
  if (numerics > 1) throw Error(path + ": session file damaged: numerics code " + std::to_string(numerics));
  if (numerics != numerics_code(session.numerics()))
    throw Error(path + ": saved with " +
                std::string(numerics_name(numerics == 0 ? Numerics::Default : Numerics::Quality)) +
                " numerics, this session uses " + std::string(numerics_name(session.numerics())));
  const std::array<uint8_t, 32> fp = model::fingerprint(session.model());
  if (!std::equal(fp.begin(), fp.end(), b.begin() + 12))
    throw Error(path + ": session file made for another model (fingerprint differs from " +
                session.model().file().path() + ")");
  try {
    deserialize_payload(std::span(b).subspan(kFileHeaderBytes, payload_len), session);
  } catch (const Error &e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace ds4::cpu
