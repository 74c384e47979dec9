// ParallelCopy: memcpy of large buffers on several threads.
//
// One core's copy into memory beyond the caches is bounded by how many cache lines it
// keeps in flight, not by the memory system: on the 2-core development machine one
// thread copies 64 MiB at 8-10 GB/s, two at 12-13 GB/s. Puts of large objects into the
// arena (Client::Put) copy this way, as Ray's plasma client does with its memcopy
// threads.
//
// The helper threads form one process-wide pool, started on first use: min(4, CPUs) - 1
// helpers, DROVER_COPY_THREADS (total threads, the caller included; 1 turns it off)
// overriding. The caller copies too: pieces are taken from a shared counter, so a
// helper that is not scheduled costs nothing but its piece. One copy uses the pool at
// a time; a copy that finds it busy, or is small, runs as a plain memcpy on the caller.
// A child process after fork() starts a pool of its own.
//
// Thread safety: ParallelCopy may be called from any thread.
#ifndef DROVER_OBJECT_STORE_PARALLEL_COPY_H_
#define DROVER_OBJECT_STORE_PARALLEL_COPY_H_

#include <cstddef>

namespace drover::object_store {

// Below this, one memcpy (the caches make it fast, and waking helpers costs ~10 µs).
inline constexpr size_t kMinParallelCopyBytes = 8u << 20;

// Copies `n` bytes from `src` to `dst` (not overlapping), on the pool when `n` is at
// least kMinParallelCopyBytes. Returns when every byte is copied.
void ParallelCopy(void* dst, const void* src, size_t n);

// How many threads (the caller included) a large copy uses in this process.
int ParallelCopyThreads();

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_PARALLEL_COPY_H_
