// StoreDraft: storage for a large tensor made inside a task worker (Tensor::Empty), taken
// from the node's object store as an object created but not yet sealed. The task writes
// it like any tensor; when the task returns it, it is sealed in place (its bytes never
// copied) and the caller reads it there. A draft that is not returned is aborted when
// its last Tensor goes, freeing the space.
//
// Thread safety: thread-safe.
#ifndef DROVER_SDK_RUNTIME_STORE_DRAFT_H_
#define DROVER_SDK_RUNTIME_STORE_DRAFT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "drover/internal/codec.h"
#include "drover/tensor.h"
#include "object_store/client.h"

namespace drover::internal {

class StoreDraft final : public Storage {
 public:
  // Tensors at least this large are drafts in a worker.
  static constexpr size_t kMinBytes = 64 * 1024;

  // The allocator a worker installs (SetLargeTensorAllocator): a draft in `store`, or
  // null if the store has no room (Tensor::Empty then uses the heap).
  static std::shared_ptr<Storage> Allocate(size_t bytes, DType dtype,
                                           const std::vector<int64_t>& shape, uint8_t** data);
  // Where Allocate takes drafts from (this worker's store, node and ids). Not owned.
  static void Configure(object_store::Client* store, std::string node_id,
                        std::function<std::string()> new_id);

  ~StoreDraft() override;
  bool writable() const override;
  bool in_store() const override;
  absl::string_view metadata() const override { return header_; }
  const std::string& object_id() const override { return id_; }

  // Seals the object in place: from now on it is an immutable object of this node's
  // store (pinned while this lives) and tensors over it are read-only. Idempotent.
  absl::StatusOr<StoredRef> Seal() const;

 private:
  StoreDraft(object_store::Client* store, object_store::MutableObject obj, std::string node_id,
             std::string header)
      : store_(store), obj_(std::move(obj)), id_(obj_.id), node_id_(std::move(node_id)),
        header_(std::move(header)), size_(obj_.data.size()) {}

  object_store::Client* const store_;
  const object_store::MutableObject obj_;
  const std::string id_;
  const std::string node_id_;
  const std::string header_;
  const size_t size_;
  mutable absl::Mutex mu_;
  mutable bool sealed_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::optional<object_store::ObjectRef> pin_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_STORE_DRAFT_H_
