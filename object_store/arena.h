// Arena: one shared-memory region that holds a node's objects. The store server
// creates it (Create) and passes fd() to clients over its Unix socket (SCM_RIGHTS);
// each client maps it once (Map) and from then on reads and writes objects in place.
//
// Security: the region is a memfd (memfd_create), an anonymous file that lives in no
// filesystem: there is no path anyone could open, so the only way to reach it is to be
// handed the descriptor (or to ptrace the owner). The store hands it only to clients
// that connected to its owner-only socket. MFD_CLOEXEC keeps it out of spawned children.
//
// Memory: pages of a fresh region cost ~4 µs each on first touch (~0.8 GB/s for a
// memcpy into them versus ~9 GB/s into touched pages). The store calls Prefault once
// at start so every later put runs at memcpy speed; the memory is then committed.
//
// Ownership: the Arena owns its mapping and its descriptor (a dup for Map); both are
// released by the destructor. Thread safety: the object is immutable after
// construction except for the bytes, which the callers synchronize.
#ifndef DROVER_OBJECT_STORE_ARENA_H_
#define DROVER_OBJECT_STORE_ARENA_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "object_store/arena_io.h"

namespace drover::object_store {

class Arena : public ArenaIo {
 public:
  // A new region of `capacity` bytes (rounded up to whole pages), zero-filled and not
  // yet touched. With `huge_pages_advice`, asks the kernel for transparent huge pages
  // (madvise MADV_HUGEPAGE; honoured when /sys/kernel/mm/transparent_hugepage/
  // shmem_enabled is "advise" or "always", ignored otherwise).
  static absl::StatusOr<std::unique_ptr<Arena>> Create(uint64_t capacity,
                                                       bool huge_pages_advice = false);
  // Maps a region created elsewhere, read-write (clients write the objects they
  // create). `fd` stays the caller's: the Arena keeps its own dup. Fails if the file
  // is smaller than `capacity`.
  static absl::StatusOr<std::unique_ptr<Arena>> Map(int fd, uint64_t capacity);

  ~Arena() override;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  int fd() const { return fd_; }
  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }

  // Touches every page of [offset, offset + len) for writing (whole pages around it)
  // so that later writes there take no page faults: madvise(MADV_POPULATE_WRITE) on
  // Linux >= 5.14, else an atomic no-op write per page. Contents are unchanged.
  // RESOURCE_EXHAUSTED if the kernel cannot supply the memory.
  absl::Status Prefault(uint64_t offset, uint64_t len);

  // ArenaIo. REQUIRES: offset <= capacity().
  char* At(uint64_t offset) override { return base_ + offset; }

 private:
  Arena(int fd, char* base, uint64_t capacity) : fd_(fd), base_(base), capacity_(capacity) {}

  int fd_;
  char* base_;
  uint64_t capacity_;
};

// The default arena size: min(30% of MemTotal, 90% of the free space of /dev/shm,
// the total size of /dev/shm), rounded down to whole MiB. /dev/shm is the operator's
// statement of how much shared memory this machine (or container) may use, even though
// the memfd does not live there. FAILED_PRECONDITION, naming the figures, if the result
// is below kMinArenaCapacity.
inline constexpr uint64_t kMinArenaCapacity = 64ull << 20;
absl::StatusOr<uint64_t> DefaultArenaCapacity();
// The same computation from given figures (bytes); for tests.
absl::StatusOr<uint64_t> DefaultArenaCapacityFrom(uint64_t mem_total, uint64_t shm_free,
                                                  uint64_t shm_total);

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_ARENA_H_
