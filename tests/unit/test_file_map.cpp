// FileMap and the page helpers: the mapping shows the file's bytes, mlock
// either locks the pages (VmLck grows by them) or fails with a message naming
// the limit and the fix (forced in a child without CAP_IPC_LOCK and a tiny
// RLIMIT_MEMLOCK), advice never throws nor changes what is read, and
// mincore's count follows the page cache (evicted with POSIX_FADV_DONTNEED,
// read back by prefault_pages), mappings of 2 MiB or more start at a 2 MiB
// boundary, drop_cached_pages empties the cache of the file without changing
// a byte read, and huge_page_bytes sums the huge-page fields of the smaps
// entries that overlap a range.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_map.h"
#include "support/error_of.h"
#include "support/file_io.h"
#include "support/temp_dir.h"

namespace ds4 {
namespace {

using test::TempDir;

// `n` bytes of a fixed pattern that differs from page to page.
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> b(n);
  uint32_t s = 12345;
  for (auto& v : b) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(s >> 24);
  }
  return b;
}

uint64_t round_to_pages(uint64_t n) { return (n + page_bytes() - 1) / page_bytes() * page_bytes(); }

// VmLck of /proc/self/status in bytes.
uint64_t locked_bytes_now() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmLck: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<uint64_t>(kib) * 1024;
}

bool has_cap_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

// Removes CAP_IPC_LOCK from the effective set, so RLIMIT_MEMLOCK applies.
bool drop_cap_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  return ::syscall(SYS_capset, &header, data) == 0;
}

// Evicts the file's clean pages from the page cache (they are not mapped by
// anyone, so the kernel can drop them). False on tmpfs, where the cache is
// the only copy and nothing is evicted.
bool evict_from_page_cache(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0 || fs.f_type == TMPFS_MAGIC) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

TEST(FileMap, ShowsTheFileBytes) {
  TempDir dir;
  const std::vector<uint8_t> content = pattern(3 * page_bytes() + 100);
  test::write_bytes(dir.file("f.bin"), content);
  const FileMap map(dir.file("f.bin"));
  ASSERT_EQ(map.size(), content.size());
  EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
}

TEST(FileMap, LockLocksEveryPageOrNamesTheLimit) {
  TempDir dir;
  const std::vector<uint8_t> content = pattern(16 * page_bytes() + 100);
  test::write_bytes(dir.file("w.gguf"), content);
  const FileMap map(dir.file("w.gguf"));
  const uint64_t pages = round_to_pages(content.size());

  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  const uint64_t before = locked_bytes_now();
  const bool fits = has_cap_ipc_lock() || limit.rlim_cur == RLIM_INFINITY || before + pages <= limit.rlim_cur;
  if (fits) {
    map.lock();
    EXPECT_GE(locked_bytes_now(), before + pages);
    EXPECT_EQ(map.resident_bytes(), pages);
    EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
  } else {
    const std::string msg = test::error_of([&] { map.lock(); });
    EXPECT_NE(msg.find("ulimit -l"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--mlock"), std::string::npos) << msg;
    EXPECT_EQ(locked_bytes_now(), before) << "a failed lock leaves nothing locked";
  }
}

// In a child without CAP_IPC_LOCK under RLIMIT_MEMLOCK = `limit` bytes (or
// the hard limit when that is lower): the
// message of the failed lock ("" when it did not throw; "setup failed: ..."
// when the child could not be set up).
std::string lock_error_in_child(const FileMap& map, rlim_t limit) {
  int fds[2];
  if (::pipe(fds) != 0) return "setup failed: pipe";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string result;
    rlimit low{};
    ::getrlimit(RLIMIT_MEMLOCK, &low);  // unprivileged, it may only go down
    if (low.rlim_max == RLIM_INFINITY || low.rlim_max > limit) low.rlim_max = limit;
    low.rlim_cur = low.rlim_max;
    if (!drop_cap_ipc_lock()) {
      result = "setup failed: capset";
    } else if (::setrlimit(RLIMIT_MEMLOCK, &low) != 0) {
      result = "setup failed: setrlimit";
    } else {
      try {
        map.lock();
      } catch (const Error& e) {
        result = e.what();
      }
    }
    const ssize_t n = ::write(fds[1], result.data(), result.size());
    ::_exit(n == static_cast<ssize_t>(result.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return out;
}

TEST(FileMap, LockPastTheLimitSaysWhichLimitAndHowToRaiseIt) {
  TempDir dir;
  test::write_bytes(dir.file("w.gguf"), pattern(16 * page_bytes() + 100));  // 17 pages: 68 KiB with 4 KiB pages
  const FileMap map(dir.file("w.gguf"));
  const std::string size = page_bytes() == 4096 ? "68.00 KiB" : "";

  // A limit below the mapping: mlock says ENOMEM.
  const std::string small = lock_error_in_child(map, 4 * page_bytes());
  ASSERT_EQ(small.rfind("setup failed", 0), std::string::npos) << small;
  for (const std::string& s : {dir.file("w.gguf") + ": cannot lock " + size, std::string("of weights in RAM"),
                               std::string("the locked-memory limit is ") + (page_bytes() == 4096 ? "16.00 KiB" : ""),
                               std::string("(ulimit -l)"), std::string("raise it"), std::string("without --mlock")})
    EXPECT_NE(small.find(s), std::string::npos) << "'" << s << "' not in: " << small;

  // No locked memory at all: mlock says EPERM; same message.
  const std::string none = lock_error_in_child(map, 0);
  for (const std::string& s : {std::string("the locked-memory limit is 0 bytes (ulimit -l)"), std::string("--mlock")})
    EXPECT_NE(none.find(s), std::string::npos) << "'" << s << "' not in: " << none;
}

// A file larger than the machine's RAM is refused before mlock is tried (a
// sparse file: nothing is written). The child also runs under a small limit
// without CAP_IPC_LOCK, so that mlock could not start paging in any case.
TEST(FileMap, LockLargerThanRamSaysSo) {
  TempDir dir;
  const uint64_t ram = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * page_bytes();
  const std::string path = dir.file("huge.gguf");
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(ram + ram / 2)), 0);
    ::close(fd);
  }
  const FileMap map(path);
  const std::string msg = lock_error_in_child(map, 1 << 20);
  for (const std::string& s : {path + ": cannot lock ", std::string("of weights in RAM: this machine has "),
                               std::string("of RAM; run without --mlock")})
    EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
}

TEST(FileMap, AdviceNeverThrowsNorChangesTheBytes) {
  static_assert(noexcept(advise_pages(std::span<const uint8_t>(), MapAccess::Random)));
  TempDir dir;
  const std::vector<uint8_t> content = pattern(5 * page_bytes() + 7);
  test::write_bytes(dir.file("f.bin"), content);
  const FileMap map(dir.file("f.bin"));
  for (MapAccess a : {MapAccess::Sequential, MapAccess::Random, MapAccess::WillNeed, MapAccess::HugePages,
                      MapAccess::Normal}) {
    map.advise(a);
    advise_pages(map.bytes().subspan(page_bytes() + 3, 2 * page_bytes()), a);  // not page aligned
    advise_pages({}, a);
    EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
  }
  test::write_bytes(dir.file("e.bin"), {});
  const FileMap empty(dir.file("e.bin"));
  empty.advise(MapAccess::WillNeed);
  empty.prefault();
  empty.lock();
  EXPECT_EQ(empty.resident_bytes(), 0u);
}

TEST(FileMap, ResidentBytesFollowThePageCache) {
  TempDir dir;
  const std::vector<uint8_t> content = pattern(9 * page_bytes() + 100);
  const std::string path = dir.file("f.bin");
  test::write_bytes(path, content);
  const uint64_t pages = round_to_pages(content.size());
  {
    const FileMap map(path);
    // Nothing of it in RAM after eviction (unless the file lives on tmpfs).
    if (evict_from_page_cache(path)) {
      EXPECT_EQ(map.resident_bytes(), 0u);
    }
    // Reading every byte brings in every page, the last partial one whole.
    uint64_t sum = 0, expected_sum = 0;
    for (uint8_t b : map.bytes()) sum += b;
    for (uint8_t b : content) expected_sum += b;
    EXPECT_EQ(sum, expected_sum);
    EXPECT_EQ(map.resident_bytes(), pages);
    // A range inside one page counts that page; one across a boundary, both.
    EXPECT_EQ(resident_bytes(map.bytes().subspan(2 * page_bytes() + 5, 10)), page_bytes());
    EXPECT_EQ(resident_bytes(map.bytes().subspan(page_bytes() - 1, 2)), 2 * page_bytes());
  }
  // prefault reads evicted pages back without the caller touching them (pages
  // this process maps cannot be evicted, hence the new mapping).
  const bool evicted = evict_from_page_cache(path);
  const FileMap map(path);
  if (evicted) {
    EXPECT_EQ(map.resident_bytes(), 0u);
  }
  map.prefault();
  EXPECT_EQ(map.resident_bytes(), pages);
}

constexpr uint64_t kTwoMiB = uint64_t{2} << 20;

bool page_is_mapped(uintptr_t address) {
  unsigned char in_core = 0;
  return ::mincore(reinterpret_cast<void*>(address), page_bytes(), &in_core) == 0;
}

// Whether an inaccessible mapping ("---p" in /proc/self/maps: what is left
// of a PROT_NONE reservation) ends at `begin` or starts at `end`.
bool reservation_next_to(uintptr_t begin, uintptr_t end) {
  std::FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3) continue;
    if (std::string(perms) == "---p" && (hi == begin || lo == end)) found = true;
  }
  std::fclose(f);
  return found;
}

TEST(FileMap, BigMappingsStartAtA2MiBBoundaryAndReturnTheRestOfTheReservation) {
  TempDir dir;
  const std::vector<uint8_t> content = pattern(5 * kTwoMiB / 2 + 100);
  test::write_bytes(dir.file("f.bin"), content);
  const FileMap map(dir.file("f.bin"));
  const auto start = reinterpret_cast<uintptr_t>(map.data());
  EXPECT_EQ(start % kTwoMiB, 0u);
  EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
  // The address space reserved around it for the alignment is given back:
  // no inaccessible rest of the reservation on either side (the page before
  // may belong to another mapping when the reservation happened to be aligned).
  const uintptr_t end = start + round_to_pages(content.size());
  EXPECT_FALSE(reservation_next_to(start, end));
  EXPECT_TRUE(page_is_mapped(end - page_bytes()));
}

TEST(FileMap, DropCachedPagesEmptiesTheCacheAndKeepsTheBytes) {
  static_assert(noexcept(drop_cached_pages(std::span<const uint8_t>(), std::string())));
  TempDir dir;
  const std::vector<uint8_t> content = pattern(3 * kTwoMiB + 100);
  const std::string path = dir.file("f.bin");
  test::write_bytes(path, content);
  const FileMap map(path);
  map.prefault();
  ASSERT_EQ(map.resident_bytes(), round_to_pages(content.size()));
  struct statfs fs {};
  const bool tmpfs = ::statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fdatasync(fd), 0);  // dirty pages are not dropped
    ::close(fd);
  }
  map.drop_cached_pages();
  if (!tmpfs) {
    EXPECT_EQ(map.resident_bytes(), 0u);
  }
  EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
  drop_cached_pages({}, path);  // an empty range does nothing
  drop_cached_pages(map.bytes(), dir.file("missing.bin"));  // nor does a file that cannot be opened
  EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
}

// Three mappings as /proc/self/smaps lists them (fields trimmed).
constexpr const char* kSmaps =
    "7f0000000000-7f0000400000 r--s 00000000 fd:01 123 /models/a.gguf\n"
    "Size:               4096 kB\n"
    "Rss:                4096 kB\n"
    "AnonHugePages:         0 kB\n"
    "ShmemPmdMapped:        0 kB\n"
    "FilePmdMapped:      2048 kB\n"
    "VmFlags: rd sh mr mw me ms hg\n"
    "7f0000400000-7f0000600000 rw-p 00000000 00:00 0 \n"
    "Size:               2048 kB\n"
    "AnonHugePages:      2048 kB\n"
    "FilePmdMapped:         0 kB\n"
    "7f0000800000-7f0000a00000 r--s 00000000 fd:01 124 /models/b.gguf\n"
    "ShmemPmdMapped:     2048 kB\n";

TEST(FileMap, HugePageBytesSumTheSmapsEntriesOverlappingTheRange) {
  const uintptr_t a = 0x7f0000000000, b = 0x7f0000400000, c = 0x7f0000800000;
  EXPECT_EQ(huge_page_bytes_in_smaps(kSmaps, a, a + 1), kTwoMiB);                // the first mapping
  EXPECT_EQ(huge_page_bytes_in_smaps(kSmaps, a + 4096, b), kTwoMiB);             // ends at its end
  EXPECT_EQ(huge_page_bytes_in_smaps(kSmaps, b - 1, b + 1), 2 * kTwoMiB);        // the first two
  EXPECT_EQ(huge_page_bytes_in_smaps(kSmaps, b + kTwoMiB, c), 0u);               // the gap
  EXPECT_EQ(huge_page_bytes_in_smaps(kSmaps, c + 100, c + 200), kTwoMiB);        // the last (no newline at EOF)
  EXPECT_EQ(huge_page_bytes_in_smaps(kSmaps, a, c + kTwoMiB), 3 * kTwoMiB);      // all three
  EXPECT_EQ(huge_page_bytes_in_smaps("", a, c), 0u);
  EXPECT_EQ(huge_page_bytes({}), 0u);
}

TEST(FileMap, HugePagesAdviceReadsTheFileInHugePagesWhereTheKernelCan) {
  TempDir dir;
  const std::vector<uint8_t> content = pattern(4 * kTwoMiB);
  const std::string path = dir.file("f.bin");
  test::write_bytes(path, content);
  const FileMap map(path);
  map.advise(MapAccess::HugePages);
  map.drop_cached_pages();
  map.prefault();
  EXPECT_EQ(std::vector<uint8_t>(map.data(), map.data() + map.size()), content);
  const uint64_t huge = map.huge_page_bytes();
  if (huge == 0) GTEST_SKIP() << "this kernel or file system maps no file in huge pages";
  EXPECT_EQ(huge % kTwoMiB, 0u);
  EXPECT_LE(huge, content.size());
}

TEST(FileMap, ResidentBytesOfAnUnmappedRangeThrows) {
  const uint64_t page = page_bytes();
  void* p = ::mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ::munmap(p, page);
  const std::string msg = test::error_of([&] { (void)resident_bytes({static_cast<const uint8_t*>(p), page}); });
  EXPECT_NE(msg.find("mincore"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ds4
