#include "backend/cpu/expert_cache.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

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

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

enum Matrix { kGate = 0, kUp = 1, kDown = 2 };

const model::TensorView& matrix_of(const model::LayerWeights& l, int m) {
  return m == kGate ? l.ffn_gate_exps : m == kUp ? l.ffn_up_exps : l.ffn_down_exps;
}

// One read into a slot: [off, off + len) of the file (aligned), of which the
// first `need` bytes are wanted (the file may end before off + len).
struct Read {
  uint8_t* dst = nullptr;
  uint64_t off = 0, len = 0, need = 0, done = 0;
  const model::TensorView* tensor = nullptr;
  int expert = 0;
  size_t key = 0;  // layer * n_expert + expert
};

}  // namespace

struct ExpertCache::Impl {
  const model::Deepseek4Model& model;
  const uint8_t* file_base = nullptr;
  std::string path;
  int n_layer = 0, n_expert = 0;
  uint64_t region[3] = {0, 0, 0};  // capacity of each matrix's region in a slot
  uint64_t slot_size = 0;

  int fd = -1;           // the reads' descriptor
  int fd_buffered = -1;  // when direct reads are refused
  bool direct = false;
  bool said_buffered = false;
  io_uring ring{};
  bool have_ring = false;
  unsigned depth = 64;

  std::vector<std::pair<void*, size_t>> slabs;
  std::vector<uint8_t*> slot_ptr;
  std::vector<int32_t> slot_key;      // layer * n_expert + expert, -1 free
  std::vector<uint64_t> slot_used;    // last acquire that served it
  std::vector<uint8_t> slot_pinned;   // served by the current acquire
  std::vector<int32_t> slot_of;       // key -> slot, -1 when not cached
  std::vector<uint32_t> hot;          // key -> decayed selection count
  std::vector<int32_t> pinned;        // slots to unpin at release()
  uint64_t clock = 0;
  int64_t tokens = 0;
  ExpertCacheStats stats;

  explicit Impl(const model::Deepseek4Model& m) : model(m) {}
  ~Impl();

  void open_file(const ExpertCacheOptions& o);
  void allocate(int64_t n_slots);
  int32_t victim();
  // The misses of the last acquire: submitted by start_reads (io_uring), all
  // in by finish_reads.
  std::vector<Read> pending;
  std::vector<size_t> unsubmitted;  // indices into pending
  size_t inflight = 0;
  std::chrono::steady_clock::time_point reads_began;
  void start_reads();
  void finish_reads();
  void submit_some();
  void read_with_pread();
  void forget_pending_slots();
  // The three reads that fill `slot` with expert e of `layer`.
  void add_reads(const model::LayerWeights& layer, int e, int32_t slot, size_t key, std::vector<Read>& reads) const;
  void finish_read(Read& r, ssize_t got);
  void use_buffered(const char* why);
  [[noreturn]] void fail_read(const Read& r, const std::string& what) const;
  ExpertMatrices view(const model::LayerWeights& layer, int expert, int32_t slot) const;
  uint64_t matrix_offset(const model::TensorView& t, int expert) const {
    return static_cast<uint64_t>(t.data - file_base) + static_cast<uint64_t>(expert) * t.matrix_bytes();
  }
};

ExpertCache::Impl::~Impl() {
  if (have_ring) io_uring_queue_exit(&ring);
  if (fd >= 0) ::close(fd);
  if (fd_buffered >= 0 && fd_buffered != fd) ::close(fd_buffered);
  for (auto& [p, n] : slabs) ::munmap(p, n);
}

uint64_t ExpertCache::slot_bytes(const model::Deepseek4Model& model) {
  uint64_t total = 0;
  for (int m = 0; m < 3; ++m) {
    uint64_t largest = 0;
    for (const auto& l : model.weights().layers) largest = std::max(largest, matrix_of(l, m).matrix_bytes());
    // An unaligned matrix spans at most one more alignment unit.
    total += round_up(largest, kAlign) + kAlign;
  }
  return total;
}

void ExpertCache::Impl::open_file(const ExpertCacheOptions& o) {
  path = o.path.empty() ? model.file().path() : o.path;
  fd_buffered = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_buffered < 0) throw Error(path + ": cannot open for expert streaming: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_buffered, &st) != 0) throw Error(path + ": " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != model.file().file_size()) {
    throw Error(path + " is " + std::to_string(st.st_size) + " bytes but the model file was " +
                std::to_string(model.file().file_size()) + ": not the file the model was loaded from (changed or truncated?)");
  }
  fd = o.direct_io ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
  direct = fd >= 0;
  if (!direct) {
    fd = fd_buffered;
    if (o.direct_io) use_buffered(std::strerror(errno));
  }
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
  if (direct && fd >= 0 && fd != fd_buffered) ::close(fd);
  fd = fd_buffered;
  direct = false;
  if (!said_buffered) {
    std::fprintf(stderr,
                 "ds4: expert streaming: %s refuses direct reads (%s); reading through the page cache and dropping "
                 "the pages after each read\n",
                 path.c_str(), why);
    said_buffered = true;
  }
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
    for (int64_t i = 0; i < n; ++i) slot_ptr.push_back(static_cast<uint8_t*>(p) + static_cast<size_t>(i) * slot_size);
  }
  slot_key.assign(static_cast<size_t>(n_slots), -1);
  slot_used.assign(static_cast<size_t>(n_slots), 0);
  slot_pinned.assign(static_cast<size_t>(n_slots), 0);
}

ExpertCache::ExpertCache(const model::Deepseek4Model& model, const ExpertCacheOptions& options)
    : impl_(std::make_unique<Impl>(model)) {
  Impl& m = *impl_;
  const auto& hp = model.hparams();
  m.n_layer = static_cast<int>(model.weights().layers.size());
  m.n_expert = static_cast<int>(hp.n_expert);
  m.file_base = model.file().bytes().data();
  for (int k = 0; k < 3; ++k) {
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

void ExpertCache::begin_tokens(int64_t n) {
  Impl& m = *impl_;
  const int64_t halvings = std::min<int64_t>(32, (m.tokens + n) / kDecayTokens - m.tokens / kDecayTokens);
  m.tokens += n;
  if (halvings > 0) {
    for (uint32_t& h : m.hot) h >>= halvings;
  }
}

int32_t ExpertCache::Impl::victim() {
  int32_t best = -1;
  for (size_t s = 0; s < slot_key.size(); ++s) {
    if (slot_pinned[s]) continue;
    if (slot_key[s] < 0) return static_cast<int32_t>(s);
    if (best < 0) {
      best = static_cast<int32_t>(s);
      continue;
    }
    const uint32_t hs = hot[static_cast<size_t>(slot_key[s])];
    const uint32_t hb = hot[static_cast<size_t>(slot_key[static_cast<size_t>(best)])];
    if (hs < hb || (hs == hb && slot_used[s] < slot_used[static_cast<size_t>(best)])) best = static_cast<int32_t>(s);
  }
  return best;
}

void ExpertCache::Impl::add_reads(const model::LayerWeights& layer, int e, int32_t slot, size_t key,
                                  std::vector<Read>& reads) const {
  uint64_t at = 0;
  for (int k = 0; k < 3; ++k) {
    const model::TensorView& t = matrix_of(layer, k);
    const uint64_t off = matrix_offset(t, e);
    Read r;
    r.off = off / kAlign * kAlign;
    r.need = off + t.matrix_bytes() - r.off;
    r.len = round_up(r.need, kAlign);
    r.dst = slot_ptr[static_cast<size_t>(slot)] + at;
    r.tensor = &t;
    r.expert = e;
    r.key = key;
    reads.push_back(r);
    at += region[k];
  }
}

ExpertMatrices ExpertCache::Impl::view(const model::LayerWeights& layer, int expert, int32_t slot) const {
  ExpertMatrices out;
  uint8_t* base = slot_ptr[static_cast<size_t>(slot)];
  uint64_t at = 0;
  for (int k = 0; k < 3; ++k) {
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

size_t ExpertCache::acquire(const model::LayerWeights& layer, std::span<int> experts, std::span<ExpertMatrices> out,
                            size_t* ready) {
  Impl& m = *impl_;
  if (ready != nullptr) *ready = 0;
  if (experts.empty()) return 0;
  if (!m.pending.empty()) throw Error("expert streaming: acquire before the last acquire's wait (internal)");
  const auto key_of = [&](int e) { return static_cast<size_t>(layer.index) * static_cast<size_t>(m.n_expert) + static_cast<size_t>(e); };
  // Cached experts first: they need no read, and with fewer slots than
  // experts they are the ones served now.
  std::stable_partition(experts.begin(), experts.end(), [&](int e) { return m.slot_of[key_of(e)] >= 0; });
  const size_t n = std::min(experts.size(), static_cast<size_t>(m.stats.slots));
  ++m.clock;
  std::vector<Read> reads;
  for (size_t i = 0; i < n; ++i) {
    const int e = experts[i];
    const size_t key = key_of(e);
    ++m.hot[key];
    int32_t slot = m.slot_of[key];
    if (slot >= 0) {
      ++m.stats.hits;
    } else {
      ++m.stats.misses;
      slot = m.victim();
      if (slot < 0) throw Error("expert streaming: no free slot (internal: more experts acquired than slots)");
      if (m.slot_key[static_cast<size_t>(slot)] >= 0) m.slot_of[static_cast<size_t>(m.slot_key[static_cast<size_t>(slot)])] = -1;
      m.add_reads(layer, e, slot, key, reads);
    }
    m.slot_pinned[static_cast<size_t>(slot)] = 1;
    m.slot_used[static_cast<size_t>(slot)] = m.clock;
    m.pinned.push_back(slot);
    // Bound before the read: a failed read leaves the slot free again below.
    m.slot_key[static_cast<size_t>(slot)] = static_cast<int32_t>(key);
    m.slot_of[key] = slot;
    out[i] = m.view(layer, e, slot);
  }
  if (ready != nullptr) *ready = n;
  if (!reads.empty()) {
    // Hits come first in `experts`, so the first (n - misses) are ready now.
    if (ready != nullptr) *ready = n - reads.size() / 3;
    m.pending = std::move(reads);
    m.start_reads();
    if (ready == nullptr) wait();
  }
  return n;
}

size_t ExpertCache::preload(std::span<const backend::ExpertUse> hot) {
  Impl& m = *impl_;
  std::vector<Read> reads;
  size_t n = 0;
  for (const backend::ExpertUse& h : hot) {
    if (h.layer >= m.model.weights().layers.size() || h.expert >= static_cast<uint32_t>(m.n_expert)) {
      throw Error("expert streaming: hot list entry layer " + std::to_string(h.layer) + " expert " +
                  std::to_string(h.expert) + " is outside the model (" + std::to_string(m.n_layer) + " layers of " +
                  std::to_string(m.n_expert) + " experts)");
    }
    const size_t key = static_cast<size_t>(h.layer) * static_cast<size_t>(m.n_expert) + h.expert;
    if (m.slot_of[key] >= 0) continue;
    const int32_t slot = m.victim();
    if (slot < 0 || m.slot_key[static_cast<size_t>(slot)] >= 0) break;  // full: the list is in priority order
    m.slot_key[static_cast<size_t>(slot)] = static_cast<int32_t>(key);
    m.slot_of[key] = slot;
    // Counted as recent selections, so the first tokens do not evict them at once.
    m.hot[key] = static_cast<uint32_t>(std::min<uint64_t>(h.count, 1u << 16));
    m.add_reads(m.model.weights().layers[h.layer], static_cast<int>(h.expert), slot, key, reads);
    ++n;
  }
  if (!reads.empty()) {
    m.pending = std::move(reads);
    m.start_reads();
    wait();
  }
  return n;
}

void ExpertCache::wait() {
  Impl& m = *impl_;
  if (m.pending.empty()) return;
  try {
    m.finish_reads();
  } catch (...) {
    m.forget_pending_slots();
    release();
    throw;
  }
  m.stats.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - m.reads_began).count();
  m.pending.clear();
}

void ExpertCache::release() {
  Impl& m = *impl_;
  for (int32_t s : m.pinned) m.slot_pinned[static_cast<size_t>(s)] = 0;
  m.pinned.clear();
}

void ExpertCache::Impl::fail_read(const Read& r, const std::string& what) const {
  throw Error(path + ": reading expert " + std::to_string(r.expert) + " of " + std::string(r.tensor->name) +
              " (file bytes " + std::to_string(r.off) + ".." + std::to_string(r.off + r.need) + "): " + what);
}

void ExpertCache::Impl::finish_read(Read& r, ssize_t got) {
  if (got < 0) fail_read(r, std::strerror(static_cast<int>(-got)));
  if (got == 0) {
    if (r.done < r.need) {
      fail_read(r, "the file ends at byte " + std::to_string(r.off + r.done) + " (truncated?)");
    }
    r.done = r.len;  // the aligned tail past the end of the file
    return;
  }
  r.done += static_cast<uint64_t>(got);
  stats.bytes_read += static_cast<uint64_t>(got);
  if (!direct && r.done >= r.need) {
    // Buffered: the page cache need not keep what the slot now holds.
    ::posix_fadvise(fd, static_cast<off_t>(r.off), static_cast<off_t>(r.len), POSIX_FADV_DONTNEED);
  }
  if (r.done >= r.need) r.done = r.len;
}

void ExpertCache::Impl::forget_pending_slots() {
  // The slots being read hold nothing usable.
  for (const Read& r : pending) {
    const int32_t slot = slot_of[r.key];
    if (slot >= 0) {
      slot_key[static_cast<size_t>(slot)] = -1;
      slot_of[r.key] = -1;
    }
  }
  pending.clear();
  unsubmitted.clear();
  inflight = 0;
}

void ExpertCache::Impl::start_reads() {
  reads_began = std::chrono::steady_clock::now();
  stats.io_uring = have_ring;
  if (!have_ring) return;  // pread in finish_reads
  unsubmitted.clear();
  for (size_t i = pending.size(); i > 0; --i) unsubmitted.push_back(i - 1);  // popped from the back: in order
  submit_some();
}

void ExpertCache::Impl::submit_some() {
  size_t added = 0;
  while (!unsubmitted.empty() && inflight < depth) {
    const size_t i = unsubmitted.back();
    Read& r = pending[i];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == nullptr) break;  // the ring's submission queue is full: later
    io_uring_prep_read(sqe, fd, r.dst + r.done, static_cast<unsigned>(r.len - r.done), r.off + r.done);
    io_uring_sqe_set_data64(sqe, i);
    unsubmitted.pop_back();
    ++inflight;
    ++added;
  }
  if (added > 0) {
    const int rc = io_uring_submit(&ring);
    if (rc < 0) throw Error(std::string("expert streaming: io_uring submit: ") + std::strerror(-rc));
  }
}

void ExpertCache::Impl::finish_reads() {
  if (!have_ring) {
    read_with_pread();
  } else {
    // Every completion is taken, even after a failure, so that none is left
    // in the ring for the next acquire; the first failure is thrown after.
    std::optional<Error> failure;
    std::vector<size_t> refused;  // direct reads refused: again through the page cache
    while (inflight > 0 || (!unsubmitted.empty() && !failure)) {
      if (!failure) submit_some();
      io_uring_cqe* cqe = nullptr;
      int rc = 0;
      do rc = io_uring_wait_cqe(&ring, &cqe);
      while (rc == -EINTR);
      if (rc < 0) throw Error(std::string("expert streaming: io_uring wait: ") + std::strerror(-rc));
      const auto i = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      --inflight;
      if (failure) continue;
      Read& r = pending[i];
      if (res == -EINVAL && direct) {
        refused.push_back(i);
      } else if (res == -EINTR || res == -EAGAIN) {
        unsubmitted.push_back(i);
      } else {
        try {
          finish_read(r, res);
        } catch (const Error& e) {
          failure = e;
          continue;
        }
        if (r.done < r.len) unsubmitted.push_back(i);  // the rest of a short read
      }
      if (!refused.empty() && inflight == 0) {
        // No direct read in flight any more: switch, and read the refused ones.
        use_buffered("EINVAL on an aligned read");
        unsubmitted.insert(unsubmitted.end(), refused.begin(), refused.end());
        refused.clear();
      }
    }
    if (failure) throw *failure;
  }
  stats.direct_io = direct;
}

void ExpertCache::Impl::read_with_pread() {
  for (Read& r : pending) {
    while (r.done < r.len) {
      const ssize_t got = ::pread(fd, r.dst + r.done, r.len - r.done, static_cast<off_t>(r.off + r.done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EINVAL && direct) {
        use_buffered("EINVAL on an aligned read");
        continue;
      }
      finish_read(r, got < 0 ? -errno : got);
    }
  }
}

ExpertCacheStats ExpertCache::stats() const { return impl_->stats; }

}  // namespace ds4::cpu
