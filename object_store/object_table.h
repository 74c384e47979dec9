// ObjectTable: the bookkeeping of one node's object store — which objects exist, where
// they live in the shared-memory arena, who references them, and what to evict or
// spill under memory pressure. No I/O with clients happens here (store_server.h does
// that); spilling writes files to the spill directory.
//
// Model (see docs/object_store.md):
// - An object is created (writable, unsealed) by one client, then sealed (immutable).
//   Only sealed objects can be read. An unsealed object whose creator goes away is
//   aborted and its space freed.
// - Each client holds references; an object with any reference is pinned: never
//   evicted, spilled or freed. Delete of a referenced object takes effect when the
//   last reference is released.
// - Primary copies (created on this node) are spilled to disk under pressure and
//   restored on the next Get; secondary copies (pulled from another node) are evicted
//   (dropped) first, least recently used first.
// - Allocation is 64-byte aligned; freed space is reused.
//
// Thread safety: NOT thread-safe; the store server calls it from its single event-loop
// thread. Errors: NOT_FOUND (unknown id), ALREADY_EXISTS (double create),
// FAILED_PRECONDITION (seal of a sealed object, write to a sealed one, wrong client),
// INVALID_ARGUMENT (malformed request), RESOURCE_EXHAUSTED (no memory even after
// evicting and spilling everything unreferenced; the message says how much was asked,
// how much is free, and what holds the rest).
#ifndef DROVER_OBJECT_STORE_OBJECT_TABLE_H_
#define DROVER_OBJECT_STORE_OBJECT_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "object_store/arena_io.h"
#include "object_store/object_id.h"

namespace drover::object_store {

// Where an object's bytes are: [offset, offset + metadata_size) holds metadata, then
// data from offset + data_offset for data_size bytes (data_offset is 64-aligned).
// data_offset is relative to offset: RoundUp(metadata_size, 64), 0 without metadata.
struct ObjectLocation {
  uint64_t offset = 0;
  uint64_t data_offset = 0;
  uint64_t data_size = 0;
  uint64_t metadata_size = 0;
  // Created mutable (Create's `mutable_object`): holders may write it after the seal.
  bool mutable_object = false;
};

struct TableOptions {
  // Bytes of the arena the table may allocate from.
  uint64_t capacity = 0;
  // Directory for spilled primary copies ("" disables spilling). Spill files an earlier
  // table left there (a store killed by SIGKILL) are removed when the table is made:
  // the new table starts empty and could not read them.
  std::string spill_dir;
  // Upper bound for bytes in the spill directory.
  uint64_t spill_capacity = 0;
  // Upper bounds on leased bytes per client and over all clients; 0 means capacity/16
  // and capacity/4.
  uint64_t max_client_lease = 0;
  uint64_t max_total_lease = 0;
};

struct TableStats {
  uint64_t capacity = 0;
  uint64_t used = 0;  // allocated bytes, including alignment
  uint64_t largest_free = 0;
  uint64_t objects = 0;  // in memory
  uint64_t sealed = 0;
  uint64_t referenced = 0;  // objects with at least one reference
  uint64_t spilled_objects = 0;
  uint64_t spilled_bytes = 0;
  uint64_t evictions = 0;  // secondary copies dropped, total
  uint64_t spills = 0;     // primary copies written to disk, total
  uint64_t restores = 0;   // spilled copies read back, total
  uint64_t leased_bytes = 0;  // arena space clients hold as leases (not objects yet)
  uint64_t lease_pieces = 0;  // the leased ranges, over all clients
};

// A range of the arena leased to one client (see ObjectTable::Lease).
struct LeaseRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// What the table tells about one visible (sealed, not deleted) object.
struct ObjectInfo {
  ObjectId id;
  uint64_t data_size = 0;
  uint64_t metadata_size = 0;
  // Created on this node (spilled under pressure) rather than pulled (evicted).
  bool primary = true;
};

class ObjectTable {
 public:
  // `arena` must outlive the table.
  ObjectTable(TableOptions options, ArenaIo* arena);
  ~ObjectTable();

  // Allocates data_size + metadata bytes and records the object as unsealed, owned by
  // `client`, with one reference held by it. `primary` is false for copies pulled from
  // another node (evicted rather than spilled). The metadata is copied into the arena
  // here; the client writes the data. INVALID_ARGUMENT for an id outside 1..64 bytes or
  // an empty object or one larger than the arena, or a mutable secondary copy;
  // ALREADY_EXISTS also while a deleted object of that id is still referenced.
  // `mutable_object` marks an object its holders keep writing after the seal (a
  // drover::SharedTensor): the table treats it as any primary object (pinned while
  // referenced); its locations say it is mutable, so readers (and the agents, which
  // never copy one to another node) can tell.
  absl::StatusOr<ObjectLocation> Create(ClientId client, const ObjectId& id, uint64_t data_size,
                                        const std::string& metadata, bool primary = true,
                                        bool mutable_object = false);
  // Makes the object immutable and visible to Get. Only its creator may seal it.
  absl::Status Seal(ClientId client, const ObjectId& id);
  // Frees an unsealed object (its creator gave up).
  absl::Status Abort(ClientId client, const ObjectId& id);
  // Takes a reference to a sealed object, restoring it from disk if it was spilled.
  // NOT_FOUND if absent; UNAVAILABLE if it exists but is not sealed yet (the server
  // then waits for Seal).
  absl::StatusOr<ObjectLocation> Get(ClientId client, const ObjectId& id);
  // Drops one reference of `client`. NOT_FOUND if it holds none.
  absl::Status Release(ClientId client, const ObjectId& id);
  // Deletes the object now if unreferenced, else once the last reference goes (an
  // unsealed one once it is sealed and released, or aborted). From this call on the
  // object is invisible: Contains is false, Get and Delete give NOT_FOUND.
  absl::Status Delete(const ObjectId& id);
  // True if a sealed copy exists (in memory or spilled).
  bool Contains(const ObjectId& id) const;
  // Metadata bytes of a sealed object.
  absl::StatusOr<std::string> Metadata(const ObjectId& id) const;
  // Releases every reference of `client`, aborts its unsealed objects and frees its
  // leases. Returns the ids it aborted.
  std::vector<ObjectId> DisconnectClient(ClientId client);

  // Leases: a client reserves a range of free arena space once, then carves objects
  // out of it itself (writing metadata and data in place) and registers each with one
  // SealLeased, which makes it a sealed object at once: a put in one round trip
  // instead of two (Create, Seal). Leased space is not an object: never evicted,
  // spilled or visible; it goes back with ReturnLease or when the client disconnects.
  //
  // Reserves `bytes` (rounded up to 64) of free space for `client`. A lease only takes
  // space that is free now: it never evicts or spills anything (RESOURCE_EXHAUSTED if
  // there is no free block that large; the client then creates its objects one by
  // one, and those do make room). At most max_client_lease bytes per client and
  // max_total_lease over all clients (RESOURCE_EXHAUSTED beyond), kMaxLeasePieces
  // ranges per client.
  static constexpr uint64_t kMaxLeasePieces = 1024;
  absl::StatusOr<LeaseRange> Lease(ClientId client, uint64_t bytes);
  // Turns [offset, offset + RoundUp64(RoundUp64(metadata_size) + data_size)) of a
  // lease `client` holds into the sealed primary object `id`, whose metadata (at
  // offset) and data (at offset + data_offset) the client has written; the object has
  // no reference. The range leaves the lease whatever the outcome once it is found
  // in one (a failed put's space is freed). INVALID_ARGUMENT if the range is not
  // 64-aligned and inside one lease range of this client, or the sizes are bad;
  // ALREADY_EXISTS as Create.
  absl::StatusOr<ObjectLocation> SealLeased(ClientId client, const ObjectId& id, uint64_t offset,
                                            uint64_t data_size, uint64_t metadata_size);
  // True if [offset, offset + size) lies inside one lease range `client` holds.
  bool HoldsLease(ClientId client, uint64_t offset, uint64_t size) const;
  // Frees [offset, offset + size) of a lease of `client` (64-aligned, inside one lease
  // range). INVALID_ARGUMENT otherwise.
  absl::Status ReturnLease(ClientId client, uint64_t offset, uint64_t size);

  TableStats Stats() const;
  // The object if it is visible (sealed and not deleted; in memory or spilled), else
  // NOT_FOUND. Takes no reference.
  absl::StatusOr<ObjectInfo> Info(const ObjectId& id) const;
  // Every visible object, in no particular order (for subscribers' snapshots).
  std::vector<ObjectInfo> List() const;

  // Called after every successful Seal (the server wakes waiting Gets). The table's
  // state is final when it runs, so it may call back into the table.
  void set_on_sealed(std::function<void(const ObjectId&)> cb);
  // Called for each object the table drops by itself: a secondary copy evicted under
  // memory pressure, or a spilled object whose spill file was lost (found on Get). The
  // agent updates the object directory from it. Runs after the Create or Get that
  // caused it has finished its changes, so it may call back into the table.
  void set_on_evicted(std::function<void(const ObjectId&)> cb);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::object_store

#endif  // DROVER_OBJECT_STORE_OBJECT_TABLE_H_
