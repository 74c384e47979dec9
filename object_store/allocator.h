// Allocator: hands out 64-byte-aligned ranges of an abstract address space
// [0, capacity) — the object store uses it for offsets into its shared-memory arena.
// It never touches the memory itself.
//
// Best fit: free blocks are indexed by (size, offset), so an allocation takes the
// smallest block that fits (lowest offset among equals) and splits off the rest. Free
// coalesces a block with its free neighbours, so a steady stream of allocate/free of
// similar sizes keeps reusing the same space and the high-water mark stays put.
// Allocate and Free are O(log n) in the number of blocks.
//
// Thread safety: NOT thread-safe (the object table calls it from one thread).
#ifndef DROVER_OBJECT_STORE_ALLOCATOR_H_
#define DROVER_OBJECT_STORE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "object_store/object_id.h"

namespace drover::object_store {

class Allocator {
 public:
  static constexpr uint64_t kAlign = kAlignment;

  // `capacity` is rounded down to a multiple of 64.
  explicit Allocator(uint64_t capacity);

  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // The smallest multiple of 64 >= size (64 for size 0); 0 if that would overflow.
  static uint64_t RoundUp(uint64_t size);

  // A 64-aligned offset of a block of RoundUp(size) bytes, or nullopt if no free block
  // is that large (size 0 allocates 64 bytes, so every allocation has its own offset).
  std::optional<uint64_t> Allocate(uint64_t size);
  // Frees the block that Allocate returned at `offset`. Returns false — and changes
  // nothing — if `offset` is not the start of an allocated block (double free, forged
  // or stale offset).
  bool Free(uint64_t offset);
  // Size of the allocated block at `offset` (the rounded size), or nullopt.
  std::optional<uint64_t> BlockSize(uint64_t offset) const;
  // Splits the allocated block that starts at `offset` into two allocated blocks,
  // [offset, at) and [at, end), each freed on its own from then on (leases are carved
  // into objects this way). Returns false — and changes nothing — unless `offset` starts
  // an allocated block, `at` is a multiple of 64 and offset < at < end.
  bool Split(uint64_t offset, uint64_t at);

  uint64_t capacity() const { return capacity_; }
  // Bytes in allocated blocks (rounded sizes).
  uint64_t used() const { return used_; }
  uint64_t free_bytes() const { return capacity_ - used_; }
  // Size of the largest free block: the largest allocation that can succeed now.
  uint64_t largest_free() const;
  // Highest end offset any allocation has reached since construction.
  uint64_t high_water() const { return high_water_; }
  // Number of free blocks (a fragmentation measure; 1 when everything is free).
  uint64_t free_blocks() const { return free_by_offset_.size(); }
  uint64_t allocated_blocks() const { return allocated_.size(); }

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t used_ = 0;
  uint64_t high_water_ = 0;
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::unordered_map<uint64_t, uint64_t> allocated_;      // offset -> size
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_ALLOCATOR_H_
