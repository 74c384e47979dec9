// drover::Objects: the object store as worker code sees it. Objects put by any
// process of the cluster can be read by any other: on the same node in place (zero
// copy, shared memory), from another node after this node's agent pulled a copy.
//
//   auto objects = drover::Objects::FromEnvironment();   // in a process drover started
//   auto weights = drover::Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
//   DROVER_RETURN_IF_ERROR((*objects)->PutTensor("weights-7", *weights));
//   // ... any rank, any node:
//   auto t = (*objects)->GetTensor("weights-7", absl::Seconds(30));
//   auto w = t->span<float>();   // read in place in this node's shared memory
//
// Ownership: FromEnvironment/Connect return the only owner of the Objects. Get and
// GetTensor return a Buffer / Tensor that pins the object in this node's store; its
// bytes stay valid (and unchanged: objects are immutable once put) until the last copy
// of it is destroyed, even after the Objects is destroyed. Put copies the caller's
// bytes into the store once; the caller keeps its buffer.
//
// Thread safety: an Objects is thread-safe (the store connection serializes requests;
// fetches through the agent run concurrently). Buffers and Tensors may be used and
// destroyed on any thread.
//
// Errors (absl canonical codes): DEADLINE_EXCEEDED the object did not appear on this
// node or any other within the timeout; ALREADY_EXISTS a Put of an id that exists on
// this node; RESOURCE_EXHAUSTED no room in this node's store; UNAVAILABLE the node's
// store or agent is gone; FAILED_PRECONDITION not started by drover (the environment
// has no store); INVALID_ARGUMENT a bad id or a bad tensor header.
#ifndef DROVER_SDK_INCLUDE_DROVER_OBJECTS_H_
#define DROVER_SDK_INCLUDE_DROVER_OBJECTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "drover/tensor.h"

namespace drover {

namespace internal {
struct ObjectsAccess;  // sdk/internal/objects_internal.h
}  // namespace internal

class Objects {
 public:
  // From the environment drover gives every worker: DROVER_OBJECT_STORE_SOCKET (this
  // node's store), DROVER_AGENT_ADDRESS (this node's agent, for pulls from other
  // nodes) and DROVER_TOKEN_FILE (the cluster token). Without an agent address, Get
  // reads this node's store only. FAILED_PRECONDITION without a store, or with an
  // agent address but no token file; the token file's errors as Client::Connect.
  static absl::StatusOr<std::unique_ptr<Objects>> FromEnvironment();
  // The same with explicit values; empty agent_address = this node only.
  // UNAVAILABLE if no store listens at `store_socket`.
  static absl::StatusOr<std::unique_ptr<Objects>> Connect(const std::string& store_socket,
                                                          const std::string& agent_address,
                                                          const std::string& token);
  ~Objects();
  Objects(const Objects&) = delete;
  Objects& operator=(const Objects&) = delete;

  // Puts `bytes` (with `metadata` in front, e.g. a tensor header) as object `id` in
  // this node's store, sealed: readable by every process from now on.
  // Errors: ALREADY_EXISTS `id` is in this node's store; RESOURCE_EXHAUSTED no room
  // (the message says what holds the memory); INVALID_ARGUMENT a bad id (1 to 64 bytes).
  absl::Status Put(const std::string& id, absl::Span<const uint8_t> bytes,
                   absl::string_view metadata = {});
  absl::Status Put(const std::string& id, absl::string_view bytes,
                   absl::string_view metadata = {});

  // Returns object `id` (its data; Buffer::metadata() has its metadata), pinned, in
  // place in this node's store, waiting up to `timeout` for it to exist somewhere:
  // this node's store first; if it is not here, this node's agent pulls it from a node
  // that has it, and it is read here.
  // Errors: DEADLINE_EXCEEDED it did not appear in time (the message says where it was
  // looked for); UNAVAILABLE this node's store went away; other codes from the agent's
  // pull, with a message naming the agent.
  absl::StatusOr<Buffer> Get(const std::string& id, absl::Duration timeout);

  // Deletes this node's copy of `id` (once its last reference here goes). Copies on
  // other nodes are theirs to delete. NOT_FOUND if it is not in this node's store.
  absl::Status Delete(const std::string& id);

  // Puts a tensor: its header (dtype, shape, strides, storage offset, this host's byte
  // order) as the object's metadata and its storage (all the bytes it views) as the
  // object's 64-byte aligned data, which GetTensor reads in place. Errors as Put.
  absl::Status PutTensor(const std::string& id, const Tensor& tensor);
  // Get, then decodes and validates the tensor header against the object's data: the
  // Tensor views the object in place (read-only; Tensor::Clone for a writable copy).
  // Errors as Get; INVALID_ARGUMENT the object is not a valid tensor;
  // FAILED_PRECONDITION its elements are not in this host's byte order.
  absl::StatusOr<Tensor> GetTensor(const std::string& id, absl::Duration timeout);

 private:
  friend struct internal::ObjectsAccess;
  struct Impl;
  explicit Objects(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_OBJECTS_H_
