// Tensors whose storage is an object of this node's store that this process writes or
// owns, and the codec context that hands such objects from a sender to a receiver.
//
// StoreObjectStorage is the Storage (drover/tensor.h) behind
//   - drover::AllocateInStore: an object this process created and has not sealed yet.
//     The tensor is writable; sending it (a Put, a task argument or result, a queue
//     item) seals it where it was written, so its bytes are never copied, and the
//     tensor is read-only from then on;
//   - tensors decoded from a queue item or a DataLoader result: a sealed object that
//     the receiving process now owns, deleted (on its node, and the copy pulled here)
//     when the last Tensor over it goes, unless it was sent on first (then the value it
//     went into owns it: ownership moves with the tensor, never copied).
//
// Ownership rule of sent values (the codec's, tensor_codec.cc): a store object made
// while encoding (a large heap tensor put into the store) or handed over by a
// StoreObjectStorage is listed in EncodedValue::stored and belongs to the value; a
// tensor already in the store that this process does not own is referred to by id.
//
// Thread safety: a StoreObjectStorage may be used from any thread (Send takes a lock);
// OwningCodecContext is used by one thread at a time (the decoding one).
#ifndef DROVER_SDK_RUNTIME_STORE_TENSOR_H_
#define DROVER_SDK_RUNTIME_STORE_TENSOR_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "drover/internal/codec.h"
#include "drover/tensor.h"
#include "object_store/client.h"
#include "object_store/tensor.h"

namespace drover::internal {

class StoreObjectStorage final : public Storage {
 public:
  // Deletes objects from the stores holding them (StoreAccess::Delete).
  using DeleteFn = std::function<void(const std::vector<StoredRef>&)>;

  // An unsealed object `object` of `store` (this process's client), at `where`.
  StoreObjectStorage(object_store::Client* store, object_store::MutableObject object,
                     StoredRef where, DeleteFn del);
  // A sealed object pinned by `ref`. `owned`: delete `copies` (where the object is: its
  // node, and this node if it was pulled here) when the last Tensor over it goes.
  StoreObjectStorage(object_store::ObjectRef ref, std::vector<StoredRef> copies, bool owned,
                     DeleteFn del);
  ~StoreObjectStorage() override;

  bool writable() const override;
  bool in_store() const override;
  absl::string_view metadata() const override { return metadata_; }
  const std::string& object_id() const override { return id_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // The storage behind `b` if it is a StoreObjectStorage, else null.
  static const StoreObjectStorage* Of(const Buffer& b);

  // For a value being sent: seals the object if it is not yet (from now on the tensor is
  // read-only) and hands it over. Returns where it is and whether the value now owns it
  // (this storage did; later sends refer to it without owning).
  struct Sent {
    StoredRef where;
    bool owned = false;
  };
  absl::StatusOr<Sent> Send() const;
  // Seals the object now (read-only from here on), keeping it owned by this storage.
  absl::Status Seal() const;

  // A value that took objects over was not delivered after all (a queue put that failed):
  // the storages that handed them over own them again; the others are deleted.
  static void ReturnOrDelete(const std::vector<StoredRef>& objects);

 private:
  absl::Status SealLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  object_store::Client* const store_;
  const std::string id_;
  const std::string metadata_;
  const uint8_t* const data_;
  const size_t size_;
  const DeleteFn del_;
  mutable absl::Mutex mu_;
  mutable object_store::MutableObject unsealed_ ABSL_GUARDED_BY(mu_);
  mutable bool sealed_ ABSL_GUARDED_BY(mu_);
  mutable object_store::ObjectRef ref_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<StoredRef> copies_ ABSL_GUARDED_BY(mu_);
  mutable bool owned_ ABSL_GUARDED_BY(mu_);
};

// The row-major layout of a tensor of `shape`, its data_size set; INVALID_ARGUMENT for
// an unknown dtype, a negative dimension, more than 16 or a size that overflows.
absl::StatusOr<object_store::TensorMeta> ContiguousStoreMeta(DType dtype,
                                                           const std::vector<int64_t>& shape);

// A writable, zero-filled contiguous tensor in a new object of this node's store
// (drover::AllocateInStore). FAILED_PRECONDITION without a runtime or a store here;
// the store's errors (RESOURCE_EXHAUSTED naming what holds the memory) otherwise.
absl::StatusOr<Tensor> NewStoreTensor(DType dtype, std::vector<int64_t> shape, bool zero = true);

// The codec context of a receiver that takes over the objects of a value: tensors over
// the objects in `owned` become StoreObjectStorage that own them; others are read as
// usual. Objects of `owned` that no tensor took (the value did not use them, or
// decoding failed) are deleted when the context goes. With `pin`, tensors that came
// inline are copied into a new object of this node's store (owned the same way), so
// every tensor decoded is in the arena. Delegates the rest to the runtime's context.
class OwningCodecContext final : public CodecContext {
 public:
  OwningCodecContext(std::vector<StoredRef> owned, bool pin);
  ~OwningCodecContext() override;
  absl::StatusOr<StoredRef> Store(absl::string_view data, absl::string_view metadata) override;
  absl::StatusOr<ValueView> Load(const StoredRef& ref) override;
  absl::StatusOr<Buffer> LoadBuffer(const StoredRef& ref) override;
  std::string node_id() override;
  Buffer InlineBuffer(absl::string_view bytes) override;

 private:
  std::vector<StoredRef> owned_;
  const bool pin_;
  std::set<std::string> taken_;
};

}  // namespace drover::internal

#endif  // DROVER_SDK_RUNTIME_STORE_TENSOR_H_
