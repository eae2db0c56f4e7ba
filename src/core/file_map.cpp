#include "core/file_map.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"

namespace ds4 {
namespace {

// Closes the descriptor on every path out of the constructor; the mapping
// stays valid after close.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// The whole pages that hold `range` (a range inside a mapping: its first page
// starts at a page boundary and its last page is mapped whole, so widening
// stays inside the mapping).
struct PageRange {
  void* start;
  size_t length;
};
PageRange page_range(std::span<const uint8_t> range) {
  const uintptr_t page = page_bytes();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data()) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data()) + range.size() + page - 1) & ~(page - 1);
  return {reinterpret_cast<void*>(begin), static_cast<size_t>(end - begin)};
}

// Whether this thread may lock memory past RLIMIT_MEMLOCK (CAP_IPC_LOCK in
// its effective set): then the limit is not what stopped mlock.
bool can_lock_past_the_limit() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

// Bytes this process has locked now (VmLck in /proc/self/status); 0 when unknown.
uint64_t locked_now() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmLck: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<uint64_t>(kib) * 1024;
}

constexpr size_t kHugePage = size_t{2} << 20;

// Maps `size` bytes of `fd` read-only, shared, at a 2 MiB boundary when it is
// that big: the kernel maps a file's 2 MiB pages only at addresses congruent
// to their file offset modulo 2 MiB. Reserves size + 2 MiB of address space,
// maps the file at the first boundary inside it and returns the rest.
void* map_huge_aligned(int fd, size_t size) {
  if (size < kHugePage) return ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const size_t reserve = size + kHugePage;
  void* area = ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) return ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const auto base = reinterpret_cast<uintptr_t>(area);
  const uintptr_t start = (base + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  void* p = ::mmap(reinterpret_cast<void*>(start), size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::munmap(area, reserve);
    errno = err;
    return MAP_FAILED;
  }
  // Give back the reservation around the file: before it, and after its last page.
  if (start > base) ::munmap(area, start - base);
  const uintptr_t mapped_end = start + ((size + page_bytes() - 1) & ~(page_bytes() - 1));
  if (base + reserve > mapped_end) ::munmap(reinterpret_cast<void*>(mapped_end), base + reserve - mapped_end);
  return p;
}

}  // namespace

uint64_t page_bytes() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

void lock_pages(std::span<const uint8_t> range, const std::string& what, const std::string& instead) {
  if (range.empty()) return;
  const std::string alt = instead.empty() ? "" : " or " + instead;
  const std::string then = instead.empty() ? "" : "; " + instead;
  const PageRange pages = page_range(range);
  // More than the machine's RAM can never be locked; trying would first push
  // everything else out of memory.
  const uint64_t ram = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * page_bytes();
  if (pages.length > ram)
    throw Error(what + ": cannot lock " + format_size(pages.length) + " of weights in RAM: this machine has " +
                format_size(ram) + " of RAM" + then);
  const uint64_t already = locked_now();
  // The raw system calls: sanitizer runtimes replace mlock/munlock with no-ops.
  if (::syscall(SYS_mlock, pages.start, pages.length) == 0) return;
  const int err = errno;
  ::syscall(SYS_munlock, pages.start, pages.length);  // a failed mlock may leave part of the range locked

  rlimit limit{};
  const bool have_limit = ::getrlimit(RLIMIT_MEMLOCK, &limit) == 0;
  const std::string limit_text =
      !have_limit ? "unknown" : limit.rlim_cur == RLIM_INFINITY ? "unlimited" : format_size(limit.rlim_cur);
  std::string msg = what + ": cannot lock " + format_size(pages.length) + " of weights in RAM";
  const bool over_limit = have_limit && limit.rlim_cur != RLIM_INFINITY &&
                          already + pages.length > static_cast<uint64_t>(limit.rlim_cur) && !can_lock_past_the_limit();
  if ((err == EPERM || err == ENOMEM) && over_limit) {
    msg += ": the locked-memory limit is " + limit_text + " (ulimit -l)";
    if (already > 0) msg += " and " + format_size(already) + " is locked already";
    msg += "; raise it (ulimit -l unlimited, or memlock in /etc/security/limits.conf)" + alt;
  } else if (err == ENOMEM || err == EAGAIN) {
    msg += " (mlock: " + std::string(std::strerror(err)) + "): this machine has " + format_size(ram) +
           " of RAM and the locked-memory limit is " + limit_text + " (ulimit -l); free memory" + alt;
  } else {
    msg += " (mlock: " + std::string(std::strerror(err)) + ")" + then;
  }
  throw Error(msg);
}

void advise_pages(std::span<const uint8_t> range, MapAccess access) noexcept {
  if (range.empty()) return;
  int advice = MADV_NORMAL;
  switch (access) {
    case MapAccess::Normal: advice = MADV_NORMAL; break;
    case MapAccess::Sequential: advice = MADV_SEQUENTIAL; break;
    case MapAccess::Random: advice = MADV_RANDOM; break;
    case MapAccess::WillNeed: advice = MADV_WILLNEED; break;
    case MapAccess::HugePages: advice = MADV_HUGEPAGE; break;
  }
  const PageRange pages = page_range(range);
  (void)::madvise(pages.start, pages.length, advice);
}

void prefault_pages(std::span<const uint8_t> range) noexcept {
  if (range.empty()) return;
  const PageRange pages = page_range(range);
#ifdef MADV_POPULATE_READ
  if (::madvise(pages.start, pages.length, MADV_POPULATE_READ) == 0) return;
#endif
  // Older kernels (or an interrupted populate): one read a page.
  const volatile uint8_t* p = static_cast<const volatile uint8_t*>(pages.start);
  for (size_t off = 0; off < pages.length; off += page_bytes()) (void)p[off];
}

uint64_t huge_page_bytes_in_smaps(std::string_view smaps, uintptr_t begin, uintptr_t end) {
  uint64_t total = 0;
  bool in_range = false;  // the current mapping overlaps [begin, end)
  size_t pos = 0;
  while (pos < smaps.size()) {
    size_t eol = smaps.find('\n', pos);
    if (eol == std::string_view::npos) eol = smaps.size();
    const std::string line(smaps.substr(pos, eol - pos));
    pos = eol + 1;
    unsigned long long lo = 0, hi = 0, kib = 0;
    char key[64];
    int used = 0;
    // A mapping's header: "lo-hi perms offset dev inode [path]", addresses in hex.
    if (std::sscanf(line.c_str(), "%llx-%llx %n", &lo, &hi, &used) == 2 && used > 0) {
      in_range = lo < end && begin < hi;
      continue;
    }
    if (!in_range || std::sscanf(line.c_str(), "%63[^:]: %llu kB", key, &kib) != 2) continue;
    const std::string_view k(key);
    if (k == "AnonHugePages" || k == "ShmemPmdMapped" || k == "FilePmdMapped") total += kib * 1024;
  }
  return total;
}

uint64_t huge_page_bytes(std::span<const uint8_t> range) {
  if (range.empty()) return 0;
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (f == nullptr) return 0;
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  const auto begin = reinterpret_cast<uintptr_t>(range.data());
  return huge_page_bytes_in_smaps(text, begin, begin + range.size());
}

void drop_cached_pages(std::span<const uint8_t> range, const std::string& path) noexcept {
  if (range.empty()) return;
  const PageRange pages = page_range(range);
  // Our own mapping first: the page cache keeps pages that are mapped.
  (void)::madvise(pages.start, pages.length, MADV_DONTNEED);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void release_pages(std::span<const uint8_t> range) noexcept {
  if (range.empty()) return;
  const PageRange pages = page_range(range);
  (void)::madvise(pages.start, pages.length, MADV_DONTNEED);
}

uint64_t resident_bytes(std::span<const uint8_t> range) {
  if (range.empty()) return 0;
  const PageRange pages = page_range(range);
  std::vector<unsigned char> in_core(pages.length / page_bytes());
  if (::mincore(pages.start, pages.length, in_core.data()) != 0)
    throw Error(std::string("mincore: ") + std::strerror(errno) + " (the range is not mapped)");
  uint64_t n = 0;
  for (unsigned char c : in_core) n += c & 1u;
  return n * page_bytes();
}

FileMap::FileMap(const std::string& path) : path_(path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode)) throw Error(path + ": is not a regular file");
  if (st.st_size == 0) return;

  const size_t size = static_cast<size_t>(st.st_size);
  void* p = map_huge_aligned(fd, size);
  if (p == MAP_FAILED) throw Error(path + ": cannot map " + std::to_string(st.st_size) + " bytes: " + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  size_ = static_cast<uint64_t>(st.st_size);
}

FileMap::FileMap(FileMap&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

FileMap& FileMap::operator=(FileMap&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

FileMap::~FileMap() { unmap(); }

void FileMap::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ds4
