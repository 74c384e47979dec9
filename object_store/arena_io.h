// ArenaIo: read/write access to the bytes of the store's arena, all the object table
// needs of it (to spill objects to disk and restore them). The server's Arena
// (arena.h) implements it; table tests use a heap buffer.
//
// Thread safety: as the implementation's; the table calls it from the store's loop.
#ifndef DROVER_OBJECT_STORE_ARENA_IO_H_
#define DROVER_OBJECT_STORE_ARENA_IO_H_

#include <cstdint>

namespace drover::object_store {

class ArenaIo {
 public:
  virtual ~ArenaIo() = default;
  // The byte at `offset`. REQUIRES: offset <= the arena's capacity.
  virtual char* At(uint64_t offset) = 0;
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_ARENA_IO_H_
