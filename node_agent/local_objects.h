// LocalObjects: what cross-node object transfer (object_transfer.h) needs from this
// node's object store, and nothing more. The real implementation wraps the store
// client (object_store/); tests use testing/fake_local_objects.h.
//
// Ids are the store's object ids (1..64 arbitrary bytes). Sizes count the object's
// data only; metadata travels beside it.
//
// Thread safety: implementations must be thread-safe; ObjectTransfer calls them from
// many gRPC threads at once.
#ifndef DROVER_NODE_AGENT_LOCAL_OBJECTS_H_
#define DROVER_NODE_AGENT_LOCAL_OBJECTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace drover {

// Read-only bytes of a sealed object, pinned in the store until Release(id).
struct ReadView {
  const uint8_t* data = nullptr;
  int64_t size = 0;
  std::string metadata;
};

// Writable bytes of an object being created; valid until Seal(id) or Abort(id).
struct WriteView {
  uint8_t* data = nullptr;
  int64_t size = 0;
};

class LocalObjects {
 public:
  virtual ~LocalObjects() = default;

  // True if a sealed copy of `id` is in the store now (it may be evicted right after).
  virtual bool Contains(const std::string& id) = 0;

  // Pins a sealed object and returns its bytes. Every successful Acquire must be
  // matched by one Release(id). NOT_FOUND if there is no sealed copy.
  virtual absl::StatusOr<ReadView> Acquire(const std::string& id) = 0;
  // Drops one pin taken by Acquire.
  virtual void Release(const std::string& id) = 0;

  // Allocates a secondary (pulled, evictable once sealed) copy of `id`: `size` bytes of
  // data plus `metadata`. The caller fills the data, then calls Seal or Abort.
  // ALREADY_EXISTS if `id` exists (sealed or being created); RESOURCE_EXHAUSTED if the
  // store has no room even after evicting what it may.
  virtual absl::StatusOr<WriteView> CreateSecondary(const std::string& id, int64_t size,
                                                    const std::string& metadata) = 0;
  // Makes a created object immutable and readable. REQUIRES: created by CreateSecondary
  // and neither sealed nor aborted.
  virtual absl::Status Seal(const std::string& id) = 0;
  // Frees an object created by CreateSecondary and not yet sealed; no-op otherwise.
  virtual void Abort(const std::string& id) = 0;
};

}  // namespace drover

#endif  // DROVER_NODE_AGENT_LOCAL_OBJECTS_H_
