// drover::Objects: the object store as worker code sees it. Objects put by any
// process of the cluster can be read by any other: on the same node in place (zero
// copy, shared memory), from another node after this node's agent pulled a copy.
//
//   auto objects = drover::Objects::FromEnvironment();   // in a process drover started
//   DROVER_RETURN_IF_ERROR((*objects)->PutTensor("weights-7", meta, bytes));
//   // ... any rank, any node:
//   auto t = (*objects)->GetTensor("weights-7", absl::Seconds(30));
//   auto view = object_store::ViewAs<float>(t->meta, t->ref.data().data(), t->ref.data().size());
//
// Ownership: FromEnvironment/Connect return the only owner of the Objects. Get and
// GetTensor return an object_store::ObjectRef that pins the object in this node's
// store; its bytes stay valid (and unchanged: objects are immutable once put) until
// the ref is destroyed, even after the Objects is destroyed. Put copies the caller's
// bytes into the store once; the caller keeps its buffer.
//
// Thread safety: an Objects is thread-safe (the store connection serializes requests;
// fetches through the agent run concurrently). ObjectRefs may be used and destroyed on
// any thread.
//
// Errors (absl canonical codes): DEADLINE_EXCEEDED the object did not appear on this
// node or any other within the timeout; ALREADY_EXISTS a Put of an id that exists on
// this node; RESOURCE_EXHAUSTED no room in this node's store; UNAVAILABLE the node's
// store or agent is gone; FAILED_PRECONDITION not started by drover (the environment
// has no store); INVALID_ARGUMENT a bad tensor header.
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
#include "object_store/client.h"
#include "object_store/tensor.h"

namespace drover {

// A tensor read from the store: the pinned object and its decoded, validated header.
// The elements are ref.data() (64-byte aligned, read in place); see
// object_store::ViewAs for a typed view.
struct TensorRef {
  object_store::ObjectRef ref;
  object_store::TensorMeta meta;
};

class Objects {
 public:
  // From the environment drover gives every worker: DROVER_OBJECT_STORE_SOCKET (this
  // node's store), DROVER_AGENT_ADDRESS (this node's agent, for pulls from other
  // nodes) and DROVER_TOKEN_FILE (the cluster token). Without an agent address or
  // token, Get reads this node's store only. FAILED_PRECONDITION without a store.
  static absl::StatusOr<std::unique_ptr<Objects>> FromEnvironment();
  // The same with explicit values; empty agent_address = this node only.
  static absl::StatusOr<std::unique_ptr<Objects>> Connect(const std::string& store_socket,
                                                          const std::string& agent_address,
                                                          const std::string& token);
  ~Objects();
  Objects(const Objects&) = delete;
  Objects& operator=(const Objects&) = delete;

  // Puts `bytes` (with `metadata` in front, e.g. a tensor header) as object `id` in
  // this node's store, sealed: readable by every process from now on.
  absl::Status Put(const std::string& id, absl::Span<const uint8_t> bytes,
                   absl::string_view metadata = {});
  absl::Status Put(const std::string& id, absl::string_view bytes,
                   absl::string_view metadata = {});

  // Returns object `id`, pinned, waiting up to `timeout` for it to exist somewhere:
  // this node's store first; if it is not here, this node's agent pulls it from a node
  // that has it (FetchObject), and it is read here.
  absl::StatusOr<object_store::ObjectRef> Get(const std::string& id, absl::Duration timeout);

  // Deletes this node's copy of `id` (once its last reference here goes). Copies on
  // other nodes are theirs to delete.
  absl::Status Delete(const std::string& id);

  // Puts a tensor: `meta` encoded as the object's metadata (tensor.h) and `data`, the
  // storage the tensor views (meta.data_size bytes), as its 64-byte aligned data.
  // INVALID_ARGUMENT if `meta` does not validate or data.size() != meta.data_size.
  absl::Status PutTensor(const std::string& id, const object_store::TensorMeta& meta,
                         absl::Span<const uint8_t> data);
  // Get, then decodes and validates the tensor header against the object's data.
  absl::StatusOr<TensorRef> GetTensor(const std::string& id, absl::Duration timeout);

  // This node's store client (for Create/Seal without a copy, Wait, Stats, ...).
  object_store::Client& store() { return *store_; }

 private:
  struct Agent;
  Objects(std::unique_ptr<object_store::Client> store, std::unique_ptr<Agent> agent);
  // Asks this node's agent to pull `id` here, waiting until `deadline`.
  absl::Status Fetch(const std::string& id, absl::Time deadline);

  std::unique_ptr<object_store::Client> store_;
  std::unique_ptr<Agent> agent_;  // null: this node only
};

}  // namespace drover

#endif  // DROVER_SDK_INCLUDE_DROVER_OBJECTS_H_
