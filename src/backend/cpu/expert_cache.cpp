#include "backend/cpu/expert_cache.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>

#include "core/byte_size.h"
#include "core/error.h"
#include "model/deepseek4_model.h"

namespace ds4::cpu {

namespace {

// Direct reads start, end and land on multiples of this (the largest logical
// block size in use; ext4 and xfs ask 512 or 4096).
constexpr uint64_t kAlign = 4096;
// Slots are allocated in slabs of at most this many bytes.
constexpr uint64_t kSlabBytes = uint64_t{1} << 30;
// Selection counts halve every this many tokens (ds4's route hotness).
constexpr int64_t kDecayTokens = 16;
// Reads per slot: gate, up, down.
constexpr int kMatrices = 3;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

enum Matrix { kGate = 0, kUp = 1, kDown = 2 };

const model::TensorView& matrix_of(const model::LayerWeights& l, int m) {
  return m == kGate ? l.ffn_gate_exps : m == kUp ? l.ffn_up_exps : l.ffn_down_exps;
}

// A slot is free, being read into (its reads in flight or queued: it cannot
// be given to another expert until they are all in) or holds its expert.
enum class SlotState : uint8_t { Free, Loading, Ready };

// One read into a slot: [off, off + len) of the file (aligned), of which the
// first `need` bytes are wanted (the file may end before off + len).
struct Read {
  uint8_t* dst = nullptr;
  uint64_t off = 0, len = 0, need = 0, done = 0;
  const model::TensorView* tensor = nullptr;
  int expert = 0;
  uint32_t file = 0;  // index into Impl::files
  int32_t slot = -1;
  bool prefetch = false;  // queued behind the reads an acquire waits for
};

}  // namespace

// One file of the model (one per shard of a shard set).
struct SourceFile {
  std::string path;
  const uint8_t* base = nullptr;  // its mapping
  uint64_t size = 0;
  int fd_direct = -1;    // O_DIRECT, while the file system takes it
  int fd_buffered = -1;  // the page cache path
};

struct ExpertCache::Impl {
  const model::Deepseek4Model& model;
  std::vector<SourceFile> files;
  int n_layer = 0, n_expert = 0;
  uint64_t region[kMatrices] = {0, 0, 0};  // capacity of each matrix's region in a slot
  uint64_t slot_size = 0;

  bool direct = false;  // every file reads with O_DIRECT
  bool said_buffered = false;
  io_uring ring{};
  bool have_ring = false;
  unsigned depth = 64;

  std::vector<std::pair<void*, size_t>> slabs;
  // Per slot.
  std::vector<uint8_t*> slot_ptr;
  std::vector<int32_t> slot_key;        // layer * n_expert + expert, -1 free
  std::vector<SlotState> slot_state;
  std::vector<uint8_t> slot_reads_left;  // of its reads, not yet in
  std::vector<std::string> slot_error;   // a read that failed (the slot is freed when its reads are in)
  std::vector<uint64_t> slot_used;       // last acquire that served it
  std::vector<uint8_t> slot_pinned;      // served by the current acquire
  std::vector<uint8_t> slot_protected;   // prefetch asked for it; not acquired since
  std::vector<uint8_t> slot_prefetched;  // read by prefetch, not acquired since
  // Per (layer, expert) key.
  std::vector<int32_t> slot_of;  // -1 when not cached
  std::vector<uint32_t> hot;     // decayed selection count

  std::vector<int32_t> acquired;   // the current acquire's slots, in its out order
  std::vector<int32_t> protected_slots;
  int64_t n_protected = 0;
  int64_t n_pinned = 0;
  uint64_t clock = 0;
  int64_t tokens = 0;
  ExpertCacheStats stats;

  // Reads: a pool of records, queued (those an acquire waits for first), then
  // in flight in the ring.
  std::vector<Read> reads;
  std::vector<size_t> free_reads;
  std::deque<size_t> demand_queue, prefetch_queue;
  size_t inflight = 0;

  explicit Impl(const model::Deepseek4Model& m) : model(m) {}
  ~Impl();

  void open_file(const ExpertCacheOptions& o);
  void allocate(int64_t n_slots);
  void take_pages(void* p, size_t bytes);
  size_t key_of(uint32_t layer, int e) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(n_expert) + static_cast<size_t>(e);
  }
  // The slot to give a new expert: a free one, else the least wanted of those
  // no acquire holds and no read fills (a protected one last; never one for
  // prefetch). -1 when there is none now.
  int32_t victim(bool for_prefetch) const;
  // victim(false), waiting for reads in flight when every candidate is being
  // read into.
  int32_t victim_waiting();
  // Gives `slot` to expert e of `layer` (its former expert forgotten) and
  // queues the three reads that fill it.
  void bind(const model::LayerWeights& layer, int e, int32_t slot, bool prefetch);
  void unprotect(int32_t slot);
  // Reads on: queued reads submitted while the ring has room, completions
  // taken; with `block`, waits for at least one completion when none is in.
  void pump(bool block);
  void submit();
  bool reap(bool block);
  void complete(size_t read, int res);
  void advance(Read& r, int res);
  void read_done(size_t read);
  void read_now(size_t read);  // pread, without a ring
  void promote(int32_t slot);  // its queued prefetch reads go before the others
  void use_buffered(const char* why);
  std::string read_failure(const Read& r, const std::string& what) const;
  ExpertMatrices view(const model::LayerWeights& layer, int expert, int32_t slot) const;
  // The file holding `t`, and expert `expert`'s matrix's offset in it.
  uint32_t file_of(const model::TensorView& t) const {
    const auto at = reinterpret_cast<uintptr_t>(t.data);
    for (uint32_t f = 0; f < files.size(); ++f) {
      const auto base = reinterpret_cast<uintptr_t>(files[f].base);
      if (at >= base && at - base < files[f].size) return f;
    }
    throw Error("expert streaming: " + std::string(t.name) + " lies in none of the model's files");
  }
  uint64_t matrix_offset(const model::TensorView& t, int expert) const {
    return static_cast<uint64_t>(t.data - files[file_of(t)].base) + static_cast<uint64_t>(expert) * t.matrix_bytes();
  }
  int fd_for(const Read& r) const { return direct ? files[r.file].fd_direct : files[r.file].fd_buffered; }
  // The first failure among the current acquire's held slots, or empty.
  std::string acquire_failure() const;
  // Blocks until no read is queued or in flight.
  void drain();
};

ExpertCache::Impl::~Impl() {
  if (have_ring) {
    // The kernel may still be writing into the slabs: take every completion first.
    while (inflight > 0) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) break;
      io_uring_cqe_seen(&ring, cqe);
      --inflight;
    }
    io_uring_queue_exit(&ring);
  }
  for (const SourceFile& f : files) {
    if (f.fd_direct >= 0) ::close(f.fd_direct);
    if (f.fd_buffered >= 0) ::close(f.fd_buffered);
  }
  for (auto& [p, n] : slabs) ::munmap(p, n);
}

uint64_t ExpertCache::slot_bytes(const model::Deepseek4Model& model) {
  uint64_t total = 0;
  for (int m = 0; m < kMatrices; ++m) {
    uint64_t largest = 0;
    for (const auto& l : model.weights().layers) largest = std::max(largest, matrix_of(l, m).matrix_bytes());
    // An unaligned matrix spans at most one more alignment unit.
    total += round_up(largest, kAlign) + kAlign;
  }
  return total;
}

void ExpertCache::Impl::open_file(const ExpertCacheOptions& o) {
  const std::vector<gguf::Shard>& shards = model.file().shards();
  if (!o.path.empty() && shards.size() != 1) {
    throw Error("expert streaming: a path in place of the model's own applies to a single-file model, not to " +
                std::to_string(shards.size()) + " shards");
  }
  direct = o.direct_io;
  int direct_errno = 0;
  for (const gguf::Shard& shard : shards) {
    SourceFile& f = files.emplace_back();
    f.path = o.path.empty() ? shard.path : o.path;
    f.base = shard.bytes.data();
    f.size = shard.bytes.size();
    f.fd_buffered = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd_buffered < 0) throw Error(f.path + ": cannot open for expert streaming: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd_buffered, &st) != 0) throw Error(f.path + ": " + std::strerror(errno));
    if (static_cast<uint64_t>(st.st_size) != f.size) {
      throw Error(f.path + " is " + std::to_string(st.st_size) + " bytes but the model file was " +
                  std::to_string(f.size) + ": not the file the model was loaded from (changed or truncated?)");
    }
    f.fd_direct = o.direct_io ? ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
    if (o.direct_io && f.fd_direct < 0 && direct) {
      direct = false;
      direct_errno = errno;
    }
  }
  if (!direct && o.direct_io) use_buffered(std::strerror(direct_errno));
  stats.direct_io = direct;
  depth = std::max(1u, o.queue_depth);
  const int rc = o.io_uring ? io_uring_queue_init(depth, &ring, 0) : -ENOSYS;
  have_ring = rc == 0;
  stats.io_uring = have_ring;
  if (!have_ring && o.io_uring) {
    std::fprintf(stderr, "ds4: expert streaming: io_uring unavailable (%s); reading with pread\n", std::strerror(-rc));
  }
}

void ExpertCache::Impl::use_buffered(const char* why) {
  // The direct descriptor stays open: reads already in flight on it finish.
  direct = false;
  if (!said_buffered) {
    std::fprintf(stderr,
                 "ds4: expert streaming: %s refuses direct reads (%s); reading through the page cache and dropping "
                 "the pages after each read\n",
                 files.size() == 1 ? files[0].path.c_str() : "a model file", why);
    said_buffered = true;
  }
}

void ExpertCache::Impl::take_pages(void* p, size_t bytes) {
  // A first touch costs about what a read does (a fault, a page zeroed; a
  // direct read into untouched memory faults page by page, measured at a
  // sixth of the disk's rate in a KVM guest): the slabs are taken now, locked
  // where the limit allows (never swapped out; the raw system call, which
  // sanitizer runtimes do not replace), otherwise populated.
  if (::syscall(SYS_mlock, p, bytes) == 0) {
    stats.locked_bytes += bytes;
    return;
  }
  ::syscall(SYS_munlock, p, bytes);  // a failed mlock may leave part of it locked
#ifdef MADV_POPULATE_WRITE
  if (::madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto* bytes_at = static_cast<volatile uint8_t*>(p);
  for (size_t at = 0; at < bytes; at += page) bytes_at[at] = 0;
}

void ExpertCache::Impl::allocate(int64_t n_slots) {
  const auto per_slab = static_cast<int64_t>(std::max<uint64_t>(1, kSlabBytes / slot_size));
  for (int64_t at = 0; at < n_slots; at += per_slab) {
    const int64_t n = std::min(per_slab, n_slots - at);
    const size_t bytes = static_cast<size_t>(n) * slot_size;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw Error("expert streaming: cannot allocate " + std::to_string(n_slots) + " expert slots of " +
                  format_size(slot_size) + ": " + std::strerror(errno));
    }
    ::madvise(p, bytes, MADV_HUGEPAGE);  // fewer TLB misses in the kernels; advice only
    slabs.emplace_back(p, bytes);
    take_pages(p, bytes);
    for (int64_t i = 0; i < n; ++i) slot_ptr.push_back(static_cast<uint8_t*>(p) + static_cast<size_t>(i) * slot_size);
  }
  const auto ns = static_cast<size_t>(n_slots);
  slot_key.assign(ns, -1);
  slot_state.assign(ns, SlotState::Free);
  slot_reads_left.assign(ns, 0);
  slot_error.assign(ns, std::string());
  slot_used.assign(ns, 0);
  slot_pinned.assign(ns, 0);
  slot_protected.assign(ns, 0);
  slot_prefetched.assign(ns, 0);
}

ExpertCache::ExpertCache(const model::Deepseek4Model& model, const ExpertCacheOptions& options)
    : impl_(std::make_unique<Impl>(model)) {
  Impl& m = *impl_;
  const auto& hp = model.hparams();
  m.n_layer = static_cast<int>(model.weights().layers.size());
  m.n_expert = static_cast<int>(hp.n_expert);
  for (int k = 0; k < kMatrices; ++k) {
    uint64_t largest = 0;
    for (const auto& l : model.weights().layers) largest = std::max(largest, matrix_of(l, k).matrix_bytes());
    m.region[k] = round_up(largest, kAlign) + kAlign;
  }
  m.slot_size = slot_bytes(model);
  int64_t n_slots = options.slots;
  if (n_slots <= 0) {
    n_slots = static_cast<int64_t>(options.budget_bytes / m.slot_size);
    if (n_slots < 1) {
      throw Error("expert streaming: a budget of " + format_size(options.budget_bytes) +
                  " holds no expert (one takes " + format_size(m.slot_size) + ")");
    }
  }
  n_slots = std::min<int64_t>(n_slots, static_cast<int64_t>(m.n_layer) * m.n_expert);
  m.open_file(options);
  m.allocate(n_slots);
  m.slot_of.assign(static_cast<size_t>(m.n_layer) * static_cast<size_t>(m.n_expert), -1);
  m.hot.assign(m.slot_of.size(), 0);
  m.stats.slots = n_slots;
  m.stats.slot_bytes = m.slot_size;
}

ExpertCache::~ExpertCache() = default;

int32_t ExpertCache::Impl::victim(bool for_prefetch) const {
  int32_t best = -1;
  // Ranked by (protected, selection count, last use): lowest first.
  auto better = [&](size_t s, size_t b) {
    if (slot_protected[s] != slot_protected[b]) return slot_protected[s] < slot_protected[b];
    const uint32_t hs = hot[static_cast<size_t>(slot_key[s])], hb = hot[static_cast<size_t>(slot_key[b])];
    return hs < hb || (hs == hb && slot_used[s] < slot_used[b]);
  };
  for (size_t s = 0; s < slot_key.size(); ++s) {
    if (slot_pinned[s] || slot_state[s] == SlotState::Loading) continue;
    if (slot_state[s] == SlotState::Free) return static_cast<int32_t>(s);
    if (for_prefetch && slot_protected[s]) continue;
    if (best < 0 || better(s, static_cast<size_t>(best))) best = static_cast<int32_t>(s);
  }
  return best;
}

int32_t ExpertCache::Impl::victim_waiting() {
  for (;;) {
    const int32_t v = victim(false);
    if (v >= 0) return v;
    if (inflight == 0 && demand_queue.empty() && prefetch_queue.empty())
      throw Error("expert streaming: no free slot (internal: more experts acquired than slots)");
    pump(true);  // every candidate is being read into: the first to finish
  }
}

void ExpertCache::Impl::unprotect(int32_t slot) {
  const auto s = static_cast<size_t>(slot);
  if (!slot_protected[s]) return;
  slot_protected[s] = 0;
  --n_protected;
}

void ExpertCache::Impl::bind(const model::LayerWeights& layer, int e, int32_t slot, bool prefetch) {
  const auto s = static_cast<size_t>(slot);
  if (slot_key[s] >= 0) {
    slot_of[static_cast<size_t>(slot_key[s])] = -1;
    if (slot_prefetched[s]) ++stats.prefetch_unused;
  }
  unprotect(slot);
  slot_prefetched[s] = 0;
  const size_t key = key_of(layer.index, e);
  slot_key[s] = static_cast<int32_t>(key);
  slot_of[key] = slot;
  slot_state[s] = SlotState::Loading;
  slot_reads_left[s] = kMatrices;
  slot_error[s].clear();
  uint64_t at = 0;
  for (int k = 0; k < kMatrices; ++k) {
    const model::TensorView& t = matrix_of(layer, k);
    const uint64_t off = matrix_offset(t, e);
    Read r;
    r.file = file_of(t);
    r.off = off / kAlign * kAlign;
    r.need = off + t.matrix_bytes() - r.off;
    r.len = round_up(r.need, kAlign);
    r.dst = slot_ptr[s] + at;
    r.tensor = &t;
    r.expert = e;
    r.slot = slot;
    r.prefetch = prefetch;
    size_t i = 0;
    if (free_reads.empty()) {
      i = reads.size();
      reads.push_back(r);
    } else {
      i = free_reads.back();
      free_reads.pop_back();
      reads[i] = r;
    }
    (prefetch ? prefetch_queue : demand_queue).push_back(i);
    at += region[k];
  }
}

ExpertMatrices ExpertCache::Impl::view(const model::LayerWeights& layer, int expert, int32_t slot) const {
  ExpertMatrices out;
  uint8_t* base = slot_ptr[static_cast<size_t>(slot)];
  uint64_t at = 0;
  for (int k = 0; k < kMatrices; ++k) {
    const model::TensorView& t = matrix_of(layer, k);
    model::TensorView v = t;
    const uint64_t off = matrix_offset(t, expert);
    v.data = base + at + (off % kAlign);
    v.ne[2] = 1;
    v.nbytes = t.matrix_bytes();
    v.n_rows = t.ne[1];
    (k == kGate ? out.gate : k == kUp ? out.up : out.down) = v;
    at += region[k];
  }
  out.index = 0;
  return out;
}

void ExpertCache::begin_tokens(int64_t n) {
  Impl& m = *impl_;
  const int64_t halvings = std::min<int64_t>(32, (m.tokens + n) / kDecayTokens - m.tokens / kDecayTokens);
  m.tokens += n;
  if (halvings > 0) {
    for (uint32_t& h : m.hot) h >>= halvings;
  }
  // The last tokens' predictions are ordinary cache contents now.
  for (int32_t s : m.protected_slots) {
    m.unprotect(s);
    if (m.slot_prefetched[static_cast<size_t>(s)]) {
      m.slot_prefetched[static_cast<size_t>(s)] = 0;
      ++m.stats.prefetch_unused;
    }
  }
  m.protected_slots.clear();
}

size_t ExpertCache::acquire(const model::LayerWeights& layer, std::span<int> experts, std::span<ExpertMatrices> out,
                            size_t* ready) {
  Impl& m = *impl_;
  if (ready != nullptr) *ready = 0;
  if (experts.empty()) return 0;
  if (!m.acquired.empty()) throw Error("expert streaming: acquire before the last acquire's release (internal)");
  try {
    return acquire_slots(layer, experts, out, ready);
  } catch (...) {
    release();  // nothing stays held by an acquire that failed
    throw;
  }
}

size_t ExpertCache::acquire_slots(const model::LayerWeights& layer, std::span<int> experts,
                                  std::span<ExpertMatrices> out, size_t* ready) {
  Impl& m = *impl_;
  m.pump(false);
  // Cached experts first, then those being read, then the misses: the ready
  // ones compute at once, and with fewer slots than experts they are the
  // ones served now.
  auto rank = [&](int e) {
    const int32_t s = m.slot_of[m.key_of(layer.index, e)];
    return s < 0 ? 2 : m.slot_state[static_cast<size_t>(s)] == SlotState::Ready ? 0 : 1;
  };
  std::stable_sort(experts.begin(), experts.end(), [&](int a, int b) { return rank(a) < rank(b); });
  const size_t n = std::min(experts.size(), static_cast<size_t>(m.stats.slots));
  ++m.clock;
  for (size_t i = 0; i < n; ++i) {
    const int e = experts[i];
    const size_t key = m.key_of(layer.index, e);
    ++m.hot[key];
    int32_t slot = m.slot_of[key];
    if (slot >= 0) {
      const auto s = static_cast<size_t>(slot);
      if (m.slot_prefetched[s]) {
        ++m.stats.prefetch_hits;
        m.slot_prefetched[s] = 0;
        if (m.slot_state[s] == SlotState::Loading) m.promote(slot);
      } else {
        ++m.stats.hits;
      }
      m.unprotect(slot);
    } else {
      ++m.stats.misses;
      slot = m.victim_waiting();
      m.bind(layer, e, slot, false);
    }
    const auto s = static_cast<size_t>(slot);
    m.slot_pinned[s] = 1;
    ++m.n_pinned;
    m.slot_used[s] = m.clock;
    m.acquired.push_back(slot);
    out[i] = m.view(layer, e, slot);
  }
  m.pump(false);
  if (ready == nullptr) {
    for (size_t k = 0; k < n;) k = wait(k);
    return n;
  }
  size_t k = 0;
  while (k < n && m.slot_state[static_cast<size_t>(m.acquired[k])] == SlotState::Ready) ++k;
  *ready = k;
  return n;
}

std::string ExpertCache::Impl::acquire_failure() const {
  for (int32_t s : acquired)
    if (slot_pinned[static_cast<size_t>(s)] && !slot_error[static_cast<size_t>(s)].empty())
      return slot_error[static_cast<size_t>(s)];
  return {};
}

size_t ExpertCache::wait(size_t ready) {
  Impl& m = *impl_;
  const auto began = std::chrono::steady_clock::now();
  bool blocked = false;
  for (;;) {
    m.pump(false);
    const std::string failure = m.acquire_failure();
    if (!failure.empty()) {
      release();
      throw Error(failure);
    }
    size_t k = std::min(ready, m.acquired.size());
    while (k < m.acquired.size() && m.slot_state[static_cast<size_t>(m.acquired[k])] == SlotState::Ready) ++k;
    if (k > ready || k == m.acquired.size()) {
      if (blocked) m.stats.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      return k;
    }
    blocked = true;
    m.pump(true);
  }
}

void ExpertCache::done_with(size_t from, size_t to) {
  Impl& m = *impl_;
  to = std::min(to, m.acquired.size());
  for (size_t i = from; i < to; ++i) {
    const auto s = static_cast<size_t>(m.acquired[i]);
    if (m.slot_pinned[s]) {
      m.slot_pinned[s] = 0;
      --m.n_pinned;
    }
  }
}

void ExpertCache::release() {
  Impl& m = *impl_;
  done_with(0, m.acquired.size());
  m.acquired.clear();
}

bool ExpertCache::wants_prefetch() const {
  const Impl& m = *impl_;
  return m.have_ring && m.n_protected < m.stats.slots / 2 && m.n_pinned < m.stats.slots;
}

void ExpertCache::prefetch(const model::LayerWeights& layer, std::span<const int> experts) {
  Impl& m = *impl_;
  if (!m.have_ring) return;  // pread would block: no background reads
  const int64_t room = m.stats.slots / 2;
  for (const int e : experts) {
    if (e < 0 || e >= m.n_expert) continue;
    if (m.n_protected >= room) break;
    const size_t key = m.key_of(layer.index, e);
    int32_t slot = m.slot_of[key];
    if (slot >= 0) {
      // Cached or being read: kept for the acquire that is coming.
      if (m.slot_protected[static_cast<size_t>(slot)]) continue;
    } else {
      slot = m.victim(true);
      if (slot < 0) break;
      m.bind(layer, e, slot, true);
      m.slot_prefetched[static_cast<size_t>(slot)] = 1;
      ++m.stats.prefetched;
    }
    m.slot_protected[static_cast<size_t>(slot)] = 1;
    ++m.n_protected;
    m.protected_slots.push_back(slot);
  }
  try {
    m.pump(false);
  } catch (const Error&) {
    // A hint never fails: the reads stay queued, and the next acquire or
    // wait meets the same error where it can be reported.
  }
}

size_t ExpertCache::preload(std::span<const backend::ExpertUse> hot) {
  Impl& m = *impl_;
  std::vector<int32_t> loading;
  for (const backend::ExpertUse& h : hot) {
    if (h.layer >= m.model.weights().layers.size() || h.expert >= static_cast<uint32_t>(m.n_expert)) {
      throw Error("expert streaming: hot list entry layer " + std::to_string(h.layer) + " expert " +
                  std::to_string(h.expert) + " is outside the model (" + std::to_string(m.n_layer) + " layers of " +
                  std::to_string(m.n_expert) + " experts)");
    }
    const size_t key = m.key_of(h.layer, static_cast<int>(h.expert));
    if (m.slot_of[key] >= 0) continue;
    const int32_t slot = m.victim(false);
    if (slot < 0 || m.slot_state[static_cast<size_t>(slot)] != SlotState::Free) break;  // full: the list is in priority order
    m.bind(m.model.weights().layers[h.layer], static_cast<int>(h.expert), slot, false);
    // Counted as recent selections, so the first tokens do not evict them at once.
    m.hot[key] = static_cast<uint32_t>(std::min<uint64_t>(h.count, 1u << 16));
    loading.push_back(slot);
  }
  m.drain();
  for (int32_t s : loading)
    if (!m.slot_error[static_cast<size_t>(s)].empty()) throw Error(m.slot_error[static_cast<size_t>(s)]);
  return loading.size();
}

double ExpertCache::measure_read_rate(int64_t n, uint64_t seed) {
  Impl& m = *impl_;
  m.drain();
  std::mt19937_64 rng(seed);
  const size_t n_keys = m.slot_of.size();
  n = std::min<int64_t>({n, m.stats.slots, static_cast<int64_t>(n_keys)});
  std::vector<int32_t> loading;
  const uint64_t bytes_before = m.stats.bytes_read;
  const auto began = std::chrono::steady_clock::now();
  for (int64_t tries = 0; static_cast<int64_t>(loading.size()) < n && tries < 16 * n + 64; ++tries) {
    const size_t key = static_cast<size_t>(rng() % n_keys);
    if (m.slot_of[key] >= 0) continue;
    const int32_t slot = m.victim(false);
    if (slot < 0) break;
    const auto& layer = m.model.weights().layers[key / static_cast<size_t>(m.n_expert)];
    m.bind(layer, static_cast<int>(key % static_cast<size_t>(m.n_expert)), slot, false);
    loading.push_back(slot);
    m.pump(false);
  }
  m.drain();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  for (int32_t s : loading)
    if (!m.slot_error[static_cast<size_t>(s)].empty()) throw Error(m.slot_error[static_cast<size_t>(s)]);
  return secs > 0 ? static_cast<double>(m.stats.bytes_read - bytes_before) / secs : 0.0;
}

std::string ExpertCache::Impl::read_failure(const Read& r, const std::string& what) const {
  return files[r.file].path + ": reading expert " + std::to_string(r.expert) + " of " + std::string(r.tensor->name) +
         " (file bytes " + std::to_string(r.off) + ".." + std::to_string(r.off + r.need) + "): " + what;
}

void ExpertCache::Impl::promote(int32_t slot) {
  for (auto it = prefetch_queue.begin(); it != prefetch_queue.end();) {
    if (reads[*it].slot == slot) {
      reads[*it].prefetch = false;
      demand_queue.push_back(*it);
      it = prefetch_queue.erase(it);
    } else {
      ++it;
    }
  }
}

void ExpertCache::Impl::pump(bool block) {
  if (!have_ring) {
    while (!demand_queue.empty() || !prefetch_queue.empty()) {
      std::deque<size_t>& q = demand_queue.empty() ? prefetch_queue : demand_queue;
      const size_t i = q.front();
      q.pop_front();
      read_now(i);
    }
    return;
  }
  submit();
  if (!reap(false) && block && inflight > 0) reap(true);
  submit();  // room freed by the completions
}

void ExpertCache::Impl::submit() {
  size_t added = 0;
  while (inflight < depth && (!demand_queue.empty() || !prefetch_queue.empty())) {
    std::deque<size_t>& q = demand_queue.empty() ? prefetch_queue : demand_queue;
    const size_t i = q.front();
    Read& r = reads[i];
    if (!slot_error[static_cast<size_t>(r.slot)].empty()) {  // its slot failed already
      q.pop_front();
      read_done(i);
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == nullptr) break;  // the submission queue is full: later
    q.pop_front();
    io_uring_prep_read(sqe, fd_for(r), r.dst + r.done, static_cast<unsigned>(r.len - r.done),
                       r.off + r.done);
    io_uring_sqe_set_data64(sqe, i);
    ++inflight;
    ++added;
  }
  if (added > 0) {
    int rc = 0;
    do rc = io_uring_submit(&ring);
    while (rc == -EINTR);
    if (rc < 0) throw Error(std::string("expert streaming: io_uring submit: ") + std::strerror(-rc));
  }
}

bool ExpertCache::Impl::reap(bool block) {
  bool any = false;
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    int rc = 0;
    if (block && !any) {
      do rc = io_uring_wait_cqe(&ring, &cqe);
      while (rc == -EINTR);
      if (rc < 0) throw Error(std::string("expert streaming: io_uring wait: ") + std::strerror(-rc));
    } else {
      rc = io_uring_peek_cqe(&ring, &cqe);
      if (rc != 0 || cqe == nullptr) return any;
    }
    const auto i = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    any = true;
    complete(i, res);
  }
}

// One completion of read i: in full, in part (the rest queued again), or failed.
void ExpertCache::Impl::complete(size_t i, int res) {
  Read& r = reads[i];
  const auto s = static_cast<size_t>(r.slot);
  std::deque<size_t>& q = r.prefetch ? prefetch_queue : demand_queue;
  if (!slot_error[s].empty()) {
    read_done(i);
    return;
  }
  if (res == -EINVAL && direct) {
    use_buffered("EINVAL on an aligned read");
    q.push_front(i);
    return;
  }
  if (res == -EINTR || res == -EAGAIN) {
    q.push_front(i);
    return;
  }
  advance(r, res);
  if (slot_error[s].empty() && r.done < r.len) {
    q.push_front(i);  // the rest of a short read
    return;
  }
  read_done(i);
}

// Read r got `res` (bytes, or -errno): its progress, or its slot's failure.
void ExpertCache::Impl::advance(Read& r, int res) {
  std::string& failure = slot_error[static_cast<size_t>(r.slot)];
  if (res < 0) {
    failure = read_failure(r, std::strerror(-res));
  } else if (res == 0) {
    if (r.done < r.need) {
      failure = read_failure(r, "the file ends at byte " + std::to_string(r.off + r.done) + " (truncated?)");
    } else {
      r.done = r.len;  // the aligned tail past the end of the file
    }
  } else {
    r.done += static_cast<uint64_t>(res);
    stats.bytes_read += static_cast<uint64_t>(res);
    if (r.done >= r.need) {
      if (!direct) {
        // Buffered: the page cache need not keep what the slot now holds.
        ::posix_fadvise(files[r.file].fd_buffered, static_cast<off_t>(r.off), static_cast<off_t>(r.len), POSIX_FADV_DONTNEED);
      }
      r.done = r.len;
    }
  }
}

// Read i is over (in, or its slot failed): the slot is ready, or free again
// once its last read is in.
void ExpertCache::Impl::read_done(size_t i) {
  const auto s = static_cast<size_t>(reads[i].slot);
  free_reads.push_back(i);
  if (--slot_reads_left[s] > 0) return;
  if (slot_error[s].empty()) {
    slot_state[s] = SlotState::Ready;
    return;
  }
  // Nothing usable: free. The error stays for an acquire holding the slot.
  unprotect(reads[i].slot);
  slot_state[s] = SlotState::Free;
  if (slot_key[s] >= 0) slot_of[static_cast<size_t>(slot_key[s])] = -1;
  slot_key[s] = -1;
  slot_prefetched[s] = 0;
}

void ExpertCache::Impl::read_now(size_t i) {
  Read& r = reads[i];
  const auto s = static_cast<size_t>(r.slot);
  while (slot_error[s].empty() && r.done < r.len) {
    const ssize_t got = ::pread(fd_for(r), r.dst + r.done, r.len - r.done,
                                static_cast<off_t>(r.off + r.done));
    if (got < 0 && errno == EINTR) continue;
    const int res = got < 0 ? -errno : static_cast<int>(got);
    if (res == -EINVAL && direct) {
      use_buffered("EINVAL on an aligned read");
      continue;
    }
    advance(r, res);
  }
  read_done(i);
}

void ExpertCache::Impl::drain() {
  while (inflight > 0 || !demand_queue.empty() || !prefetch_queue.empty()) pump(true);
}

ExpertCacheStats ExpertCache::stats() const {
  ExpertCacheStats out = impl_->stats;
  out.direct_io = impl_->direct;
  return out;
}

}  // namespace ds4::cpu
