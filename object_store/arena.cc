#include "object_store/arena.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/log.h"
#include "common/status_macros.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace drover::object_store {
namespace {

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

}  // namespace

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(uint64_t capacity, bool huge_pages_advice) {
  if (capacity == 0) return absl::InvalidArgumentError("arena capacity must be > 0");
  const uint64_t page = PageSize();
  if (capacity > UINT64_MAX - page) {
    return absl::InvalidArgumentError(absl::StrCat("arena capacity ", capacity, " too large"));
  }
  capacity = (capacity + page - 1) / page * page;
  int fd = ::memfd_create("drover-arena", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  if (::ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    int err = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size the object store arena to ", Mib(capacity), ": ",
                     std::strerror(err)));
  }
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map the object store arena (", Mib(capacity),
                     "): ", std::strerror(err)));
  }
  if (huge_pages_advice && ::madvise(p, capacity, MADV_HUGEPAGE) != 0) {
    DROVER_LOG(INFO) << "madvise(MADV_HUGEPAGE) on the arena: " << std::strerror(errno)
                     << " (continuing with small pages)";
  }
  return std::unique_ptr<Arena>(new Arena(fd, static_cast<char*>(p), capacity));
}

absl::StatusOr<std::unique_ptr<Arena>> Arena::Map(int fd, uint64_t capacity) {
  if (capacity == 0) return absl::InvalidArgumentError("arena capacity must be > 0");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena descriptor ", fd, ": ", std::strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) < capacity) {
    return absl::InvalidArgumentError(absl::StrCat("arena descriptor ", fd, " holds ",
                                                   st.st_size, " bytes, expected at least ",
                                                   capacity));
  }
  int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("dup arena fd: ", std::strerror(errno)));
  }
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::close(own);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map the object store arena (", Mib(capacity),
                     "): ", std::strerror(err)));
  }
  return std::unique_ptr<Arena>(new Arena(own, static_cast<char*>(p), capacity));
}

Arena::~Arena() {
  if (base_ != nullptr) ::munmap(base_, capacity_);
  if (fd_ >= 0) ::close(fd_);
}

absl::Status Arena::Prefault(uint64_t offset, uint64_t len) {
  if (offset > capacity_ || len > capacity_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("prefault range [", offset, ", +", len,
                                                   ") outside the arena of ", capacity_));
  }
  if (len == 0) return absl::OkStatus();
  const uint64_t page = PageSize();
  uint64_t begin = offset / page * page;
  uint64_t end = std::min(capacity_, (offset + len + page - 1) / page * page);
  static std::atomic<bool> populate_supported{true};
  if (populate_supported.load(std::memory_order_relaxed)) {
    if (::madvise(base_ + begin, end - begin, MADV_POPULATE_WRITE) == 0) {
      return absl::OkStatus();
    }
    int err = errno;
    if (err != EINVAL) {
      // ENOMEM / EFAULT / EHWPOISON: the kernel could not supply the pages.
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot populate ", Mib(end - begin), " of the object store arena: ",
                       std::strerror(err)));
    }
    populate_supported.store(false, std::memory_order_relaxed);  // kernel older than 5.14
  }
  // A write fault per page that leaves the byte unchanged, even if another process
  // writes it concurrently. (No way to report a failure here: running out of memory
  // raises SIGBUS, which is why MADV_POPULATE_WRITE is preferred.)
  for (uint64_t off = begin; off < end; off += page) {
    __atomic_fetch_or(reinterpret_cast<unsigned char*>(base_ + off), 0, __ATOMIC_RELAXED);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DefaultArenaCapacityFrom(uint64_t mem_total, uint64_t shm_free,
                                                  uint64_t shm_total) {
  uint64_t cap = std::min({mem_total / 10 * 3, shm_free / 10 * 9, shm_total});
  cap = cap / (1 << 20) * (1 << 20);
  if (cap < kMinArenaCapacity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the default object store size would be ", Mib(cap), " (30% of memory ",
        Mib(mem_total), ", 90% of /dev/shm's free ", Mib(shm_free), ", /dev/shm total ",
        Mib(shm_total), "), below the minimum of ", Mib(kMinArenaCapacity),
        ": enlarge /dev/shm (e.g. docker run --shm-size=8g) or set the object store size "
        "explicitly"));
  }
  return cap;
}

absl::StatusOr<uint64_t> DefaultArenaCapacity() {
  DROVER_ASSIGN_OR_RETURN(const std::string meminfo, ReadFile("/proc/meminfo"));
  uint64_t mem_total = 0;
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, "kB");
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &mem_total)) mem_total *= 1024;
    break;
  }
  if (mem_total == 0) return absl::InternalError("no MemTotal in /proc/meminfo");
  struct statvfs vfs;
  if (::statvfs("/dev/shm", &vfs) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("statvfs /dev/shm: ", std::strerror(errno),
                     "; set the object store size explicitly"));
  }
  uint64_t shm_free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  uint64_t shm_total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  return DefaultArenaCapacityFrom(mem_total, shm_free, shm_total);
}

}  // namespace drover::object_store
