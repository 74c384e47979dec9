#include "object_store/allocator.h"

#include <algorithm>

namespace drover::object_store {

Allocator::Allocator(uint64_t capacity) : capacity_(capacity / kAlign * kAlign) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

uint64_t Allocator::RoundUp(uint64_t size) {
  if (size == 0) return kAlign;
  if (size > UINT64_MAX - (kAlign - 1)) return 0;
  return (size + kAlign - 1) / kAlign * kAlign;
}

void Allocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Allocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

std::optional<uint64_t> Allocator::Allocate(uint64_t size) {
  uint64_t rounded = RoundUp(size);
  if (rounded == 0 || rounded > capacity_) return std::nullopt;
  auto best = free_by_size_.lower_bound({rounded, 0});
  if (best == free_by_size_.end()) return std::nullopt;
  auto [block_size, offset] = *best;
  EraseFree(free_by_offset_.find(offset));
  if (block_size > rounded) InsertFree(offset + rounded, block_size - rounded);
  allocated_.emplace(offset, rounded);
  used_ += rounded;
  high_water_ = std::max(high_water_, offset + rounded);
  return offset;
}

bool Allocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return false;
  uint64_t size = a->second;
  allocated_.erase(a);
  used_ -= size;
  // Merge with the free block that ends where this one starts, and the one that
  // starts where it ends.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    EraseFree(next);
  }
  InsertFree(offset, size);
  return true;
}

std::optional<uint64_t> Allocator::BlockSize(uint64_t offset) const {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return std::nullopt;
  return a->second;
}

bool Allocator::Split(uint64_t offset, uint64_t at) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end() || at % kAlign != 0 || at <= offset) return false;
  const uint64_t end = offset + a->second;
  if (at >= end) return false;
  a->second = at - offset;
  allocated_.emplace(at, end - at);
  return true;
}

uint64_t Allocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace drover::object_store
