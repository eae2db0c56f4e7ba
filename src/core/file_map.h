// A whole file mapped read-only into memory. The mapping lives as long as the
// FileMap; views into it (spans, pointers) must not outlive it.
//
// The weights are used in place from such a mapping (MAP_SHARED): their pages
// are the kernel's page cache, shared with other processes mapping the same
// file and never copied. Mappings of 2 MiB or more start at a 2 MiB boundary,
// so that the kernel can map the file's huge pages (MapAccess::HugePages). The page helpers below act on any byte range inside
// a mapping (a whole file or one tensor), widened to whole pages.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ds4 {

// How a range will be read, as madvise(2) advice.
enum class MapAccess {
  Normal,      // the kernel's default read-around on a fault
  Sequential,  // aggressive readahead; pages behind may be dropped early
  Random,      // no read-around: a fault reads only the page it needs
  WillNeed,    // start reading the range into the page cache now (asynchronous)
  HugePages,   // map (and read) it in 2 MiB pages where the kernel and file
               // system can (MADV_HUGEPAGE): kernels streaming weights take a
               // TLB miss every 4 KiB otherwise
};

// mlock(2)s the pages of `range` (all of them are read in first). On failure
// throws ds4::Error naming `what`, the size, the cause and the fix, e.g.
// "<what>: cannot lock 75.32 GiB of weights in RAM: the locked-memory limit is
// 8.00 MiB (ulimit -l); raise it or run without --mlock".
// `instead` is the way out the message ends with ("" for none).
void lock_pages(std::span<const uint8_t> range, const std::string& what,
                const std::string& instead = "run without --mlock");

// madvise(2)s `range`. Advice only: a kernel that refuses it changes nothing
// that is correct, so failures are ignored.
void advise_pages(std::span<const uint8_t> range, MapAccess access) noexcept;

// Maps every page of `range` into this process now, reading from disk what
// the page cache lacks (MADV_POPULATE_READ, or one read a page on kernels
// older than 5.14), so later reads take no page faults.
void prefault_pages(std::span<const uint8_t> range) noexcept;

// Bytes of the mappings holding `range` that are mapped in huge pages (the
// FilePmdMapped + AnonHugePages + ShmemPmdMapped of /proc/self/smaps), over
// every mapping (VMA) that overlaps `range`, whole; 0 when none is.
uint64_t huge_page_bytes(std::span<const uint8_t> range);

// The same from the text of an smaps file (the parser behind
// huge_page_bytes; unmapped addresses give 0).
uint64_t huge_page_bytes_in_smaps(std::string_view smaps, uintptr_t begin, uintptr_t end);

// Drops `range`'s pages from this process (MADV_DONTNEED, later reads fault
// them back in) and then the pages of the file `path` from the page cache
// (POSIX_FADV_DONTNEED: clean pages that no other process maps), so that the
// next reads bring them back from the file, in huge pages after
// MapAccess::HugePages. Best effort: failures change no byte that is read.
void drop_cached_pages(std::span<const uint8_t> range, const std::string& path) noexcept;

// Unmaps `range`'s pages (widened to whole pages) from this process
// (MADV_DONTNEED on a read-only file mapping): they leave its RSS, stay in the
// page cache, and a later read maps them again. For a tool that streams
// through a file once (ds4-quantize). Advice only: failures are ignored.
void release_pages(std::span<const uint8_t> range) noexcept;

// Bytes of `range`'s pages that are in RAM (mincore(2)), in whole pages; the
// page that holds range's last byte counts fully. Throws ds4::Error when the
// range is not mapped.
uint64_t resident_bytes(std::span<const uint8_t> range);

// The page size (sysconf(_SC_PAGESIZE)).
uint64_t page_bytes();

class FileMap {
 public:
  // Maps `path` read-only. Throws ds4::Error naming the path when it cannot
  // be opened, is not a regular file, or cannot be mapped. An empty file
  // gives an empty mapping (data() == nullptr, size() == 0).
  explicit FileMap(const std::string& path);
  FileMap(FileMap&& other) noexcept;
  FileMap& operator=(FileMap&& other) noexcept;
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;
  ~FileMap();  // munmap also unlocks

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

  // The page helpers over the whole mapping; lock() names the path.
  void lock() const { lock_pages(bytes(), path_); }
  void advise(MapAccess access) const noexcept { advise_pages(bytes(), access); }
  void prefault() const noexcept { prefault_pages(bytes()); }
  uint64_t huge_page_bytes() const { return ds4::huge_page_bytes(bytes()); }
  void drop_cached_pages() const noexcept { ds4::drop_cached_pages(bytes(), path_); }
  uint64_t resident_bytes() const { return ds4::resident_bytes(bytes()); }

 private:
  void unmap() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ds4
